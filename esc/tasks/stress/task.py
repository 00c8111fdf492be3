"""`rank.py mode=stress`: the judge under metamorphic tests (docs/stress.md).

For each complete dialogue of `dialogues` and each perturbation of `stress.perturbations`
(`esc.tasks.stress.perturbations`), a variant is made (deterministic with `stress.seed`) and written
as a dialogue record to `OUT/variants/<dialogue file>~<perturbation>.jsonl`, with
`meta.derived_from` (the original's id) and `meta.perturbation` (name, version, texts' sha256, seed).
Then the judge (or each judge of a jury) scores the originals that have a variant and every variant
on the run's dimensions, into `OUT/scores/` like mode=score: one judging call set, resumable (a rerun
rewrites the same variants and judges only what is missing), its cost estimated before the first
request. The report card (`esc.tasks.stress.report`) compares each variant's scores with its
original's.

Bad input stops before any request or file: a perturbation the registry does not know (the config
check), a dialogue in a language a selected perturbation has no texts for, no complete dialogue.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from esc.config_rules import Section, Settings, check, show
from esc.dialogues.record import Dialogue
from esc.dialogues.store import read_dialogues
from esc.errors import ConfigError, UserError
from esc.jsonl import atomic_write_text
from esc.lifecycle import JobResult
from esc.reports.runlog import Judgment
from esc.scoring.judge import FAILED, INVALID, VALID, Judge
from esc.scoring.judging import Batch, load_items, score_batch, selected_dimensions
from esc.scoring.safety_checklist import SafetyRecord, checklist, question_keys, replies, safety_items
from esc.scoring.store import ScoreRecord, ScoreStore, merge_score_files
from esc.settings.plugins import registered
from esc.settings.types import NonEmpty
from esc.tasks.run_log import logged_reply
from esc.tasks.safety.task import once_each
from esc.tasks.stress import perturbations as perturb
from esc.tasks.stress.report import write_report
from esc.tasks.task import Context, Mode, Outcome, Plan, register

MIN_RESAMPLES = 200
"""The fewest resamples a verdict's 95% interval may come from: its ends are the 2.5th and 97.5th
percentiles, which 1-3 resamples do not have (3 gave `+0.12 [every resample 0.00]` *invariant*: an
interval that did not hold its own estimate). 0 asks for none (every verdict *undecided*)."""


def _resamples(value: int) -> str | None:
    if value == 0 or value >= MIN_RESAMPLES:
        return None
    return (
        f"must be 0 (no intervals: every verdict undecided) or at least {MIN_RESAMPLES} resamples (a "
        f"verdict is read off the 95% interval's ends, which fewer resamples do not place), got {show(value)}"
    )


class StressSettings(Settings):
    """`stress` (conf/rank.yaml): which perturbations, their seed, the invariance tolerance, resamples."""

    perturbations: (
        Literal["all"]
        | Annotated[
            NonEmpty[
                Annotated[str, registered(lambda: tuple(perturb.PERTURBATIONS), "a registered perturbation")]
            ],
            check(once_each, "each once"),
        ]
    )
    seed: int  # the variants' random choices (which reply, which sentence, which text)
    tolerance: float = Field(gt=0, le=4)  # points (0-4): a neutral change moving less is *invariant*
    bootstrap: Annotated[int, check(_resamples)]  # resamples by role card for the 95% intervals: 0 or >= 200
    checklist: bool  # also ask the safety checklist of every reply of the originals and variants
    flag_tolerance: float = Field(
        gt=0, le=1
    )  # share of dialogues: a neutral change moving less is *invariant*


@dataclasses.dataclass
class Variants:
    """The variants of one dialogue file made by one perturbation."""

    source: Path
    perturbation: perturb.Perturbation
    path: Path  # OUT/variants/<source stem>~<perturbation>.jsonl
    made: dict[str, str]  # variant dialogue id -> its original's
    not_applicable: int  # complete dialogues the perturbation found nothing to change in


@dataclasses.dataclass
class StressResult(JobResult):
    markdown: str = ""
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    verdicts: dict[str, int] = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        c = self.counts
        said = ", ".join(f"{n} {v}" for v, n in sorted(self.verdicts.items()))
        return (
            f"{self.markdown}\n{c.get(VALID, 0)} valid, {c.get(INVALID, 0)} invalid, "
            f"{c.get(FAILED, 0)} failed judgments ({c.get('skipped', 0)} already done); "
            f"verdicts: {said or 'none'}; "
            f"{self.output_dir}/stress.md, stress_card.csv"
        )

    def incomplete(self) -> str | None:
        if not self.counts.get(FAILED):
            return None
        return (
            f"{self.counts[FAILED]} judgments failed (no answer came); rerun the same command to retry them"
        )


def dialogue_id(path: Path, dialogue: Dialogue) -> str:
    """A dialogue's id as every score file names it (`esc.scoring.judging.load_items`)."""
    return f"{path.stem}/{dialogue.card_id}"


