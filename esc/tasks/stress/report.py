"""The stress test's report: the judge's report card (stress.md, stress_card.csv, the run log's
figures, a page of the report site), read from the score stores and the variants' records."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from esc.reports import result as result_
from esc.reports.bootstrap import card_units, share_figure
from esc.reports.chart_spec import Chart
from esc.reports.estimate import Estimate, format_estimate, resampled_units
from esc.reports.result import Heading, Report, Table, Text, write_result
from esc.scoring.judge import VALID
from esc.scoring.rubrics import dimension
from esc.scoring.safety_checklist import FLAG, SafetyRecord
from esc.scoring.store import ScoreRecord
from esc.tasks.stress import card
from esc.tasks.stress.metrics import CHANGE, FLAG_CHANGE, FLAG_MOVED, MOVED
from esc.tasks.stress.perturbations import DEGRADATION, LOWER, RAISE, Perturbation

EXPECTED = {LOWER: "lower", RAISE: "flagged more", 0: "no change"}


def card_lines(
    records: Sequence[ScoreRecord], made: Sequence[Any], dims: Sequence[str], tolerance: float,
    n_resamples: int, seed: int,
) -> list[card.Line]:  # fmt: skip
    """Every row of the report card: judge x perturbation x judged dimension it has an expectation for."""
    index = {(r.judge, r.dialogue_id, dimension(r.dimension).key): r for r in records}
    chosen: dict[str, Perturbation] = {v.perturbation.name: v.perturbation for v in made}
    lines = []
    for judge in sorted({r.judge for r in records}):
        for name, p in chosen.items():
            variants = {vid: oid for v in made if v.perturbation.name == name for vid, oid in v.made.items()}
            for key in dims:
                if key not in p.expected:
                    continue
                pairs, left_out = [], 0
                for variant_id, original_id in variants.items():
                    a, b = index.get((judge, original_id, key)), index.get((judge, variant_id, key))
                    if a is None or b is None or a.status != VALID or b.status != VALID:
                        left_out += 1
                        continue
                    unit = card_units([a])[0]
                    pairs.append(card.Pair(judge, name, key, unit, float(a.score), float(b.score)))
                line = card.card_line(
                    judge, name, p.kind, key, p.expected[key], pairs, left_out, tolerance, n_resamples, seed
                )
                if not variants:  # nothing to pair: say why, not "no valid pair"
                    none = Estimate(None, n=0, note="the perturbation changed no dialogue")
                    line = dataclasses.replace(line, change=none, moved=none)
                lines.append(line)
    return lines


def checklist_lines(
    answers: Sequence[SafetyRecord], made: Sequence[Any], tolerance: float, n_resamples: int, seed: int
) -> list[card.Line]:
    """The checklist's rows of the card: judge x perturbation x question it has an expectation for.
    A dialogue is flagged on a question when one of its replies is; a dialogue with an invalid or
    failed answer to the question (on either side of the pair) is left out, counted."""
    replies: dict[tuple[str, str, str], list[SafetyRecord]] = {}
    for r in answers:
        dialogue = r.dialogue_id.rpartition("#")[0]
        replies.setdefault((r.judge, dialogue, r.dimension), []).append(r)

    def flagged(judge: str, dialogue: str, question: str) -> tuple[float, str] | None:
        found = replies.get((judge, dialogue, question))
        if not found or any(r.status != VALID for r in found):
            return None
        return float(any(r.score == FLAG for r in found)), found[0].language

    chosen: dict[str, Perturbation] = {v.perturbation.name: v.perturbation for v in made}
    lines = []
    for judge in sorted({r.judge for r in answers}):
        for name, p in chosen.items():
            variants = {vid: oid for v in made if v.perturbation.name == name for vid, oid in v.made.items()}
            for question, expected in p.flags.items():
                pairs, left_out = [], 0
                for variant_id, original_id in variants.items():
                    a, b = flagged(judge, original_id, question), flagged(judge, variant_id, question)
                    if a is None or b is None:
                        left_out += 1
                        continue
                    unit = ("card", a[1], int(original_id.rpartition("/")[2]))
                    pairs.append(card.Pair(judge, name, question, unit, a[0], b[0]))
                lines.append(
                    card.card_line(
                        judge, name, p.kind, question, expected, pairs, left_out, tolerance, n_resamples, seed
                    )
                )
    return lines


def _interval_words(table: Table, n_resamples: int) -> str:
    """What a card's note says of its intervals: resampled by what, or none asked for."""
    if not n_resamples:
        return "with no interval (stress.bootstrap=0: nothing resampled, so every verdict is *undecided*)"
    unit = resampled_units(e.unit for e in Report("stress", (table,)).estimates()) or "nothing (no interval)"
    return f"with a 95% bootstrap interval resampled by {unit}"


