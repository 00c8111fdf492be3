"""The official ESC-Eval score files (`score/<Model>_<lang>.json`), read and written.

The official score.py reads each dialogue file `result/<date>/<Model>_<lang>.json` (see
`esc.official_formats.dialogues`: card position -> 11 lines "AI assitant：..." / "ESC-Role：..."),
judges every dialogue on the 7 dimensions with ESC-RANK (InternLM2-chat-7B + one LoRA adapter per dimension,
greedy `chat()`), and writes a file of the same name under `score/`:

    {"0": {"fluency": 3, "diversity": 3, "empathic": 3, "suggestion": 3, "human": 1, "tech": 3,
           "overall": 2},
     "1": {...}, ...}

- the outer key is the dialogue's key in the dialogue file: the position of its role card in the card
  file the official evaluate.py played ("0", "1", ...);
- the inner keys are the official dimension keys, always all 7, in that order (`Dimension.official_key`:
  fluency, diversity, empathic, suggestion, human, tech, overall);
- a value is an integer 0-4, or -1 when no score was parsed: score.py takes the lowest of "0".."4"
  that occurs anywhere in the reply (`official_parse`), and -1 when none does. The reply is not kept;
- the language is the file name's `_en` / `_zh` suffix (score.py picks the Chinese or English
  adapters by whether "zh" is in the file name); JSON with `indent=4` and `ensure_ascii=False`.

Here -1 is read as an `invalid` judgment (never a score), and both `invalid` and `failed` judgments are
written as -1, as the official files do: the difference between the two, and the reason, is lost in
that layout. Card positions map to card ids through the card file (default: the released files of the
language, as `esc dialogues import` does), so imported scores carry the same dialogue ids as
`rank.py` gives the dialogues imported from the matching official dialogue file.

    esc scores import score/llama3_en.json --out scores/llama3.jsonl \
        [--cards data/esc_eval/test_en.json] [--target llama3] [--judge esc_rank_official]
    python rank.py mode=leaderboard scores=scores/llama3.jsonl
    esc scores export RANK_OUT_DIR [score files ...] --out score/ [--judge NAME]
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from esc.cards import load_cards
from esc.errors import DataError, UserError
from esc.jsonl import DuplicateKey, atomic_write_text, loads
from esc.official_formats.dialogues import check_out_dir, official_name
from esc.scoring.judge import FAILED, INVALID, VALID
from esc.scoring.rubrics import LANGUAGES, SCORES, dimension, dimensions, prompt_style
from esc.scoring.store import ScoreRecord, latest, read_scores, score_file_paths

UNPARSED = -1  # what score.py writes when the reply holds none of "0".."4"
DEFAULT_JUDGE = "esc_rank_official"
DEFAULT_ROLEPLAYER = "esc_role"  # as `esc dialogues import`
# `<Model>_<lang>` (official) or `<target>__<roleplayer>_<lang>` (what our exports write)
_NAME = re.compile(r"^(?P<target>.+?)(?:__(?P<roleplayer>.+))?_(?P<language>en|zh)$")


def official_parse(reply: str) -> int:
    """score.py's parse: the lowest of "0".."4" found anywhere in the reply, else -1.

    ("Score: 3 out of 4" -> 3, "4/10" -> 0, "I'd say 3 or 2" -> 2, "five" -> -1.)
    """
    return next((s for s in SCORES if str(s) in reply), UNPARSED)


def official_keys() -> tuple[str, ...]:
    """The 7 official dimension keys in score.py's order."""
    return tuple(d.official_key for d in dimensions())


def split_name(path: Path) -> tuple[str | None, str | None, str | None]:
    """(model, role-player, language) from an official file name `<Model>_<lang>.json` or an exported
    `<target>__<roleplayer>_<lang>.json`; None where it has none."""
    match = _NAME.match(Path(path).stem)
    return (match["target"], match["roleplayer"], match["language"]) if match else (None, None, None)


def _released_card_ids(language: str) -> list[int]:

    return [card.id for card in load_cards(None, language=language)]


