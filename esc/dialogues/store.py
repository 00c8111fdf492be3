"""Dialogue files: one JSON line per dialogue, appended and flushed as each one completes.

`<name>.jsonl` holds completed dialogues, each exactly once. Failed dialogues go to
`<name>.failed.jsonl`, which a rerun replaces as it retries them. A line cut short by a killed
process is detected and dropped on the next open, so whatever kills a run, every complete line
already written stays valid.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.dialogues.record import Dialogue
from esc.errors import DataError, UserError
from esc.jsonl import append_jsonl, atomic_write_text, drop_partial_last_line, find_jsonl_files, loads
from esc.paths import REPO_ROOT
from esc.prompts.seekers import COOPERATIVE, described

log = logging.getLogger(__name__)


def dialogue_file(out: Path, target: str, roleplayer: str, language: str) -> Path:
    """Where a run folder keeps the dialogues of one (target, role-player, language) combination."""
    return out / "dialogues" / f"{target}__{roleplayer}__{language}.jsonl"


def dialogue_files(spec: str | Path | Sequence[str | Path]) -> list[Path]:
    """The dialogue files a `dialogues=` value names: run directories, files, or a list of them."""
    return find_jsonl_files(spec, "dialogues", "dialogue", "dialogues")


def named_file(source: str) -> Path:
    """A dialogue file as a score record names it (`source`): a relative path is tried from the
    working folder, then from the repository (where the entry points run from)."""
    path = Path(source)
    if not path.is_absolute() and not path.exists() and (REPO_ROOT / path).exists():
        return REPO_ROOT / path
    return path


def played_by_source(sources: Iterable[str]) -> dict[str, dict[int, Dialogue]]:
    """source -> card id -> dialogue, for the dialogue files score records name, each read once; a
    file that is gone is absent (its dialogues are unknown to the reports, never an error)."""
    played = {}
    for source in sorted(set(sources)):
        path = named_file(source)
        if path.is_file():
            played[source] = {d.card_id: d for d in read_dialogues(path)}
    return played


def read_dialogues(path: Path, whole_lines: bool = False) -> Iterator[Dialogue]:
    """Every dialogue in a JSON-lines file; a malformed line is a DataError naming file and line.
    `whole_lines`: a last line without its newline (cut short by a killed writer, which
    `DialogueStore` drops on opening) is left out instead, and the file is not changed."""
    with Path(path).open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if whole_lines and not raw.endswith(b"\n"):
                break
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(path, f"line {lineno}", f"not UTF-8 text (byte {err.start})") from None
            if not line.strip():
                continue
            try:
                record = loads(line)
                if not isinstance(record, dict):
                    raise TypeError(f"a JSON {type(record).__name__}, not an object")
                dialogue = Dialogue.from_dict(record)
            except (TypeError, KeyError, ValueError, AttributeError) as err:  # a JSONDecodeError too
                raise DataError(path, f"line {lineno}", f"not a dialogue record ({err})") from None
            _check_texts(dialogue, path, lineno)
            _check_emotions(dialogue, path, lineno)
            yield dialogue


def _check_emotions(dialogue: Dialogue, path: Path, lineno: int) -> None:
    """Every emotion rating is an object whose `value` is null (no valid rating) or a number from 0 to
    100: a word ("high") or 150 in a hand-edited file is a DataError naming the turn, never a crash in
    a report or a figure moved by an impossible value."""
    for i, turn in enumerate(dialogue.turns):
        emotion = turn.emotion
        if emotion is None:
            continue
        where = f"turn {i} (card {dialogue.card_id})"
        if not isinstance(emotion, dict):
            raise DataError(path, f"line {lineno}", f"{where}: `emotion` should be an object: {emotion!r}")
        value = emotion.get("value")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
            raise DataError(
                path,
                f"line {lineno}",
                f"{where}: `emotion.value` is {value!r}: a rating is a number from 0 to 100 (null: invalid)",
            )


def _check_texts(dialogue: Dialogue, path: Path, lineno: int) -> None:
    """Every text a reader prints or sends is a string: a turn whose text is null (a hand-edited or
    foreign file) is a DataError naming the turn, not a crash in whatever reads it next."""
    for name in ("opener", "system_prompt"):
        if not isinstance(getattr(dialogue, name), str):
            raise DataError(path, f"line {lineno}", f"`{name}` has no text (card {dialogue.card_id})")
    for i, turn in enumerate(dialogue.turns):
        if not isinstance(turn.text, str):
            raise DataError(path, f"line {lineno}", f"turn {i} has no text (card {dialogue.card_id})")


def check_against_settings(path: Path, dialogues: Iterable[Dialogue], settings: Mapping[str, Any]) -> None:
    """DataError naming the file and card when a dialogue was not made with the folder's settings
    (`OUT/settings.json`, kind `evaluate`): its prompt id or version, generation settings or turns
    differ -- a folder mixed by an older version that did not refuse changed settings."""
    want = {
        "prompt": {k: settings["roleplayer"]["prompt"][k] for k in ("id", "version")},
        "generation": {
            "roleplayer": settings["roleplayer"]["generation"],
            "target": settings["target"]["generation"],
        },
        "turns": settings["dialogue"]["turns"],
        "seeker": settings.get("seeker"),  # absent: the cooperative seeker (folders made before profiles)
    }
    for dialogue in dialogues:
        got = {key: dialogue.meta.get(key) for key in want}
        got["seeker"] = dialogue.seeker_profile()
        if got != want:
            key = next(k for k in want if got[k] != want[k])
            raise DataError(
                path,
                f"card {dialogue.card_id}",
                f"made with {key}={json.dumps(got[key])}, but the folder's settings.json says "
                f"{json.dumps(want[key])}: the folder mixes runs of different settings",
            )


Profile = Mapping[str, Any] | None  # a seeker profile as settings record it (None: cooperative)


def refuse_other_seeker(folder: Path, want: Profile, recorded: Mapping[str, Any] | None) -> None:
    """A UserError, before any work, when `folder` holds dialogues of another seeker profile than
    `want` (`esc.prompts.seekers.profile_settings`: name and version; None: cooperative): its
    `settings.json` (`recorded`, its `evaluate` entry) or any dialogue of its files, completed or
    failed, names another one. A folder holds the dialogues of one profile: a rerun with another
    never resumes it, and nothing of the folder changes."""
    if recorded is not None and recorded.get("seeker") != want:  # absent: cooperative
        _other_seeker(folder, "settings.json", recorded.get("seeker"), want)
    for path in sorted(Path(folder, "dialogues").glob("*.jsonl")):
        for dialogue in read_dialogues(path, whole_lines=True):
            if dialogue.seeker_profile() != want:
                where = f"{path.name}, card {dialogue.card_id}"
                _other_seeker(folder, where, dialogue.seeker_profile(), want)


def _other_seeker(folder: Path, where: str, got: Profile, want: Profile) -> None:
    played = (got or {}).get("name", COOPERATIVE)
    if played == (want or {}).get("name", COOPERATIVE):
        hint = "its text has a new version since: play it in a new folder (hydra.run.dir=NEW_DIR)"
    else:
        hint = f"rerun with seeker={played} to resume it, or start a new folder (hydra.run.dir=NEW_DIR)"
    raise UserError(
        f"{folder}: its dialogues were played by the {described(got)} seeker ({where}), this run plays the "
        f"{described(want)} seeker: a folder holds the dialogues of one seeker profile; {hint}"
    )


def one_seeker(found: Iterable[tuple[Path, Dialogue]], hint: str) -> None:
    """A UserError naming two files when `found` (file, dialogue) holds dialogues of two seeker
    profiles (or two versions of one): they are no one run's, and no file may mix them."""
    first: tuple[Path, Profile] | None = None
    for path, dialogue in found:
        profile = dialogue.seeker_profile()
        if first is None:
            first = (path, profile)
        elif profile != first[1]:
            raise UserError(
                f"{first[0]} and {path}: dialogues of two seeker profiles ({described(first[1])} and "
                f"{described(profile)}, card {dialogue.card_id}); {hint}"
            )