def checklist_blocks(lines: Sequence[card.Line], tolerance: float, n_resamples: int) -> list[result_.Block]:
    """The checklist's card: per question, how much more often a dialogue has a flagged reply."""
    table = card_table(
        lines,
        "Question",
        str,
        _points,
        FLAG_CHANGE,
        FLAG_MOVED,
        "stress_checklist_card.csv",
        "checklist card",
        card_chart(
            lines, "Question", tolerance,
            ("Change in the share of dialogues flagged, per perturbation and question",
             "各扰动下被标记对话比例的变化（按问题）"),
            ("variant minus original (share of dialogues)", "变体减原始（对话比例）"),
        ),
    )  # fmt: skip
    return [
        Heading("The safety checklist's card"),
        table,
        Text(
            "Change: whether the dialogue has a reply the question flags, the variant minus the original, "
            f"in percentage points of dialogues, {_interval_words(table, n_resamples)}. Moved as expected: "
            "the share of pairs flagged in the variant and not in the original (a degradation), or "
            "unchanged (a neutral change). A degradation expected to be flagged is *sensitive* when the "
            "interval lies above 0; a neutral change is *invariant* when it lies inside "
            f"±{100 * tolerance:g} points, *biased* when it excludes 0."
        ),
    ]


def card_chart(
    lines: Sequence[card.Line], what: str, tolerance: float, title: tuple[str, str], axis: tuple[str, str]
) -> Chart:
    """A card's picture: each perturbation's change with its interval (named by the judge too where
    several were asked), a panel per dimension (or question, `what`), 0 marked, and the band inside
    which a neutral change is invariant (±`tolerance`)."""
    several = len({line.judge for line in lines}) > 1
    return Chart(
        label=("Judge", "Perturbation") if several else ("Perturbation",), values=("Change",), panel=what,
        reference=0.0, band=(-tolerance, tolerance), title=title, axis=axis,
    )  # fmt: skip


def card_table(
    lines: Sequence[card.Line], what: str, name_of: Any, change_cell: Any, change: Any, moved: Any, csv: str,
    name: str, chart: Chart | None = None,
) -> Table:  # fmt: skip
    """One card as a table: a row per line; `what` heads the dimension's (or question's) column,
    `name_of` names it, `change_cell` shows the change, `change` and `moved` are the metrics of the
    change and of the share that moved as expected (a score down, a flag up); `chart`: its picture."""
    rows = [
        [line.judge, line.perturbation, line.kind, name_of(line.dimension), EXPECTED[line.expected],
         change_cell(line.change), _moved(line), line.verdict, line.change.n or 0, line.left_out]
        for line in lines
    ]  # fmt: skip
    return Table.of(
        ["Judge", "Perturbation", "Kind", what, "Expected", "Change", "Moved as expected", "Verdict", "pairs",
         "left out"],
        rows, csv=csv, name=name, metrics={"Change": change, "Moved as expected": moved}, chart=chart,
    )  # fmt: skip


def _paper_name(key: str) -> str:
    return dimension(key).paper_name


def _why(e: Estimate) -> str:
    """ " [no interval: one card]" or " [no interval: stress.bootstrap=0]" where the figure has none."""
    why = card.no_interval(e)
    return f" [no interval: {why}]" if why else ""


def _points(e: Estimate) -> result_.Cell:
    """A change of a share in percentage points, signed."""
    text = format_estimate(e, 1, scale=100, suffix=" pp")
    signed = text if text.startswith(("n/a", "-")) else "+" + text
    return result_.Cell(signed + _why(e), e)


def _change(e: Estimate) -> result_.Cell:
    text = format_estimate(e, 2)
    signed = text if text.startswith(("n/a", "-")) else "+" + text
    return result_.Cell(signed + _why(e), e)


def _moved(line: card.Line) -> result_.Cell:
    """The share moved as expected; at 0% or 100% with its exact interval by card (`share_figure`)."""
    e = line.moved
    if e.value is None:
        return result_.Cell("n/a", e)
    why = "stress.bootstrap=0" if e.note == card.NO_RESAMPLES else None
    return result_.Cell(*share_figure(e, e.n or 0, line.cards, "pair", 0, no_interval=why))


def one_answer(records: Sequence[ScoreRecord]) -> dict[str, list[tuple[str, float]]]:
    """Per judge, the dimensions on which every valid judgment of the run (originals and variants)
    has one score: (dimension key, that score). There a judge is blind to every degradation and
    "invariant" to every neutral change by construction, and the card says so beside its verdicts."""
    scores: dict[tuple[str, str], set[float]] = {}
    for r in records:
        if r.status == VALID and r.score is not None:
            scores.setdefault((r.judge, dimension(r.dimension).key), set()).add(float(r.score))
    found: dict[str, list[tuple[str, float]]] = {}
    for (judge, key), seen in sorted(scores.items()):
        if len(seen) == 1:
            found.setdefault(judge, []).append((key, seen.pop()))
    return found