def read_official_scores(
    path: Path,
    card_ids: Sequence[int] | None = None,
    *,
    target: str | None = None,
    language: str | None = None,
    roleplayer: str | None = None,
    judge: str = DEFAULT_JUDGE,
) -> list[ScoreRecord]:
    """The judgments of an official score file, one record per (dialogue, dimension) it holds.

    `card_ids`: the ids of the card file the official run played, in file order (position -> id;
    default: the released cards of the language). `target` and `language` default to the file
    name's `<Model>_<lang>`. A -1 becomes an `invalid` record without a score. Bad input (not JSON,
    an index that is no card position, an unknown dimension key, a value outside -1..4, a record
    without a dimension the others hold) is a DataError naming the file and the record.
    """
    path = Path(path)
    name_target, name_roleplayer, name_language = split_name(path)
    target = target or name_target or path.stem
    roleplayer = roleplayer or name_roleplayer or DEFAULT_ROLEPLAYER
    language = language or name_language
    if language not in LANGUAGES:
        raise DataError(
            path, None, "no language: name the file <Model>_en.json or <Model>_zh.json, or pass --language"
        )
    try:
        data = loads(path.read_text(encoding="utf-8"))
    except DuplicateKey as err:
        raise DataError(path, None, str(err)) from None
    except json.JSONDecodeError as err:
        raise DataError(path, None, f"not valid JSON (line {err.lineno}: {err.msg})") from None
    except UnicodeDecodeError as err:
        raise DataError(path, None, f"not UTF-8 text ({err.reason})") from None
    if not isinstance(data, dict):
        raise DataError(path, None, "expected a JSON object of index -> {dimension key: score}")
    ids = list(card_ids) if card_ids is not None else _released_card_ids(language)
    if not ids:
        raise DataError(path, None, f"no {language} cards to map positions to (see --cards)")
    prompt = {"style": "official", "version": prompt_style("official").version}
    stem = f"{target}__{roleplayer}__{language}"  # the dialogue file rank.py would read
    records: list[ScoreRecord] = []
    held: dict[str, set[str]] = {}  # record -> its dimensions
    for index, scores in data.items():
        if not index.isdigit() or int(index) >= len(ids):
            problem = (
                f"the key is not a position in the {len(ids)} cards given (wrong card file? see --cards)"
            )
            raise DataError(path, index, problem)
        if not isinstance(scores, dict):
            raise DataError(path, index, f"expected an object of dimension key -> score, got {scores!r}")
        card_id = ids[int(index)]
        seen: dict[str, str] = {}
        for key, value in scores.items():
            try:
                dim = dimension(key)
            except UserError:
                known = ", ".join(official_keys())
                raise DataError(
                    path, index, f"unknown dimension key {key!r}; official keys: {known}"
                ) from None
            if dim.key in seen:
                raise DataError(path, index, f"{key!r} and {seen[dim.key]!r} are the same dimension")
            seen[dim.key] = key
            if isinstance(value, bool) or not isinstance(value, int) or not UNPARSED <= value <= 4:
                raise DataError(path, f"{index}, {key}", f"score {value!r} is not an integer in -1..4")
            fields = {
                "dialogue_id": f"{stem}/{card_id}",
                "dimension": dim.key,
                "language": language,
                "judge": judge,
                "prompt": dict(prompt),
                "target": target,
                "roleplayer": roleplayer,
                "card_id": card_id,
            }
            if value == UNPARSED:
                error = "official score file: -1, score.py parsed no score 0-4 from the reply"
                records.append(ScoreRecord(**fields, status=INVALID, error=error))
            else:
                records.append(ScoreRecord(**fields, status=VALID, score=value))
        held[index] = set(seen)
    _refuse_missing_dimensions(path, held)
    return records


def _refuse_missing_dimensions(path: Path, held: dict[str, set[str]]) -> None:
    """A record without a dimension that other records of the file hold is bad input (score.py
    writes all 7 for every dialogue): a DataError naming the file and the first such record, rather
    than a judgment silently dropped from the leaderboard's counts."""
    union = set().union(*held.values()) if held else set()
    for index, seen in held.items():
        missing = [d.official_key for d in dimensions() if d.key in union - seen]
        if missing:
            raise DataError(
                path,
                index,
                f"lacks {', '.join(missing)}, which the file's other records hold (score.py writes all "
                f"{len(dimensions())} for every dialogue): fix or remove this record",
            )


