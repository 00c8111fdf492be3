"""Read role cards from the released ESC-Eval files (or our own saved format) and write them back."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from esc.cards.schema import FIELD_LABELS, FIELDS, RoleCard, normalize_source
from esc.cards.taxonomy import load_taxonomy
from esc.errors import DataError, UserError
from esc.paths import data_dir

RELEASED_FILES: dict[str, str] = {"en": "card_high_en.json", "zh": "card_high_zh.json"}
LANGUAGE_NAMES: dict[str, str] = {"en": "en", "english": "en", "zh": "zh", "chinese": "zh"}
RELEASED_KEYS: tuple[str, ...] = ("base", "res", "source", "language", "id")

# Field labels accepted in card text, either language, either colon (":" or "："), any spacing.
_LABEL_FIELDS: dict[str, str] = {
    "age": "age",
    "年龄": "age",
    "gender": "gender",
    "sex": "gender",
    "性别": "gender",
    "occupation": "occupation",
    "job": "occupation",
    "职业": "occupation",
    "problem": "problem",
    "problems": "problem",
    "问题": "problem",
}
_HEADER_RE = re.compile(
    r"(?P<label>problems?|occupation|gender|sex|age|job|年龄|性别|职业|问题)[ \t]*[:：]", re.IGNORECASE
)


def released_dir() -> Path:
    """Folder holding the released ESC-Eval card files (filled by `make data`)."""
    return data_dir() / "esc_eval"


def normalize_language(value: str) -> str:
    """'en'/'zh' for en, zh, english or chinese (any case); ValueError otherwise."""
    lang = LANGUAGE_NAMES.get(str(value).strip().casefold())
    if lang is None:
        raise ValueError(f"unknown language {value!r}; expected en, zh, english or chinese")
    return lang


def _one_line(text: str) -> str:
    return " ".join(str(text).split("\n"))


def parse_card_text(text: str, language: str) -> dict[str, str]:
    """Split card text into age/gender/occupation/problem; ValueError naming a missing field.

    Accepts the released line format ("Age: x\\nGender: y\\n..." or "年龄：x\\n性别：y\\n..."), with
    blank lines between fields, either colon, "Problems:" and all fields on one line separated by
    spaces. A label counts at the start of a line; inside a line it counts only before the Problem
    field, so the problem text may itself contain words like "age:". Text before the first label
    is ignored. Continuation lines belong to the field above them.
    """
    lang = normalize_language(language)
    if not isinstance(text, str):
        raise ValueError(f"card text must be a string, got {type(text).__name__}")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    starts: list[tuple[str, int, int]] = []  # (field, header start, value start)
    seen: set[str] = set()
    for match in _HEADER_RE.finditer(text):
        field = _LABEL_FIELDS[match.group("label").casefold()]
        before = text[text.rfind("\n", 0, match.start()) + 1 : match.start()]
        at_line_start = not before.strip()
        inline_ok = "problem" not in seen and (match.start() == 0 or text[match.start() - 1].isspace())
        if not (at_line_start or inline_ok):
            continue
        if field in seen:
            if at_line_start:
                raise ValueError(f"field {FIELD_LABELS[lang][field]!r} appears twice")
            continue
        seen.add(field)
        starts.append((field, match.start(), match.end()))
    values: dict[str, str] = {}
    for i, (field, _, value_start) in enumerate(starts):
        end = starts[i + 1][1] if i + 1 < len(starts) else len(text)
        lines = [line.strip() for line in text[value_start:end].split("\n")]
        lines = [line for line in lines if line]
        values[field] = ("\n" if field == "problem" else " ").join(lines)
    for field in FIELDS:
        if field not in values:
            label = FIELD_LABELS[lang][field]
            sep = ": " if lang == "en" else "："
            raise ValueError(f"card text has no {label} field (expected a line '{label}{sep}...')")
    if not values["problem"]:
        raise ValueError(f"the {FIELD_LABELS[lang]['problem']} field is empty")
    return {field: values[field] for field in FIELDS}


def _record_ref(index: int, record: Any) -> str:
    if isinstance(record, dict) and "id" in record:
        return f"{index}, id {record['id']}"
    return str(index)


def _card_id(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise ValueError(f"id must be an integer, got {value!r}")


def _from_released(record: dict[str, Any], quality: str | None) -> RoleCard:
    missing = [key for key in RELEASED_KEYS if key not in record]
    if missing:
        raise ValueError(f"missing key(s) {', '.join(missing)}")
    lang = normalize_language(record["language"])
    fields = parse_card_text(record["base"], lang)
    return RoleCard(
        id=_card_id(record["id"]),
        language=lang,  # type: ignore[arg-type]
        source=normalize_source(record["source"]),
        topic=load_taxonomy().topic_from_label(record["res"]),
        # built cards (python build_cards.py) carry their own grade and category
        quality=record.get("quality") or quality,  # type: ignore[arg-type]
        category=record.get("category"),
        **fields,
    )


def record_to_card(record: Any, quality: str | None = None) -> RoleCard:
    """One card from a released record ({base, res, source, language, id, ...}) or a `to_dict()`."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    if "base" in record:
        return _from_released(record, quality)
    if "problem" in record:
        return RoleCard.from_dict(record)
    raise ValueError(
        "unrecognised record: expected the released keys (base, res, source, language, id) "
        "or a saved card (id, language, age, gender, occupation, problem, source, topic)"
    )


