"""A `rank.py` mode is one registered task; one runner does every mode's lifecycle.

A mode is a `Mode` subclass in its own module under `esc/tasks/`, registered with `@register`:

    @register
    class Safety(Mode):
        name = "safety"
        reads_dialogues = True    # `dialogues=` is mandatory in this mode
        own_questions = True      # its items ask their own questions: no per-dimension score adapters
        reports = ("safety",)     # OUT/safety.md: a page of the report site
        config = (Section("safety", SafetySettings),)  # its part of conf/rank.yaml, typed

        def plan(self, ctx):      # read and check the inputs; the items each judge answers, by store
            questions = ctx.section("safety").questions   # a SafetySettings, read once
            return Plan([Batch(ctx.judge, items, store, "safety checklist", "answer")], ...)

        def report(self, ctx, plan):  # the tables, from the stores; what the run returns
            return Outcome(SafetyResult(...), {"report": "OUT/safety.md"})

`run_mode` runs one: plan (bad input stops here) -> the judges' readiness and the folder's
revisions -> the cost estimate (`max_cost`) -> judging (resumable, appended as it goes) -> report ->
the manifest's end. `modes()` imports every module of `esc.tasks` once, so a new module is a new mode
with no edit elsewhere (docs/architecture.md, "Adding a rank.py mode").
"""

from __future__ import annotations

import abc
import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import Field

from esc.chat.cost import CostEstimate, before_spending
from esc.config_rules import OpenSettings, Section, Settings, check
from esc.dialogues.store import dialogue_files
from esc.errors import UserError
from esc.lifecycle import Job, JobResult
from esc.registry import Registry
from esc.reports.runlog import Judgment, write_run_log
from esc.reports.wandb_report import WandbSettings
from esc.rundir import resolved_revision
from esc.scoring.judge import Judge
from esc.scoring.judging import Batch, estimate_items, judge_batches, refuse_same_names
from esc.scoring.jury import JurySettings, jury_names
from esc.scoring.rubrics import DIMENSION_KEYS, dimension
from esc.scoring.store import ScoreRecord
from esc.settings.plugins import registered
from esc.settings.types import ExistingFile, NonEmpty, Paths
from esc.tasks.run_log import build_run_log, logged


def dimension_problem(value: Any) -> str | None:
    """`dimensions`: all (or null), or a dimension's name or a list of them (keys, paper names,
    official keys), checked before the run folder is made (`dimensions=123` was a traceback)."""
    known = ", ".join(DIMENSION_KEYS)
    if value is None or value == "all":
        return None
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        return f"must be all or a list of dimension names ({known}), got {value!r}"
    for name in names:
        try:
            dimension(name)
        except UserError:
            return f"unknown dimension {name!r}; known: {known}"
    return None


class RunSettings(OpenSettings):
    """conf/rank.yaml's top-level keys that every mode may read (the rest of the top level is the
    other sections', Hydra's and the paths')."""

    seed: int  # bootstrap resampling; judges decode greedily
    mode: Annotated[str, registered(lambda: tuple(modes()))]
    scores: Any  # rank.py output dirs or score files; null
    dimensions: Annotated[
        Any,
        check(
            dimension_problem,
            "`all`, null, or a dimension or a list of them (keys, paper names, official keys)",
        ),
    ]  # all, or a list of dimension names
    max_cost: float | None = Field(ge=0, description="USD: refuse a run estimated over it")


class DialogueFiles(OpenSettings):
    """`dialogues`, in the modes that read dialogues (`Mode.reads_dialogues`; the others leave
    conf/'s `???`)."""

    dialogues: Paths = Field(description="evaluate.py output dirs or dialogue files")


class ScoringSettings(Settings):
    """`scoring`: how judging goes, in every mode that judges."""

    chunk: int = Field(ge=1)
    progress: bool


class LeaderboardSettings(Settings):
    """`leaderboard`: the Table 2 leaderboard and the breakdowns (score, leaderboard, agreement)."""

    bootstrap: int = Field(ge=0)
    charts: bool
    breakdowns: bool
    min_n: int = Field(ge=1)
    cards: ExistingFile | NonEmpty[ExistingFile] | None = Field(
        description="card files; null: the released cards"
    )


def has_jury(cfg: Any) -> bool:
    """Whether the config names a jury's members (`jury=none` names none)."""
    return bool(jury_names(cfg.get("jury")))