def completed_keys(path: Path) -> set[tuple[int, str]]:
    """The (card id, language) of the dialogues complete in `path` (none when it does not exist),
    read without changing the file: a last line cut short by a killed writer is left out, as
    `DialogueStore` drops it. What a rerun into the folder would skip (the cost estimate)."""
    path = Path(path)
    if not path.is_file():
        return set()
    data = path.read_bytes()
    keys = set()
    for lineno, raw in enumerate(data[: data.rfind(b"\n") + 1].splitlines(), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            keys.add((int(record["card_id"]), str(record["language"])))
        except (ValueError, KeyError, TypeError) as err:
            raise DataError(path, f"line {lineno}", f"not a dialogue record ({err})") from None
    return keys


class DialogueStore:
    """Completed and failed dialogues of one (target, role-player, language) combination."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.failed_path = self.path.with_suffix(".failed.jsonl")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        drop_partial_last_line(self.path)
        self._done = {d.key for d in read_dialogues(self.path)} if self.path.exists() else set()
        if self.failed_path.exists():  # a damaged failure file stops the run here, before any work
            for _ in read_dialogues(self.failed_path):
                pass
        self._failed: list[Dialogue] = []

    def is_done(self, card_id: int, language: str) -> bool:
        return (card_id, language) in self._done

    def add(self, dialogue: Dialogue) -> None:
        """Record a finished dialogue: completed ones are appended and flushed to disk at once."""
        if dialogue.status == "complete":
            if dialogue.key in self._done:
                return
            append_jsonl(self.path, [dialogue.to_dict()])
            self._done.add(dialogue.key)
        else:
            self._failed.append(dialogue)
            self._write_failures()

    def _write_failures(self) -> None:
        """Failures of this run plus earlier failures not retried (yet) in this run."""
        retried = {d.key for d in self._failed} | self._done
        keep = [
            d
            for d in (read_dialogues(self.failed_path) if self.failed_path.exists() else [])
            if d.key not in retried
        ]
        lines = [json.dumps(d.to_dict(), ensure_ascii=False) + "\n" for d in [*keep, *self._failed]]
        atomic_write_text(self.failed_path, "".join(lines))

    def finalize(self) -> None:
        """Drop failure records of dialogues that have since completed."""
        if self.failed_path.exists():
            self._write_failures()
            if self.failed_path.stat().st_size == 0:
                self.failed_path.unlink()