def _quality_from_name(path: Path) -> str | None:
    name = path.name.casefold()
    if "high" in name:
        return "high"
    if "middle" in name:
        return "middle"
    return None


def read_records(path: Path) -> list[Any]:
    """The JSON list stored in `path`; UserError if missing, DataError if not a non-empty JSON list."""
    if not path.is_file():
        what = "is a directory, not a card file" if path.is_dir() else "file not found"
        released = path.parent.resolve() == released_dir().resolve()
        hint = "run `make data` to fetch the released ESC-Eval role cards" if released else "check the path"
        raise UserError(f"{path}: {what}; {hint}")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise DataError(path, None, f"not UTF-8 text (byte {err.start})") from err
    except json.JSONDecodeError as err:
        raise DataError(
            path, None, f"not valid JSON at line {err.lineno}, column {err.colno}: {err.msg}"
        ) from err
    if not isinstance(records, list):
        raise DataError(path, None, f"expected a JSON list of cards, got a JSON {type(records).__name__}")
    if not records:
        raise DataError(path, None, "holds no cards (an empty JSON list)")
    return records


def load_file(path: Path, quality: str | None = None) -> list[RoleCard]:
    """All cards of one file; every bad record raises DataError naming the file and the record."""
    path = Path(path)
    cards = []
    for index, record in enumerate(read_records(path)):
        try:
            cards.append(record_to_card(record, quality))
        except ValueError as err:
            raise DataError(path, _record_ref(index, record), _one_line(str(err))) from err
    return cards


def load_cards(
    paths: list[Path] | None = None,
    language: str | None = None,
    sources: Iterable[str] | None = None,
    limit: int | None = None,
) -> list[RoleCard]:
    """Load role cards, by default the two released high-quality files (331 EN + 324 ZH).

    `language` (en/zh/english/chinese) and `sources` (raw or normalised dataset names) filter the
    cards; `limit` keeps the first N after filtering. Card ids must be unique across the files.
    """
    try:
        lang = normalize_language(language) if language is not None else None
        wanted = {normalize_source(s) for s in sources} if sources is not None else None
    except ValueError as err:
        raise UserError(str(err)) from err
    if limit is not None and limit < 0:
        raise UserError(f"limit must be >= 0, got {limit}")
    if paths is None:
        langs = [lang] if lang else list(RELEASED_FILES)
        files = [(released_dir() / RELEASED_FILES[code], "high") for code in langs]
    else:
        files = [(Path(p), _quality_from_name(Path(p))) for p in paths]
    cards: list[RoleCard] = []
    first_seen: dict[int, Path] = {}
    for path, quality in files:
        for index, card in enumerate(load_file(path, quality)):
            if card.id in first_seen:
                raise DataError(
                    path, f"{index}, id {card.id}", f"duplicate card id (also in {first_seen[card.id]})"
                )
            first_seen[card.id] = path
            cards.append(card)
    cards = [
        c for c in cards if (lang is None or c.language == lang) and (wanted is None or c.source in wanted)
    ]
    return cards if limit is None else cards[:limit]


def save_cards(cards: Iterable[RoleCard], path: Path) -> Path:
    """Write cards as a JSON list of `to_dict()` (UTF-8, atomic); `load_cards` reads it back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps([card.to_dict() for card in cards], ensure_ascii=False, indent=2)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(payload + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