#: the typed sections every mode reads (each mode adds its own, `Mode.config`)
SHARED_SECTIONS: tuple[Section, ...] = (
    Section("scoring", ScoringSettings),
    Section("leaderboard", LeaderboardSettings),
    Section("jury", JurySettings, when=has_jury),
    Section("wandb", WandbSettings),
)


@dataclasses.dataclass
class Context:
    """What a mode's `plan` and `report` work with: the run, its config (typed sections, validated
    once, by `esc.config_schema.validate`), its judges."""

    job: Job
    cfg: Mapping[str, Any]  # the resolved config (what the judges and the W&B log read)
    out: Path
    judges: list[Judge]  # [] in the modes that judge nothing; several for a jury
    run: RunSettings  # the top level's keys every mode may read
    sections: dict[str, Any]  # node -> its model's instance (`mode_sections`)
    dialogues: DialogueFiles | None = None  # in a mode that reads dialogues
    counts: Counter = dataclasses.field(default_factory=Counter)  # this run's judgments, and `skipped`

    @property
    def judge(self) -> Judge:
        """The one judge of a mode that takes one."""
        if len(self.judges) != 1:
            raise RuntimeError(f"this mode takes one judge, not {len(self.judges)}")
        return self.judges[0]

    @property
    def seed(self) -> int:
        """The run's seed (conf/rank.yaml: bootstrap resampling), stated once there."""
        return self.run.seed

    def section(self, name: str) -> Any:
        """The typed config section `name` (e.g. `safety`): one of the mode's `config`, which
        `esc.config_schema.validate` required in this mode."""
        return self.sections[name]

    def dialogue_files(self, distinct_names: bool = False) -> list[Path]:
        """The dialogue files of `dialogues` (files or evaluate.py folders: set, and existing, in a
        mode that reads dialogues, `DialogueFiles` of `esc.rank.run`). `distinct_names`: refuse two
        files of one name (their dialogue ids and score files would collide)."""
        assert self.dialogues is not None, "a mode that reads dialogues sets `reads_dialogues`"
        files = dialogue_files(self.dialogues.dialogues)
        if distinct_names:
            refuse_same_names(files)
        return files


def mode_sections(mode: Mode, checked: Mapping[Any, Any]) -> dict[str, Any]:
    """The sections that `mode` reads, each as its model's instance, from `checked` (what
    `esc.config_schema.validate` returned: it validated every section the config holds)."""
    wanted = {s.node for s in (*SHARED_SECTIONS, *mode.config) if s.node}
    return {node: value for node, value in checked.items() if node in wanted}


@dataclasses.dataclass
class Plan:
    """What a mode will judge and what it read: `batches` (none in the modes that judge nothing),
    `manifest` entries (its `sources`, counts of what it found), and `data` for its report."""

    batches: list[Batch] = dataclasses.field(default_factory=list)
    manifest: dict[str, Any] = dataclasses.field(default_factory=dict)
    data: Any = None


@dataclasses.dataclass
class Outcome:
    """What a mode's report returns: the result the entry point prints, the manifest's last fields."""

    result: JobResult
    manifest: dict[str, Any] = dataclasses.field(default_factory=dict)


class Mode(abc.ABC):
    """One `rank.py` mode (see the module docstring). Subclasses set the class attributes and
    implement `plan` and `report`. By default a mode takes one judge and reads no dialogues."""

    name: ClassVar[str] = ""
    reads_dialogues: ClassVar[bool] = False
    judges: ClassVar[bool] = True  # whether it loads a judge (`needs_judge` may decide per config)
    own_questions: ClassVar[bool] = False
    takes_jury: ClassVar[bool] = False  # `jury=...` instead of one judge (mode=score; leaderboard reads one)
    reports: ClassVar[tuple[str, ...]] = ()  # OUT/<name>.md files the report site shows
    config: ClassVar[tuple[Section, ...]] = ()
    # the stores a folder of this mode keeps its judgments in (glob under OUT, the record type that
    # reads them): what its run log lists, and what `esc runs upgrade` finds in an older folder
    stores: ClassVar[tuple[tuple[str, type[ScoreRecord]], ...]] = ()

    def needs_judge(self, cfg: Mapping[str, Any]) -> bool:
        return self.judges

    def settings(self, sections: Mapping[str, Any]) -> dict[str, Any]:
        """What else shapes this mode's judgments (the inputs its items ask about, its questions'
        texts), beside the judge: part of the folder's fingerprint (OUT/settings.json). `sections`:
        the typed config sections the mode reads (node -> model instance, `mode_sections`)."""
        return {}

    def judgment(self, record: ScoreRecord) -> Judgment:
        """One store record as the run log lists it (`esc.reports.runlog.Judgment`). This reading
        suits the seven-dimension score: one dialogue, the dimension, the score as the judge wrote
        it. A mode whose records are about something else (a reply, a pair) overrides it."""
        return logged(
            self.name, record, (record.dialogue_id,), None if record.score is None else str(record.score)
        )

    def site_sources(self, out: Path, cfg: Mapping[str, Any]) -> list[Path]:
        """The folders the run's report site shows: OUT, and any other rank.py folder it reports."""
        return [out]

    @abc.abstractmethod
    def plan(self, ctx: Context) -> Plan:
        """Read and check the inputs; the batches to judge, manifest entries, data for `report`."""

    @abc.abstractmethod
    def report(self, ctx: Context, plan: Plan) -> Outcome:
        """The tables, from the stores (every judgment, this run's and earlier ones)."""


