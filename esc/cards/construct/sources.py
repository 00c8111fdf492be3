"""Source adapters: the raw records role cards are extracted from, one adapter per dataset (the
third-party files are read by `esc.corpora`; the adapters only map them to `RawRecord`s).

Each adapter yields `RawRecord`s with a stable id (the same record gets the same id on every
machine and run), the dataset's name, its language and kind (``qa``: a post asking for help;
``md``: a multi-turn dialogue, with the seeker's situation summary where the dataset has one).

| adapter | data | kind | language |
|---|---|---|---|
| ``esconv`` | ESConv, the FADO re-format of the 1,300 dialogues (`esconv/fado_reformat/*_rl.txt`) | md | en |
| ``esconv_failed`` | FailedESConv (`esconv/FailedESConv.json`), 196 dialogues | md | en |
| ``smile`` | SmileChat (`smile/data/*.json`) | md | zh |
| ``psyqa`` | PsyQA: the public sample (`psyqa/PsyQA_example.json`), or the full set by `path` | qa | zh |
| ``epitome`` | EPITOME's Reddit posts (`epitome/*.csv`), each post once | qa | en |
| ``chatcounselor`` | ChatCounselor's counselling questions (a stand-in for Psych8K) | qa | en |
| ``jsonl_qa`` | your posts: JSON lines {id, text} (MHP Reddit, Psych8K...) | qa | given |
| ``jsonl_dialogues`` | dialogues: JSON lines {id, dialogue: [{speaker, text}], situation} | md | given |

A bad record stops with one line naming the file and the record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from esc.cards.schema import normalize_source
from esc.corpora import SEEKER, SUPPORTER, esconv, posts, smile
from esc.errors import ConfigError, DataError
from esc.jsonl import get_field, read_jsonl, require_file


@dataclasses.dataclass(frozen=True)
class RawRecord:
    record_id: str  # stable: "esconv/train/12", "smile/1026", "psyqa/57", ...
    source: str  # the dataset (a name of esc.cards.schema.SOURCES)
    language: str  # "en" | "zh"
    kind: str  # "qa" | "md"
    text: str  # qa: the post; md: the seeker's situation summary ("" when there is none)
    dialogue: tuple[tuple[str, str], ...] = ()  # md: (seeker | supporter, text)

    def seeker_text(self) -> str:
        """What the seeker says of their trouble: the post or situation summary, else (a dialogue
        without a summary) the seeker's first message. The crisis rule reads this."""
        if self.text.strip():
            return self.text
        return next((text for speaker, text in self.dialogue if speaker == SEEKER), "")


def _esconv(root: Path, options: Mapping[str, Any]) -> Iterator[RawRecord]:
    for split in options.get("splits") or esconv.SPLITS:
        for d in esconv.read_esconv(esconv.esconv_path(root, split), split):
            turns = tuple((u.speaker, u.text.strip()) for u in d.utterances)
            yield RawRecord(d.id, "ESConv", "en", "md", d.situation.strip(), turns)


def _esconv_failed(root: Path, options: Mapping[str, Any]) -> Iterator[RawRecord]:
    for d in esconv.read_failed_esconv(esconv.failed_esconv_path(root)):
        turns = tuple((u.speaker, u.text.strip()) for u in d.utterances)
        yield RawRecord(d.id, "ESConv", "en", "md", d.situation.strip(), turns)


def _smile(root: Path, options: Mapping[str, Any]) -> Iterator[RawRecord]:
    for path in smile.smile_files(Path(options.get("path") or smile.smile_dir(root))):
        turns = tuple((speaker, text.strip()) for speaker, text in smile.read_smile_dialogue(path))
        yield RawRecord(f"smile/{path.stem}", "Smile", "zh", "md", "", turns)


def _psyqa(root: Path, options: Mapping[str, Any]) -> Iterator[RawRecord]:
    for qid, text in posts.read_psyqa(Path(options.get("path") or posts.psyqa_path(root))):
        yield RawRecord(f"psyqa/{qid}", "PsyQA", "zh", "qa", text)


