"""The run log: one typed, versioned JSON file per rank.py run (`OUT/run.json`), which every view reads.

    {"format": "esc-run/1",
     "header":    what made the run: task, config (redacted), judges and their identities, revisions,
                  package versions, git commit, seed, sources;
     "judgments": every judgment of the run, each naming its task and the dialogues it is about;
     "results":   every figure the run's reports publish, an `Estimate` each (table, keys, value,
                  low, high, n, the unit resampled, note, metric, what it left out by reason);
     "reports":   each report as blocks of text and tables (`esc-report/1`), for md, csv and HTML}

Why one log: the report site, a notebook or `esc runs upgrade` read one file whose shape does not
depend on the task, so a new task shows on the site without the site knowing it (inspect_ai's
`EvalLog` is the model). The judges' JSON-lines stores stay the write-ahead record that makes a run
resumable; the log is written from them when the run reports, replaced whole, and never appended to.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config

from esc.errors import DataError
from esc.jsonl import atomic_write_text, read_json
from esc.reports.estimate import Estimate, Integer, Number, Pairs, Text
from esc.reports.metric import Definition, Metric
from esc.runinfo import GitInfo, Record, record_problem

RUN_LOG = "run.json"
FORMAT = "esc-run/1"


@with_config(ConfigDict(extra="forbid"))
@dataclasses.dataclass(frozen=True)
class Judgment:
    """One judge's answer to one question of one task, about one or more dialogues.

    `dialogues`: the ids of the dialogues it is about (a pairwise verdict: both); `turn`: the
    exchange it concerns, for questions asked of one reply (None: the whole dialogue); `key`: the
    dimension, question or metric asked; `answer`: the answer as the judge gave it ("3", "yes", "A"),
    None when it gave none; `score`: the number the task reads from it. The rest is the judging
    record as the store keeps it (`esc.scoring.store.ScoreRecord`). The types are what a log's
    judgment is read back as (`from_json`): strict where JSON has the type itself."""

    task: Text
    dialogues: tuple[Text, ...]
    key: Text
    judge: Text
    status: Text  # valid | invalid | failed
    answer: Text | None = None
    score: Number | None = None
    expected: Number | None = None
    answer_mass: Number | None = None
    probs: tuple[float, ...] | None = None
    turn: Integer | None = None
    item_id: Text | None = None  # the store's id of what was judged (a reply, a pair in one order)
    target: Text | None = None
    roleplayer: Text | None = None
    language: Text | None = None
    card_id: Integer | None = None
    content_sha: Text | None = None
    source: Text | None = None
    raw: Text | None = None
    error: Text | None = None
    detail: Pairs = ()  # what else the task shows beside the answer

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in dataclasses.asdict(self).items() if v is not None and v != ()}
        out["dialogues"] = list(self.dialogues)
        if self.probs is not None:
            out["probs"] = list(self.probs)
        if self.detail:
            out["detail"] = dict(self.detail)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Judgment:
        """A judgment back from `to_json`; ValueError (pydantic's words, one line) when a field is
        unknown, missing or of the wrong type."""
        try:
            return JUDGMENT.validate_python(data)
        except ValidationError as err:
            raise ValueError(record_problem(err)) from None


JUDGMENT = TypeAdapter(Judgment)


class RunHeader(Record):
    """What made the run (`esc.tasks.run_log.run_header` builds it from the folder's manifest and
    settings): the task that wrote the log and every task the folder holds, when and by what, the
    config (redacted), seed, git commit, packages and Python of the run, the judges' identities and
    the revisions they resolved to, the files it read, and the definitions of the metrics its
    results name. A log keeps the fields its writer set (`to_json`), each in this order."""

    task: str | None = None
    written: str | None = None
    config: dict[str, Any] | None = None
    seed: int | None = None
    git: GitInfo | None = None
    packages: dict[str, Any] | list[Any] | None = None
    python: str | None = None
    judges: list[dict[str, Any]] = []
    revisions: dict[str, Any] = {}
    sources: list[str] = []  # the dialogue files the run read
    scores: list[str] = []  # the score files it read (agreement, correlation)
    tasks: list[str] = []
    written_by: str | None = None
    metrics: dict[str, Definition] = {}  # name -> what the results' figures of that name measure

    def to_json(self) -> dict[str, Any]:
        """The header as the log holds it: the fields its writer set, in the order declared here."""
        return self.model_dump(exclude_unset=True)


@dataclasses.dataclass
class RunLog:
    header: RunHeader
    judgments: list[Judgment]
    results: list[Estimate]
    reports: dict[str, dict[str, Any]]  # kind -> the report's blocks (`esc.reports.result.Report.to_json`)

    @property
    def task(self) -> str | None:
        return self.header.task

    def metrics(self) -> dict[str, Metric]:
        """What the results' metrics are (name -> definition), as the header defines them."""
        return {name: definition.metric(name) for name, definition in self.header.metrics.items()}

    def by_dialogue(self) -> dict[str, list[Judgment]]:
        """Dialogue id -> the judgments about it, in log order."""
        out: dict[str, list[Judgment]] = {}
        for j in self.judgments:
            for d in j.dialogues:
                out.setdefault(d, []).append(j)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "header": self.header.to_json(),
            "judgments": [j.to_json() for j in self.judgments],
            "results": [e.to_json() for e in self.results],
            "reports": self.reports,
        }


def write_run_log(out: Path, log: RunLog) -> Path:
    """OUT/run.json, replaced whole (secrets masked by the writer); its path."""
    path = Path(out) / RUN_LOG
    text = json.dumps(log.to_json(), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    atomic_write_text(path, text + "\n")
    return path


def read_run_log(path: Path) -> RunLog:
    """A run log, checked: a DataError naming the file (and the record) when it is not one, and
    saying how to convert a folder written before run logs existed."""
    path = Path(path)
    if path.is_dir():
        path = path / RUN_LOG
    if not path.is_file():
        raise DataError(
            path, None, f"no run log; a folder written before {FORMAT}: `esc runs upgrade {path.parent}`"
        )
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise DataError(
            path,
            None,
            f"not a {FORMAT} run log (format {found!r}): `esc runs upgrade {path.parent}` rewrites it",
        )
    try:
        header = data["header"]
        if not isinstance(header, dict):
            raise TypeError("header must be an object")
        try:
            header = RunHeader.model_validate(header)
        except ValidationError as err:
            raise DataError(path, "header", f"malformed run log: {record_problem(err)}") from None
        judgments = _records(data["judgments"], Judgment.from_json, "judgment")
        results = _records(data["results"], Estimate.from_json, "result")
        reports = data["reports"]
        if not isinstance(reports, dict):
            raise TypeError("reports must be an object")
    except (KeyError, TypeError, ValueError) as err:
        raise DataError(path, None, f"malformed run log: {err}") from None
    return RunLog(header, judgments, results, reports)


def _records(items: Any, parse: Any, what: str) -> list[Any]:
    if not isinstance(items, list):
        raise TypeError(f"{what}s must be a list")
    out = []
    for i, item in enumerate(items):
        try:
            out.append(parse(item))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"{what} {i}: {err}") from None
    return out


def estimates_of(results: Iterable[Estimate], table: str) -> list[Estimate]:
    """The figures of one table, in log order."""
    return [e for e in results if e.table == table]


def keyed(results: Sequence[Estimate], **keys: str) -> list[Estimate]:
    """The figures whose keys include every `keys` given (e.g. target="tiny")."""
    return [e for e in results if all(dict(e.keys).get(k) == v for k, v in keys.items())]