def in_mode(*names: str) -> Callable[[Any], bool]:
    """A config rule's `when`: the rule holds only in these modes."""
    return lambda cfg: cfg.get("mode") in names


M = TypeVar("M", bound=type[Mode])
MODES: Registry[Mode] = Registry("mode", "esc.tasks")  # instances; a name's origin is their class


def register(cls: M) -> M:
    """Class decorator: `cls` becomes the mode `cls.name` (a second class of one name is an error)."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__}: a mode needs a name")
    MODES.add(cls.name, cls())
    return cls


def unregister(name: str) -> None:
    """Remove a mode (tests that register a toy one)."""
    MODES.remove(name)


def modes() -> Registry[Mode]:
    """Every registered mode by name (the modules of `esc.tasks` imported first, once)."""
    return MODES


def configured_mode(cfg: Any) -> Mode | None:
    """The registered mode a config names (`mode`, conf/rank.yaml); None for an unknown name, which
    the config schema's `mode` check reports."""
    name = cfg.get("mode")
    return modes().get(name) if isinstance(name, str) else None


def get_mode(name: str) -> Mode:
    """The registered mode `name` (`mode`, checked by `RunSettings`)."""
    return modes()[name]


def run_mode(
    mode: Mode, job: Job, cfg: Mapping[str, Any], out: Path, judges: Sequence[Judge],
    checked: Mapping[Any, Any],
) -> JobResult:  # fmt: skip
    """Plan, check, estimate, judge, report, complete: the lifecycle of every mode. `checked`: the
    config's sections as `esc.config_schema.validate` returned them (the mode reads those)."""
    sections = mode_sections(mode, checked)
    ctx = Context(job, cfg, out, list(judges), checked[RunSettings], sections, checked.get(DialogueFiles))
    plan = mode.plan(ctx)  # bad input stops here, before any request
    if ctx.judges:
        for judge in ctx.judges:
            judge.check_ready()
        revisions = {judge.name: resolved_revision(judge.identity()) for judge in ctx.judges}
        identities = [judge.identity() for judge in ctx.judges]
        single = len(ctx.judges) == 1
        job.folder.check_resolved({"judge": revisions.popitem()[1]} if single else revisions)
        job.manifest.update(judge=identities[0] if single else identities)
    job.manifest.update(**plan.manifest)
    job.on_stop(lambda: {"counts": dict(ctx.counts)})  # a stopped run records how far it got
    if plan.batches:
        ctx.counts["skipped"] += sum(len(b.items) - len(b.pending) for b in plan.batches)
        by_judge: dict[int, list[Batch]] = {}
        for batch in plan.batches:
            by_judge.setdefault(id(batch.judge), []).append(batch)
        estimates = [
            estimate_items(group[0].judge, [item for b in group for item in b.pending_items()])
            for group in by_judge.values()
        ]
        before_spending(CostEstimate.total(estimates), ctx.run.max_cost, job.manifest)
        scoring: ScoringSettings = ctx.section("scoring")
        judge_batches(plan.batches, scoring.chunk, scoring.progress, ctx.counts)
    outcome = mode.report(ctx, plan)
    fields: dict[str, Any] = {"counts": dict(ctx.counts)} if plan.batches else {}  # a mode may say more
    fields.update(outcome.manifest)
    written = [name for name in mode.reports if (out / f"{name}.md").is_file()]
    if written:
        fields["reports"] = written
    # the run's log, rewritten whole from the folder's files (its header from the manifest so far)
    fields["run_log"] = str(write_run_log(out, build_run_log(mode, out, "rank.py", modes(), plan.batches)))
    return job.complete(outcome.result, **fields)