def complete_dialogues(path: Path) -> list[Dialogue]:
    return [d for d in read_dialogues(path) if d.status == "complete"]


def check_languages(files: list[Path], chosen: list[perturb.Perturbation]) -> dict[Path, list[Dialogue]]:
    """The complete dialogues of each file; a UserError naming the file and perturbation where a
    dialogue's language is one the perturbation has no texts for, or where no file has a dialogue."""
    found = {path: complete_dialogues(path) for path in files}
    if not any(found.values()):
        raise UserError(f"no complete dialogue to perturb in {', '.join(map(str, files))}")
    for path, dialogues in found.items():
        for language in sorted({d.language for d in dialogues}):
            lacking = [p.name for p in chosen if language not in p.languages]
            if lacking:
                raise UserError(
                    f"{path}: its {language!r} dialogues cannot be perturbed by {', '.join(lacking)} "
                    f"(no {language!r} texts in {perturb.TEXTS_FILE.name}); leave "
                    f"{'it' if len(lacking) == 1 else 'them'} out of stress.perturbations"
                )
    return found


def write_variants(
    out: Path, path: Path, dialogues: list[Dialogue], p: perturb.Perturbation, seed: int
) -> Variants:
    """The variants of `dialogues` by `p`, written whole (the same bytes on a rerun: deterministic)."""
    target = out / "variants" / f"{path.stem}~{p.name}.jsonl"
    made: dict[str, str] = {}
    lines = []
    for d in dialogues:
        original = dialogue_id(path, d)
        changed = perturb.variant(p, d, original, seed)
        if changed is not None:
            made[dialogue_id(target, changed)] = original
            lines.append(json.dumps(changed.to_dict(), ensure_ascii=False) + "\n")
    target.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(lines)
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        atomic_write_text(target, text)
    return Variants(path, p, target, made, len(dialogues) - len(made))


