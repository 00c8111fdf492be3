"""A rank.py folder's run log (`esc.reports.runlog`, OUT/run.json), built from the files the run wrote.

`run_mode` writes it after a mode's report, and `esc runs upgrade` writes it into a folder from
before run logs, both with `build_run_log`, from the same files:

    header     OUT/manifest.json (the redacted config, the judges, seed, sources, commit, packages)
               and OUT/settings.json (the revisions the judges resolved to);
    judgments  every record of the stores of every task the folder holds (`Mode.stores`, and a live
               run's plan), each as its task reads it (`Mode.judgment`);
    results    every figure of OUT/<kind>.result.json for kind in those tasks' `Mode.reports`,
               placed in its table (`esc.reports.result.Report.estimates`);
    reports    those result.json payloads, by kind.

Why from files and not from the run's memory: a folder written before run logs holds nothing else,
and its upgraded log must be the log its run would have written.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from esc.errors import DataError
from esc.jsonl import read_json
from esc.reports.estimate import Estimate
from esc.reports.metric import definitions
from esc.reports.result import Heading, Report, Table, read_result, result_path
from esc.reports.runlog import Judgment, RunHeader, RunLog
from esc.rundir import SETTINGS_FILE, read_settings
from esc.runinfo import now, read_manifest
from esc.scoring.store import ScoreRecord, latest, read_scores


class Mode(Protocol):
    """What the log reads of a task (`esc.tasks.task.Mode`, which imports this module)."""

    name: str
    reports: tuple[str, ...]
    stores: tuple[tuple[str, type[ScoreRecord]], ...]

    def judgment(self, record: ScoreRecord) -> Judgment: ...


MANIFEST = "manifest.json"


def logged_reply(task: str, record: ScoreRecord, answers: Sequence[str]) -> Judgment:
    """A checklist answer about one reply (item id `<dialogue id>#<exchange>`) as a run log lists it:
    its dialogue, the exchange as the turn, the answer as the checklist words it (`answers`, by
    score: "yes" flags the reply). mode=safety's and mode=stress's checklist records."""
    dialogue_id, _, exchange = record.dialogue_id.rpartition("#")
    if not dialogue_id or not exchange.isdigit():
        raise ValueError("not a reply's id (<dialogue id>#<exchange>)")
    answer = None if record.score is None else answers[record.score]
    return logged(task, record, (dialogue_id,), answer, turn=int(exchange))


def logged(
    task: str, record: ScoreRecord, dialogues: Sequence[str], answer: str | None, **fields: Any
) -> Judgment:
    """`record` as a run log lists it: what every store record holds, plus what its task reads from
    it: `dialogues`, `answer`, and `fields` (a turn, a detail, what the record's id says of its
    dialogues). `item_id` is the record's id where it is not the one dialogue's."""
    values: dict[str, Any] = {
        "task": task,
        "dialogues": tuple(dialogues),
        "key": record.dimension,
        "judge": record.judge,
        "status": record.status,
        "answer": answer,
        "score": None if record.score is None else float(record.score),
        "expected": _finite(record.expected),
        "answer_mass": _finite(record.answer_mass),
        "probs": _finite_all(record.probs),
        "item_id": None if tuple(dialogues) == (record.dialogue_id,) else record.dialogue_id,
        "target": record.target,
        "roleplayer": record.roleplayer,
        "language": record.language,
        "card_id": record.card_id,
        "content_sha": record.content_sha,
        "source": record.source,
        "raw": record.raw,
        "error": record.error,
    }
    return Judgment(**{**values, **fields})


def _finite(x: float | None) -> float | None:
    """A number the log can hold (JSON has no NaN): a store may keep a NaN mass or expectation."""
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _finite_all(xs: Sequence[float] | None) -> tuple[float, ...] | None:
    return None if xs is None or not all(math.isfinite(float(x)) for x in xs) else tuple(map(float, xs))


def run_header(folder: Path, task: str, **fields: Any) -> RunHeader:
    """What made the run, from the folder's manifest and settings records (see the module docstring),
    and `fields` (what wrote the log, the tasks it holds, its metrics); `written` is the log's one
    timestamp."""
    folder = Path(folder)
    m = read_manifest(folder / MANIFEST)
    settings = read_settings(folder).get(f"rank.{task}", {}) if (folder / SETTINGS_FILE).is_file() else {}
    if not isinstance(settings, dict):
        raise DataError(folder / SETTINGS_FILE, f"rank.{task}", "not a settings record (expected an object)")
    return RunHeader(
        task=task, written=now(), config=m.config, seed=m.seed, git=m.git, packages=m.packages,
        python=m.python, judges=m.judges, revisions=settings.get("resolved", {}), sources=m.sources,
        scores=m.scores, **fields,
    )  # fmt: skip


def store_judgments(mode: Mode, stores: Iterable[tuple[Path, type[ScoreRecord]]]) -> list[Judgment]:
    """Every record of each store (the latest of each item and question, in file order), as `mode`
    reads it; a store that does not read is a DataError naming the file and line."""
    out = []
    for path, record_type in stores:
        for record in latest(read_scores(path, record_type)).values():
            try:
                out.append(mode.judgment(record))
            except (ValueError, KeyError, IndexError) as err:
                raise DataError(path, record.dialogue_id, f"not a {mode.name} judgment: {err}") from None
    return out


def mode_stores(mode: Mode, out: Path, batches: Iterable[Any] = ()) -> list[tuple[Path, type[ScoreRecord]]]:
    """The stores a folder of `mode` holds (`Mode.stores`), and those of a live run's plan
    (`batches`), each once, in path order, with the record type that reads it."""
    stores = folder_stores(out, [mode], mode, batches)
    return [(path, record_type) for path, (_, record_type) in stores.items()]


def folder_stores(
    out: Path, tasks: Sequence[Mode], current: Mode, batches: Iterable[Any] = ()
) -> dict[Path, tuple[Mode, type[ScoreRecord]]]:
    """Each store file of the folder with the task that owns it: the live run's batches are
    `current`'s; a file several tasks' patterns match (`scores/*.jsonl` and
    `scores/annotations__*.jsonl`) belongs to the most specific pattern (the longest)."""
    out = Path(out)
    claims: dict[Path, tuple[int, Mode, type[ScoreRecord]]] = {}
    for batch in batches:
        claims[Path(batch.store.path).resolve()] = (1 << 30, current, batch.store.record_type)
    for task in tasks:
        for pattern, record_type in task.stores:
            for path in out.glob(pattern):
                held = claims.get(path.resolve())
                if held is None or held[0] < len(pattern):
                    claims[path.resolve()] = (len(pattern), task, record_type)
    return {path: (task, record_type) for path, (_, task, record_type) in sorted(claims.items())}


def folder_tasks(out: Path, current: Mode, registered: Mapping[str, Mode]) -> list[Mode]:
    """The tasks that ran in the folder: those OUT/settings.json records (`rank.<task>`) and
    `current`, in the order of the registry. A folder may hold several (mode=score, then
    mode=safety into the same OUT), and its log holds all of them."""
    recorded = read_settings(out) if (Path(out) / SETTINGS_FILE).is_file() else {}
    names = {k.split(".", 1)[1] for k in recorded if k.startswith("rank.")} | {current.name}
    return [registered[name] for name in registered if name in names]


def named_tables(report: Report) -> Report:
    """`report` with each unnamed table that shares its heading with another numbered "<heading> #k":
    a report written before tables had names (`Table.name`) would place the figures of several
    tables at one name, where the same row and column labels collide."""
    under: dict[tuple[int, str], list[int]] = {}  # a heading (block, text) -> the unnamed tables under it
    heading: tuple[int, str] | None = None
    for i, block in enumerate(report.blocks):
        if isinstance(block, Heading):
            heading = (i, block.text)
        elif isinstance(block, Table) and block.name is None and heading is not None:
            under.setdefault(heading, []).append(i)
    blocks = list(report.blocks)
    for (_, text), tables in under.items():
        for k, i in enumerate(tables if len(tables) > 1 else [], 1):
            blocks[i] = dataclasses.replace(report.blocks[i], name=f"{text} #{k}")
    return dataclasses.replace(report, blocks=tuple(blocks))


def report_results(out: Path, kinds: Iterable[str]) -> tuple[list[Estimate], dict[str, dict[str, Any]]]:
    """The placed figures and the payloads of the reports among `kinds` the folder holds
    (OUT/<kind>.result.json); one that does not read is a DataError naming it."""
    results: list[Estimate] = []
    reports: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        path = result_path(out, kind)
        if not path.is_file():
            continue
        try:
            report = read_result(path)
        except ValueError as err:
            raise DataError(path, None, f"not a report result: {err}") from None
        results += named_tables(report).estimates()
        reports[kind] = read_json(path)
    return results, reports


def build_run_log(
    mode: Mode,
    out: Path,
    written_by: str,
    registered: Mapping[str, Mode],
    batches: Iterable[Any] = (),
) -> RunLog:
    """The run log of the folder `out`, last run by a run of `mode` (see the module docstring): the
    header of that run, and the judgments and reports of every task the folder holds
    (`folder_tasks`); `written_by`: the command that wrote it (rank.py, or `esc runs upgrade`)."""
    tasks = folder_tasks(out, mode, registered)
    judgments: list[Judgment] = []
    for path, (task, record_type) in folder_stores(out, tasks, mode, batches).items():
        judgments += store_judgments(task, [(path, record_type)])
    kinds = list(dict.fromkeys(kind for task in tasks for kind in task.reports))
    results, reports = report_results(out, kinds)
    named = [e.metric for e in results if e.metric]
    metrics = {"metrics": definitions(named)} if named else {}  # what its figures measure, for every view
    header = run_header(out, mode.name, tasks=[t.name for t in tasks], written_by=written_by, **metrics)
    return RunLog(header, judgments, results, reports)
