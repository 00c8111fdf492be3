"""The official ESC-Eval result format (`result/<date>/<Model>_<lang>.json`).

A JSON object mapping the card's index in the evaluated card file ("0", "1", ...) to 11 strings:
the supporter's opener, then the role-player and the assistant in turn, each prefixed with its
speaker and a full-width colon: `AI assistant：...` / `ESC-Role：...`. Only texts survive the
conversion; ids, settings and timings do not.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from esc.cards import RoleCard, load_cards
from esc.dialogues.record import Dialogue, Turn
from esc.dialogues.store import DialogueStore, check_against_settings, dialogue_file, read_dialogues
from esc.errors import DataError, UserError
from esc.jsonl import atomic_write_text
from esc.rundir import read_settings

ASSISTANT = "AI assistant："
ROLE = "ESC-Role："
LANGUAGE_NAMES = {"en": "English", "zh": "Chinese"}


def to_official(dialogues: Sequence[Dialogue], cards: Sequence[RoleCard]) -> dict[str, list[str]]:
    """Index dialogues by their card's position in `cards` (the card file the official script read)."""
    position = {(c.id, c.language): i for i, c in enumerate(cards)}
    result: dict[int, list[str]] = {}
    for dialogue in dialogues:
        index = position.get(dialogue.key)
        if index is None:
            raise DataError(
                "cards", dialogue.card_id, "dialogue's card is not in the card list given for export"
            )
        lines = [ASSISTANT + dialogue.opener]
        lines += [(ROLE if t.speaker == "roleplayer" else ASSISTANT) + t.text for t in dialogue.turns]
        result[index] = lines
    return {str(i): result[i] for i in sorted(result)}


def official_name(target: str, roleplayer: str, language: str) -> str:
    """The exported file's name: the official `<Model>_<lang>.json`, with the role-player in the model
    part (`<target>__<roleplayer>_<lang>.json`), so runs with different role-players never collide."""
    return f"{target}__{roleplayer}_{language}.json"


def text_language(text: str) -> str | None:
    """ "zh" when Chinese characters outnumber Latin letters, "en" when not, None without either."""
    cjk = sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf")
    latin = sum(1 for ch in text if ch.isascii() and ch.isalpha())
    if not cjk and not latin:
        return None
    return "zh" if cjk > latin else "en"


def from_official(path: Path, cards: Sequence[RoleCard], roleplayer: str, target: str) -> list[Dialogue]:
    """Read an official result file back into dialogues, mapping indices to `cards` by position.

    The supporter's opener (each record's first line) must be in the cards' language: a Chinese
    file read against the English cards would attach its dialogues to the wrong cards.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(
            f"{path}: {'is a directory, not' if path.is_dir() else 'no such'} official result file"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise DataError(path, None, f"not UTF-8 text (byte {err.start}); save the file as UTF-8") from None
    except json.JSONDecodeError as err:
        raise DataError(path, None, f"not valid JSON (line {err.lineno}: {err.msg})") from None
    if not isinstance(data, dict):
        raise DataError(path, None, "expected a JSON object of index -> list of strings")
    dialogues = []
    for key, lines in data.items():
        if not key.isdigit() or int(key) >= len(cards):
            raise DataError(path, key, f"index is not a position in the {len(cards)} cards given")
        if not isinstance(lines, list) or not lines or not all(isinstance(x, str) for x in lines):
            raise DataError(path, key, "expected a non-empty list of strings")
        card = cards[int(key)]
        opener = _strip(path, key, 0, lines[0], ASSISTANT)
        found = text_language(opener)
        if found is not None and found != card.language:
            raise DataError(
                path,
                key,
                f"the opener is {LANGUAGE_NAMES[found]} but the cards given are "
                f"{LANGUAGE_NAMES[card.language]}: pass --language {found} (and that language's card file)",
            )
        turns = []
        for i, line in enumerate(lines[1:], 1):
            speaker = "roleplayer" if i % 2 else "target"
            prefix = ROLE if speaker == "roleplayer" else ASSISTANT
            turns.append(Turn(speaker, _strip(path, key, i, line, prefix), "stop"))
        dialogues.append(
            Dialogue(
                card_id=card.id,
                language=card.language,
                roleplayer=roleplayer,
                target=target,
                system_prompt="",
                opener=opener,
                target_system_prompt=None,
                turns=turns,
                status="complete",
                meta={"imported_from": str(path)},
            )
        )
    return dialogues


def _strip(path: Path, key: str, i: int, line: str, prefix: str) -> str:
    for candidate in (prefix, prefix.replace("assistant", "assitant")):  # the official script's spelling
        if line.startswith(candidate):
            return line[len(candidate) :]
    raise DataError(path, f"{key}, line {i}", f"expected the prefix {prefix!r}")


def check_out_dir(out: Path) -> None:
    """`--out` of an export names a folder (new or existing): an existing file is a UserError."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: --out is an existing file; name a folder (new or existing)")


def export_run(run_dir: Path, out: Path, cards: Sequence[Path] | None = None) -> list[tuple[Path, Path, int]]:
    """Every dialogue file of an evaluate.py folder as an official result file in `out`
    (`<target>__<roleplayer>_<lang>.json`); all are read and checked before any is written.
    Returns (dialogue file, official file, dialogues) for each."""
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: no such run folder")
    check_out_dir(out)
    files = sorted(p for p in (run_dir / "dialogues").glob("*.jsonl") if not p.name.endswith(".failed.jsonl"))
    if not files:
        raise UserError(f"{run_dir / 'dialogues'}: no dialogue files")
    settings = read_settings(run_dir).get("evaluate")
    exports = []
    for path in files:
        parts = path.stem.split("__")
        if len(parts) != 3 or parts[2] not in ("en", "zh"):
            raise DataError(path, None, "not a dialogue file name (<target>__<roleplayer>__<en|zh>.jsonl)")
        target, roleplayer, language = parts
        language_cards = load_cards(list(cards) if cards else None, language=language)
        dialogues = list(read_dialogues(path))
        if settings is not None:  # every dialogue made with the folder's settings, or nothing exported
            check_against_settings(path, dialogues, settings)
        exports.append(
            (path, out / official_name(target, roleplayer, language), to_official(dialogues, language_cards))
        )
    out.mkdir(parents=True, exist_ok=True)
    for _, dest, data in exports:
        atomic_write_text(dest, json.dumps(data, ensure_ascii=False, indent=4) + "\n")
    return [(path, dest, len(data)) for path, dest, data in exports]


def import_files(
    files: Sequence[Path], out: Path, language: str, roleplayer: str, target: str,
    cards: Sequence[Path] | None = None,
) -> tuple[Path, int]:  # fmt: skip
    """Official result files into `out`'s dialogue file of (target, role-player, language); every
    file is read and checked before the first line is written. Returns the file and how many
    dialogues were new to it."""
    check_out_dir(out)
    language_cards = load_cards(list(cards) if cards else None, language=language)
    dialogues = [d for path in files for d in from_official(path, language_cards, roleplayer, target)]
    store = DialogueStore(dialogue_file(out, target, roleplayer, language))
    added = 0
    for dialogue in dialogues:
        added += not store.is_done(dialogue.card_id, dialogue.language)
        store.add(dialogue)
    return store.path, added