def to_official(records: Iterable[ScoreRecord], card_ids: Sequence[int]) -> dict[str, dict[str, int]]:
    """The official layout of one (target, language)'s records: position -> official key -> score.

    The latest record of each (dialogue, dimension) counts; `invalid` and `failed` ones are written
    as -1, as score.py writes a reply it could not parse. Dimensions without a record are left out
    (score.py always wrote all 7). Positions come from `card_ids` (the card file, in order).
    """
    position = {card_id: i for i, card_id in enumerate(card_ids)}
    table: dict[int, dict[str, int]] = defaultdict(dict)
    for record in latest(records).values():
        if record.card_id not in position:
            problem = f"card {record.card_id} is not in the card list given for export (see --cards)"
            raise DataError(record.dialogue_id, record.dimension, problem)
        value = record.score if record.status == VALID else UNPARSED
        if record.status not in (VALID, INVALID, FAILED) or value not in (*SCORES, UNPARSED):
            raise DataError(record.dialogue_id, record.dimension, f"cannot write {record.status} {value!r}")
        table[position[record.card_id]][dimension(record.dimension).official_key] = value
    order = official_keys()
    return {str(i): {key: table[i][key] for key in order if key in table[i]} for i in sorted(table)}


def write_official_scores(
    records: Iterable[ScoreRecord], path: Path, card_ids: Sequence[int] | None = None
) -> Path:
    """Write one target's records of one language as an official score file (`<Model>_<lang>.json`).

    `invalid` and `failed` judgments become -1, as in the official files (reading the file back
    gives `invalid` for both; reasons, probabilities and replies are not part of the layout).
    `card_ids` defaults to the released cards of the records' language.
    """
    records = list(records)
    languages = sorted({r.language for r in records})
    if len(languages) > 1:
        raise UserError(f"{path}: an official score file holds one language, got {', '.join(languages)}")
    if card_ids is None:
        card_ids = _released_card_ids(languages[0]) if languages else []
    data = to_official(records, card_ids)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=4))
    return path


def _card_ids(files: Sequence[Path] | None, language: str) -> list[int] | None:
    if not files:
        return None

    return [card.id for card in load_cards(list(files), language=language)]


def export(
    sources: Sequence[Path], out: Path, cards: Sequence[Path] | None = None, judge: str | None = None
) -> list[tuple[Path, int]]:
    """One official file per (target, role-player, language) of the score files:
    `OUT/<target>__<roleplayer>_<lang>.json`."""
    check_out_dir(out)
    records = [r for p in score_file_paths(sources) for r in read_scores(p) if judge in (None, r.judge)]
    if not records:
        raise UserError(f"no score records{f' of judge {judge!r}' if judge else ''} in the files given")
    groups: dict[tuple[str, str, str], list[ScoreRecord]] = defaultdict(list)
    for r in records:
        groups[(r.target or "unknown", r.roleplayer or "unknown", r.language)].append(r)
    written = []
    for (target, roleplayer, language), group in sorted(groups.items()):
        judges = sorted({r.judge for r in group})
        if len(judges) > 1:
            raise UserError(
                f"{target} × {roleplayer} ({language}) was judged by {len(judges)} judges {judges}; "
                "an official file holds one: pass --judge or fewer score files"
            )
        name = official_name(target, roleplayer, language)
        path = write_official_scores(group, out / name, _card_ids(cards, language))
        written.append((path, len({r.dialogue_id for r in group})))
    return written


def import_scores(
    files: Sequence[Path],
    out: Path,
    cards: Sequence[Path] | None = None,
    target: str | None = None,
    language: str | None = None,
    roleplayer: str | None = None,
    judge: str = DEFAULT_JUDGE,
) -> list[ScoreRecord]:
    """Official score files -> one score file for rank.py (`out`); every file is read before it is
    written. Returns the records written."""
    if out.is_dir():
        raise UserError(f"{out}: --out is a folder; name the score file to write (e.g. {out}/scores.jsonl)")
    records: list[ScoreRecord] = []
    for path in files:
        lang = language or split_name(path)[2] or ""
        records += read_official_scores(
            path,
            _card_ids(cards, lang) if lang else None,
            target=target,
            language=language,
            roleplayer=roleplayer,
            judge=judge,
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in records))
    return records