@register
class Stress(Mode):
    """Perturb the dialogues, judge originals and variants, and report the judge's card."""

    name = "stress"
    reads_dialogues = True
    takes_jury = True
    reports = ("stress",)
    config = (Section("stress", StressSettings),)
    stores = (("scores/*.jsonl", ScoreRecord), ("safety/*.jsonl", SafetyRecord))

    def judgment(self, record: ScoreRecord) -> Judgment:
        """A score as mode=score logs it; a checklist answer (`stress.checklist`) as mode=safety does:
        about one reply (item id `<dialogue id>#<exchange>`), answered "yes" (flagged) or "no"."""
        if not isinstance(record, SafetyRecord):
            return super().judgment(record)
        return logged_reply(self.name, record, checklist()["answers"])

    def settings(self, sections: Mapping[str, Any]) -> dict[str, Any]:
        # the variants depend on the texts, the perturbations chosen and the seed
        s: StressSettings = sections["stress"]
        chosen = [p.name for p in perturb.selected(s.perturbations)]
        made = {"texts_sha256": perturb.texts()["sha256"], "perturbations": chosen, "seed": s.seed}
        return {"stress": {**made, **({"checklist_sha256": checklist()["sha256"]} if s.checklist else {})}}

    def plan(self, ctx: Context) -> Plan:
        settings: StressSettings = ctx.section("stress")
        chosen = perturb.selected(settings.perturbations)
        files = ctx.dialogue_files(distinct_names=True)
        dims = selected_dimensions(ctx.run.dimensions)
        found = check_languages(files, chosen)  # bad input stops here, before any file is written
        made = [
            write_variants(ctx.out, path, dialogues, p, settings.seed)
            for path, dialogues in found.items()
            if dialogues
            for p in chosen
        ]
        perturbed = {original for v in made for original in v.made.values()}
        to_judge: list[tuple[Path, set[str]]] = [(path, perturbed) for path in files if found[path]]
        to_judge += [(v.path, set(v.made)) for v in made if v.made]
        if settings.checklist:
            refuse_adapter_judges(ctx.judges)
        batches = []
        for judge in ctx.judges:
            for path, wanted in to_judge:
                if settings.checklist:
                    batches.append(checklist_batch(ctx.out, judge, path, wanted))
                items = [(item, fields) for item, fields in load_items(path, dims) if item.item_id in wanted]
                batches.append(
                    score_batch(judge, path, items, ctx.out / "scores" / f"{path.stem}__{judge.name}.jsonl")
                )
        manifest = {
            "sources": [str(p) for p in files],
            "variants": {
                v.path.name: {"made": len(v.made), "not_applicable": v.not_applicable} for v in made
            },
        }
        return Plan(batches, manifest, (made, dims))

    def report(self, ctx: Context, plan: Plan) -> Outcome:
        made, dims = plan.data
        settings: StressSettings = ctx.section("stress")
        records = merge_score_files(sorted((ctx.out / "scores").glob("*.jsonl")))
        answers = (
            merge_score_files(sorted((ctx.out / "safety").glob("*.jsonl")), SafetyRecord)
            if settings.checklist
            else []
        )
        report = write_report(ctx.out, records, answers, made, dims, settings, ctx.seed)
        counts = Counter(ctx.counts)
        verdicts = Counter(line.verdict for line in report["lines"])
        result = StressResult(str(ctx.out), report["markdown"], dict(counts), dict(verdicts))
        return Outcome(result, {"report": str(ctx.out / "stress.md"), "verdicts": dict(verdicts)})


def refuse_adapter_judges(judges: list[Judge]) -> None:
    """A judge that scores through per-dimension adapters (ESC-RANK) answers a rubric's 0-4, never a
    checklist question: a ConfigError before any request."""
    for judge in judges:
        if judge.scores_by_adapter:
            raise ConfigError(
                "stress.checklist",
                f"judge {judge.name!r} scores through per-dimension adapters, which answer a rubric's 0-4, "
                "not the checklist's yes/no: set stress.checklist=false, or judge the checklist with another "
                "judge",
            )


def checklist_batch(out: Path, judge: Judge, path: Path, wanted: set[str]) -> Batch:
    """The safety checklist's questions about every reply of the dialogues of `path` in `wanted`,
    into `OUT/safety/<file>__<judge>.jsonl` (as mode=safety keeps them)."""
    items = []
    for lineno, dialogue in enumerate(read_dialogues(path), 1):
        if dialogue.status == "complete" and dialogue_id(path, dialogue) in wanted:
            for reply, lines in replies(dialogue, path, lineno):
                items += safety_items(reply, lines, question_keys())
    store = ScoreStore(out / "safety" / f"{path.stem}__{judge.name}.jsonl", SafetyRecord)
    return Batch(judge, items, store, f"safety checklist of {path.stem}", "answer")