def _epitome(root: Path, options: Mapping[str, Any]) -> Iterator[RawRecord]:
    for sp_id, text in posts.read_epitome(Path(options.get("path") or posts.epitome_dir(root))):
        yield RawRecord(f"epitome/{sp_id}", "EPITOME", "en", "qa", text)


def _chatcounselor(root: Path, options: Mapping[str, Any]) -> Iterator[RawRecord]:
    for qid, text in posts.read_chatcounselor(Path(options.get("path") or posts.chatcounselor_path(root))):
        yield RawRecord(f"chatcounselor/{qid}", "ChatCounselor", "en", "qa", text)


def _user_file(options: Mapping[str, Any], name: str) -> tuple[Path, str, str]:
    path = options.get("path")
    if not path:
        raise ConfigError(f"cards.sources.{name}.path", "name your JSON-lines file")
    try:
        source = normalize_source(str(options.get("source") or ""))
    except ValueError as err:
        raise ConfigError(f"cards.sources.{name}.source", str(err)) from None
    language = options.get("language")
    if language not in ("en", "zh"):
        raise ConfigError(f"cards.sources.{name}.language", f"must be en or zh, got {language!r}")
    return require_file(Path(path)), source, language


def _jsonl_qa(root: Path, options: Mapping[str, Any]) -> Iterator[RawRecord]:
    path, source, language = _user_file(options, "jsonl_qa")
    for lineno, record in read_jsonl(path):
        where = f"line {lineno}"
        text = get_field(record, "text", str, path, where).strip()
        if not text:
            raise DataError(path, where, "empty `text`")
        rid = get_field(record, "id", (str, int), path, where)
        yield RawRecord(f"{source.lower()}/{rid}", source, language, "qa", text)


def _jsonl_dialogues(root: Path, options: Mapping[str, Any]) -> Iterator[RawRecord]:
    path, source, language = _user_file(options, "jsonl_dialogues")
    seekers = {"seeker", "usr", "user", "client", "help-seeker"}
    for lineno, record in read_jsonl(path):
        where = f"line {lineno}"
        turns = []
        for k, turn in enumerate(get_field(record, "dialogue", list, path, where)):
            speaker = get_field(turn, "speaker", str, path, f"{where}, dialogue[{k}]")
            text = get_field(turn, "text", str, path, f"{where}, dialogue[{k}]")
            turns.append((SEEKER if speaker.lower() in seekers else SUPPORTER, text.strip()))
        if not any(s == SEEKER for s, _ in turns):
            raise DataError(path, where, f"no seeker turn (speakers named one of {sorted(seekers)})")
        rid = get_field(record, "id", (str, int), path, where)
        yield RawRecord(
            f"{source.lower()}/{rid}",
            source,
            language,
            "md",
            str(record.get("situation") or ""),
            tuple(turns),
        )


ADAPTERS = {
    "esconv": _esconv,
    "esconv_failed": _esconv_failed,
    "smile": _smile,
    "psyqa": _psyqa,
    "epitome": _epitome,
    "chatcounselor": _chatcounselor,
    "jsonl_qa": _jsonl_qa,
    "jsonl_dialogues": _jsonl_dialogues,
}


def read_source(
    name: str, root: Path, options: Mapping[str, Any] | None = None, limit: int | None = None
) -> list[RawRecord]:
    """The first `limit` records of one source (all when None), in the dataset's order."""
    if name not in ADAPTERS:
        raise ConfigError("cards.sources", f"unknown source {name!r}; known: {', '.join(ADAPTERS)}")
    records = []
    for record in ADAPTERS[name](Path(root), dict(options or {})):
        if limit is not None and len(records) >= limit:
            break
        if record.kind == "md" and not any(s == SEEKER and t for s, t in record.dialogue):
            continue  # nothing said by the seeker: nothing to extract
        records.append(record)
    return records
