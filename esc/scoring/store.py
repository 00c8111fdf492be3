"""Score files: one JSON line per (dialogue, dimension) judgment, appended as each batch is judged.

`OUT/scores/<target>__<roleplayer>__<lang>__<judge>.jsonl`. Each judgment records what it judged: a
hash of the dialogue lines the judge read (`content_sha`) and the file they came from (`source`). A
rerun reads what is there and judges only what is missing, `failed`, or whose dialogue changed since
it was judged; a later line for the same (dialogue, dimension) supersedes an earlier one, so a
retried failure needs no rewrite. A line cut short by a killed process is dropped on the next open
(`esc.jsonl`). Scores of one dialogue id that several files hold for different dialogues are never
merged silently (`merge_score_files`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.errors import DataError, UserError
from esc.jsonl import append_jsonl, drop_partial_last_line, find_jsonl_files
from esc.scoring.judge import FAILED, INVALID, VALID, JudgeAnswer
from esc.scoring.rubrics import SCORES, dimension

STATUSES = (VALID, INVALID, FAILED)


@dataclasses.dataclass
class ScoreRecord:
    """A judgment with what it judged and who judged it."""

    dialogue_id: str
    dimension: str
    language: str
    judge: str
    prompt: dict[str, Any]  # {"style", "version"}
    status: str
    score: int | None = None
    expected: float | None = None
    probs: list[float] | None = None
    answer_mass: float | None = None
    raw: str | None = None
    error: str | None = None
    target: str | None = None
    roleplayer: str | None = None
    card_id: int | None = None
    content_sha: str | None = None  # the judged content (`ScoreItem.content_sha`)
    source: str | None = None  # the dialogue file it came from

    @property
    def key(self) -> tuple[str, str]:
        return (self.dialogue_id, self.dimension)

    @classmethod
    def make(cls, judgment: JudgeAnswer, **fields: Any) -> ScoreRecord:
        return cls(**fields, **judgment.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScoreRecord:
        """A record from its JSON form; ValueError or TypeError when it is not a valid one (`check`)."""
        names = {f.name for f in dataclasses.fields(cls)}
        record = cls(**{k: v for k, v in data.items() if k in names})
        record.check()
        if record.status not in STATUSES:
            raise ValueError(f"status {record.status!r} is not one of {STATUSES}")
        if record.status == VALID and record.score not in record.valid_scores():
            raise ValueError(f"a valid answer must be one of {record.valid_scores()}, got {record.score!r}")
        return record

    def check(self) -> None:
        """What a record of this kind must hold besides its status: a dimension of the rubrics
        (canonicalised). Records of other questions (safety, pairwise, role-play) override it."""
        try:
            self.dimension = dimension(self.dimension).key
        except UserError as err:
            raise ValueError(str(err)) from None

    def valid_scores(self) -> tuple[int, ...]:
        """The scores a valid record may hold: 0-4 here; an answer's index for other questions."""
        return tuple(SCORES)


def read_scores(path: Path, record_type: type[ScoreRecord] = ScoreRecord) -> Iterator[ScoreRecord]:
    """Every record of a score file, in order; a malformed line is a DataError naming file and line."""
    with Path(path).open(encoding="utf-8") as fh:
        lineno = 0
        try:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    yield record_type.from_dict(json.loads(line))
                except (json.JSONDecodeError, TypeError, ValueError) as err:
                    raise DataError(path, f"line {lineno}", f"not a score record ({err})") from None
        except UnicodeDecodeError as err:
            raise DataError(path, f"line {lineno + 1}", f"not UTF-8 text ({err.reason})") from None


def latest(records: Iterable[ScoreRecord]) -> dict[tuple[str, str], ScoreRecord]:
    """The last record of each (dialogue, dimension): later lines supersede earlier ones."""
    return {record.key: record for record in records}


def merge_score_files(
    paths: Sequence[Path], record_type: type[ScoreRecord] = ScoreRecord
) -> list[ScoreRecord]:
    """The latest judgment of each (dialogue, dimension, judge) over several score files. Within a
    file later lines supersede earlier ones; across files the same key must be the same judged
    content (a copy), else a UserError names both files: two runs whose files and card ids share
    names are kept apart by reporting them in separate calls, never silently superseded."""
    merged: dict[tuple[str, str, str], tuple[ScoreRecord, Path]] = {}
    for path in paths:
        for key, record in latest(read_scores(path, record_type)).items():
            full = (*key, record.judge)
            if full in merged:
                seen, where = merged[full]
                if seen.content_sha != record.content_sha or seen.content_sha is None:
                    raise UserError(
                        f"{where} and {path} both hold judge {record.judge!r}'s score of dialogue "
                        f"{key[0]!r} ({key[1]}) for different dialogues (or without a record of what was "
                        "judged): they come from different runs, whose rows would mix; report them in "
                        "separate calls"
                    )
                continue
            merged[full] = (record, Path(path))
    return [record for record, _ in merged.values()]


class ScoreStore:
    """The judgments of one score file; `done` are the keys not to judge again. `record_type` reads
    its lines (`ScoreRecord`: the 7 dimensions; the role-play metrics have their own)."""

    def __init__(self, path: Path, record_type: type[ScoreRecord] = ScoreRecord) -> None:
        self.path = Path(path)
        self.record_type = record_type
        self.path.parent.mkdir(parents=True, exist_ok=True)
        drop_partial_last_line(self.path)
        self.records = latest(read_scores(self.path, record_type)) if self.path.exists() else {}

    def is_done(
        self, key: tuple[str, str], content_sha: str | None = None, prompt: Mapping[str, Any] | None = None
    ) -> bool:
        """Judged, not failed, and (given `content_sha`) judged on this very content, (given
        `prompt`) asked with this very prompt (`asked_otherwise`)."""
        record = self.records.get(key)
        if record is None or record.status == FAILED:
            return False
        if prompt is not None and self.asked_otherwise(key, prompt):
            return False
        return content_sha is None or record.content_sha == content_sha

    def asked_otherwise(self, key: tuple[str, str], prompt: Mapping[str, Any]) -> bool:
        """Judged before with another prompt: another style or version, or another text of it (the
        sha256 both records carry differs; a record without one matches its style and version)."""
        record = self.records.get(key)
        if record is None:
            return False
        asked = record.prompt or {}
        if (asked.get("style"), asked.get("version")) != (prompt.get("style"), prompt.get("version")):
            return True
        return bool(asked.get("sha256") and prompt.get("sha256") and asked["sha256"] != prompt["sha256"])

    def changed(self, key: tuple[str, str], content_sha: str) -> bool:
        """Judged before, on other content (the dialogue was replaced since)."""
        record = self.records.get(key)
        return record is not None and record.content_sha != content_sha

    def add(self, records: Iterable[ScoreRecord]) -> None:
        records = list(records)
        append_jsonl(self.path, [r.to_dict() for r in records])
        for record in records:
            self.records[record.key] = record


def score_file_paths(spec: str | Path | Sequence[str | Path], key: str | None = None) -> list[Path]:
    """Score files named directly or found in rank.py output directories (`OUT/scores/*.jsonl`)."""
    return find_jsonl_files(spec, "scores", "score", key)


def score_inputs(spec: Any) -> list[Path]:
    """The score files of `scores` (files, or rank.py folders: set and existing where a mode reads
    them, `ScoreFiles` of mode=leaderboard, `ExistingScores` of mode=agreement)."""
    return score_file_paths(spec, "scores")