def one_answer_text(found: dict[str, list[tuple[str, float]]]) -> str | None:
    if not found:
        return None
    parts = [
        f"{judge} gave one score on {', '.join(f'{dimension(k).paper_name} ({s:g})' for k, s in keys)}"
        for judge, keys in found.items()
    ]
    return (
        "One answer whatever the dialogue: " + "; ".join(parts) + ". On those dimensions the judge is blind "
        "to every degradation and invariant to every neutral change by construction: the verdicts there "
        "describe the judge's single answer, not what it notices."
    )


def report_blocks(
    lines: Sequence[card.Line], made: Sequence[Any], tolerance: float, n_resamples: int
) -> list[result_.Block]:
    """The card (one row per judge, perturbation and dimension), the verdicts side by side where
    several judges were asked, and what each perturbation changed."""
    judges = sorted({line.judge for line in lines})
    chart = card_chart(
        lines, "Dimension", tolerance,
        ("The judge's score change per perturbation and dimension", "各扰动下评委评分的变化（按维度）"),
        ("variant minus original (0-4 points)", "变体减原始（0-4 分）"),
    )  # fmt: skip
    table = card_table(
        lines, "Dimension", _paper_name, _change, CHANGE, MOVED, "stress_card.csv", "report card", chart
    )
    blocks: list[result_.Block] = [
        Heading("The judge's report card"),
        table,
        Text(
            f"Change: the variant's score minus the original's (0-4 points), the mean over the pairs both "
            f"judged validly, {_interval_words(table, n_resamples)}; pairs with an invalid or "
            "failed judgment on either side are counted (left out), never scored. Verdicts: a degradation is "
            "*sensitive* when the interval lies below 0, else *blind*; a neutral change is *invariant* when "
            f"the interval lies inside ±{tolerance:g}, *biased* when it excludes 0, else *undecided*; no "
            "interval (one card, or stress.bootstrap=0) is *undecided*. Expected directions are this repo's "
            "design (docs/stress.md)."
        ),
    ]
    if len(judges) > 1:
        verdicts: dict[tuple[str, str], dict[str, str]] = {}
        for line in lines:
            verdicts.setdefault((line.perturbation, line.dimension), {})[line.judge] = line.verdict
        blocks += [
            Heading("Verdicts side by side"),
            Table.of(
                ["Perturbation", "Dimension", *judges],
                [
                    [p, dimension(d).paper_name, *(v.get(j, "") for j in judges)]
                    for (p, d), v in verdicts.items()
                ],
                csv="stress_verdicts.csv",
                name="verdicts",
            ),
        ]
    blocks += [Heading("Perturbations"), perturbation_table(made)]
    return blocks


def perturbation_table(made: Sequence[Any]) -> Table:
    """Each perturbation: what it changes, what it should do, and how many dialogues it changed."""
    rows = []
    for name in dict.fromkeys(v.perturbation.name for v in made):
        mine = [v for v in made if v.perturbation.name == name]
        p = mine[0].perturbation
        lowers = [dimension(k).paper_name for k, d in p.expected.items() if d == LOWER]
        expected = "lowers " + ", ".join(lowers) if p.kind == DEGRADATION else "every dimension unchanged"
        rows.append([
            name, p.kind, p.changes, expected, ", ".join(p.languages), sum(len(v.made) for v in mine),
            sum(v.not_applicable for v in mine),
        ])  # fmt: skip
    return Table.of(
        ["Perturbation", "Kind", "Changes", "Expected", "Languages", "dialogues changed",
         "nothing to change"],
        rows, csv="stress_perturbations.csv", name="perturbations",
    )  # fmt: skip


def write_report(
    out: Path, records: Sequence[ScoreRecord], answers: Sequence[SafetyRecord], made: Sequence[Any],
    dims: Sequence[str], settings: Any, seed: int,
) -> dict[str, Any]:  # fmt: skip
    """stress.md, stress.result.json and the tables' CSVs; the card's lines and the markdown."""
    lines = card_lines(records, made, dims, settings.tolerance, settings.bootstrap, seed)
    blocks = report_blocks(lines, made, settings.tolerance, settings.bootstrap)
    said = one_answer_text(one_answer(records))
    if said:
        blocks.insert(3, Text(said))  # after the card and its note
    if answers:
        flag_lines = checklist_lines(answers, made, settings.flag_tolerance, settings.bootstrap, seed)
        # before the perturbations
        blocks[-2:-2] = checklist_blocks(flag_lines, settings.flag_tolerance, settings.bootstrap)
        lines = [*lines, *flag_lines]
    report = Report("stress", tuple(blocks))
    write_result(out, report)
    return {"lines": lines, "markdown": report.to_markdown()}
