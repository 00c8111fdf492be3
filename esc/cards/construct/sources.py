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

A bad record stops with one line naming the file and the record. Each source's options (`cards.sources`,
conf/cards.yaml) are a model here (`Sources`), checked with the config before any work.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, model_validator

from esc.cards.schema import LANGUAGES, normalize_source
from esc.config_rules import Settings, check, relation
from esc.corpora import SEEKER, SUPPORTER, esconv, posts, smile
from esc.errors import DataError
from esc.jsonl import get_field, read_jsonl, require_file
from esc.settings.types import NonEmpty


class Switch(Settings):
    """A source read from where `make data` put it."""

    enabled: bool


class EsconvSource(Switch):
    splits: NonEmpty[Literal[esconv.SPLITS]]  # type: ignore[valid-type]  # ESConv's own files


class Corpus(Switch):
    path: str | None  # null: the copy `make data` fetched; or the full dataset's path


def _source_name(value: Any) -> str | None:
    """a dataset's name (esc.cards.schema.SOURCES)"""
    try:
        normalize_source(str(value))
    except ValueError as err:
        return str(err)
    return None


class UserFile(Switch):
    """Your own JSON-lines file: `path`, the dataset it comes from (`source`) and its `language`."""

    path: str | None
    source: Annotated[str, check(_source_name)]
    language: Literal[LANGUAGES]  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _named_when_enabled(self) -> UserFile:
        if self.enabled and not self.path:
            raise relation("path", "name your JSON-lines file")
        return self


class Sources(Settings):
    """`cards.sources`: each adapter's options (an unknown source is a key this node does not take)."""

    esconv: EsconvSource
    esconv_failed: Switch
    smile: Corpus
    psyqa: Corpus
    epitome: Corpus
    chatcounselor: Corpus
    jsonl_qa: UserFile
    jsonl_dialogues: UserFile


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


def _esconv(root: Path, options: EsconvSource) -> Iterator[RawRecord]:
    for split in options.splits:
        for d in esconv.read_esconv(esconv.esconv_path(root, split), split):
            turns = tuple((u.speaker, u.text.strip()) for u in d.utterances)
            yield RawRecord(d.id, "ESConv", "en", "md", d.situation.strip(), turns)


def _esconv_failed(root: Path, options: Switch) -> Iterator[RawRecord]:
    for d in esconv.read_failed_esconv(esconv.failed_esconv_path(root)):
        turns = tuple((u.speaker, u.text.strip()) for u in d.utterances)
        yield RawRecord(d.id, "ESConv", "en", "md", d.situation.strip(), turns)


def _smile(root: Path, options: Corpus) -> Iterator[RawRecord]:
    for path in smile.smile_files(Path(options.path or smile.smile_dir(root))):
        turns = tuple((speaker, text.strip()) for speaker, text in smile.read_smile_dialogue(path))
        yield RawRecord(f"smile/{path.stem}", "Smile", "zh", "md", "", turns)


def _psyqa(root: Path, options: Corpus) -> Iterator[RawRecord]:
    for qid, text in posts.read_psyqa(Path(options.path or posts.psyqa_path(root))):
        yield RawRecord(f"psyqa/{qid}", "PsyQA", "zh", "qa", text)


def _epitome(root: Path, options: Corpus) -> Iterator[RawRecord]:
    for sp_id, text in posts.read_epitome(Path(options.path or posts.epitome_dir(root))):
        yield RawRecord(f"epitome/{sp_id}", "EPITOME", "en", "qa", text)


def _chatcounselor(root: Path, options: Corpus) -> Iterator[RawRecord]:
    for qid, text in posts.read_chatcounselor(Path(options.path or posts.chatcounselor_path(root))):
        yield RawRecord(f"chatcounselor/{qid}", "ChatCounselor", "en", "qa", text)


def _user_file(options: UserFile) -> tuple[Path, str, str]:
    """The file (enabled: `UserFile` checked that it is named), its dataset and its language."""
    return require_file(Path(str(options.path))), normalize_source(options.source), options.language


def _jsonl_qa(root: Path, options: UserFile) -> Iterator[RawRecord]:
    path, source, language = _user_file(options)
    for lineno, record in read_jsonl(path):
        where = f"line {lineno}"
        text = get_field(record, "text", str, path, where).strip()
        if not text:
            raise DataError(path, where, "empty `text`")
        rid = get_field(record, "id", (str, int), path, where)
        yield RawRecord(f"{source.lower()}/{rid}", source, language, "qa", text)


def _jsonl_dialogues(root: Path, options: UserFile) -> Iterator[RawRecord]:
    path, source, language = _user_file(options)
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


ADAPTERS: dict[str, Callable[[Path, Any], Iterator[RawRecord]]] = {
    "esconv": _esconv,
    "esconv_failed": _esconv_failed,
    "smile": _smile,
    "psyqa": _psyqa,
    "epitome": _epitome,
    "chatcounselor": _chatcounselor,
    "jsonl_qa": _jsonl_qa,
    "jsonl_dialogues": _jsonl_dialogues,
}


#: the options of a dataset read from where `make data` put it (`read_source` without options)
FETCHED: dict[str, BaseModel] = {
    "esconv": EsconvSource(enabled=True, splits=list(esconv.SPLITS)),
    "esconv_failed": Switch(enabled=True),
    **{name: Corpus(enabled=True, path=None) for name in ("smile", "psyqa", "epitome", "chatcounselor")},
}


def read_source(
    name: str, root: Path, options: BaseModel | None = None, limit: int | None = None
) -> list[RawRecord]:
    """The first `limit` records of one source (all when None), in the dataset's order; `options`:
    its validated node of `Sources` (None: a fetched dataset as `make data` put it)."""
    records = []
    for record in ADAPTERS[name](Path(root), options or FETCHED[name]):
        if limit is not None and len(records) >= limit:
            break
        if record.kind == "md" and not any(s == SEEKER and t for s, t in record.dialogue):
            continue  # nothing said by the seeker: nothing to extract
        records.append(record)
    return records
