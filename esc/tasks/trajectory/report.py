"""The trajectory report (`rank.py mode=trajectory`): how the seekers felt, per target.

Per (role-player, target): the mean start, final, change and area (`esc.dialogues.trajectory`) with
95% bootstrap intervals resampling role cards (one dialogue per card and language), how many
dialogues each figure is undefined for (an invalid start or final rating) and why dialogues ended
(adaptive stopping). Targets played by the same role-player on the same cards are compared pairwise:
the mean per-card difference with its interval, on the cards where both are defined. The chart
draws each target's mean trajectory by exchange, with the number of dialogues behind each point
(dialogues stopped early leave the later points); the report's tables give the same curves and every
dialogue's figures (trajectory.csv), all written by `esc.reports.result.write_result`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from esc.dialogues.record import Dialogue
from esc.dialogues.trajectory import TrajectoryFigures, trajectory_figures
from esc.errors import UserError
from esc.reports.bootstrap import bootstrap_ci
from esc.reports.chart_spec import Chart
from esc.reports.charts import pyplot, save_png
from esc.reports.estimate import Estimate, format_estimate, number_text
from esc.reports.result import Block, Cell, Report, Table, Text, write_result
from esc.tasks.trajectory import metrics as trajectory_metrics

METRICS = ("start", "final", "change", "area")
UNIT = "role card"  # what the intervals resample: one dialogue per card and language (`rated_dialogues`)
# per (role-player, target): (exchange, mean, dialogues, low, high), `mean_curves`
Curves = dict[tuple[str, str], list[tuple[int, float, int, float | None, float | None]]]


@dataclasses.dataclass(frozen=True)
class Rated:
    """One dialogue's figures with what identifies it, and how it was rated (`meta.trajectory`)."""

    roleplayer: str
    target: str
    language: str
    card_id: int
    figures: TrajectoryFigures
    rating: str = ""  # meta.trajectory as canonical JSON: rater, method, prompt version, stop rule
    source: str = ""  # the dialogue file

    @property
    def unit(self) -> tuple[int, str]:
        return (self.card_id, self.language)


@dataclasses.dataclass(frozen=True)
class Mean:
    """The mean over the dialogues where a figure is defined (n: those dialogues, one per role card),
    and how many dialogues it is not defined for (an invalid start or final rating)."""

    estimate: Estimate
    undefined: int


@dataclasses.dataclass(frozen=True)
class TargetRow:
    roleplayer: str
    target: str
    dialogues: int
    ratings: int
    invalid: int  # the missing ones included
    missing: int
    means: dict[str, Mean]
    stops: dict[str, int]  # stop reason -> dialogues


@dataclasses.dataclass(frozen=True)
class Difference:
    """Target `a` minus target `b` on one metric, per shared card."""

    roleplayer: str
    a: str
    b: str
    metric: str
    mean: Mean
    a_higher: int  # cards where a's figure is higher
    b_higher: int
    shared: int  # cards both played


def rated_dialogues(dialogues: Iterable[tuple[Dialogue, str]]) -> tuple[list[Rated], int]:
    """The complete dialogues that carry ratings, with their figures, from (dialogue, file) pairs;
    and how many complete dialogues carry none (left out, and said so). A UserError, before any
    figure, when one (role-player, target) mixes ratings made another way (another rater, method,
    prompt version or stop rule: their values are not comparable) or holds a card twice."""
    rated, unrated = [], 0
    for d, source in dialogues:
        if d.status != "complete":
            continue
        if not d.trajectory():
            unrated += 1
            continue
        how = json.dumps(d.meta.get("trajectory"), sort_keys=True, ensure_ascii=False)
        rated.append(Rated(d.roleplayer, d.target, d.language, d.card_id, trajectory_figures(d), how, source))
    _check_comparable(rated)
    return rated, unrated


def _check_comparable(rated: Sequence[Rated]) -> None:
    seen: dict[tuple[str, str], Rated] = {}
    cards: dict[tuple[str, str, int, str], str] = {}
    for r in rated:
        first = seen.setdefault((r.roleplayer, r.target), r)
        if first.rating != r.rating:
            raise UserError(
                f"{first.source} and {r.source}: {r.roleplayer} x {r.target} dialogues were rated "
                f"differently ({first.rating} vs {r.rating}); their values do not compare: report them in "
                "separate calls"
            )
        key = (r.roleplayer, r.target, r.language, r.card_id)
        if key in cards:
            raise UserError(
                f"{cards[key]} and {r.source}: card {r.card_id} ({r.language}) of {r.roleplayer} x "
                f"{r.target} twice; a card is the unit the intervals resample: report the runs in "
                "separate calls"
            )
        cards[key] = r.source


def _mean(values: Sequence[float | None], n_resamples: int, seed: int) -> Mean:
    """The mean of the defined `values` (one per role card) with its interval, cards resampled."""
    defined = [v for v in values if v is not None]
    if not defined:
        return Mean(Estimate(None, n=0, unit=UNIT), len(values))
    low, high = bootstrap_ci(defined, n_resamples=n_resamples, seed=seed) if n_resamples > 0 else (None, None)
    estimate = Estimate(float(np.mean(defined)), low, high, len(defined), UNIT)
    return Mean(estimate, len(values) - len(defined))


def _groups(rated: Sequence[Rated]) -> dict[tuple[str, str], list[Rated]]:
    groups: dict[tuple[str, str], list[Rated]] = {}
    for r in rated:
        groups.setdefault((r.roleplayer, r.target), []).append(r)
    return groups


def target_rows(rated: Sequence[Rated], n_resamples: int = 1000, seed: int = 0) -> list[TargetRow]:
    rows = []
    for (roleplayer, target), members in sorted(_groups(rated).items()):
        means = {m: _mean([getattr(r.figures, m) for r in members], n_resamples, seed) for m in METRICS}
        stops = Counter(r.figures.stop_reason for r in members if r.figures.stop_reason)
        rows.append(
            TargetRow(
                roleplayer,
                target,
                len(members),
                sum(r.figures.rated for r in members),
                sum(r.figures.invalid for r in members),
                sum(r.figures.missing for r in members),
                means,
                dict(sorted(stops.items())),
            )
        )
    return rows


def differences(
    rated: Sequence[Rated], metrics: Sequence[str] = ("change", "final", "area"), n_resamples: int = 1000,
    seed: int = 0,
) -> list[Difference]:  # fmt: skip
    """Every pair of targets of one role-player, on the cards both played: a paired difference."""
    groups = _groups(rated)
    out = []
    for (rp_a, a), (rp_b, b) in itertools.combinations(sorted(groups), 2):
        if rp_a != rp_b:
            continue
        by_a = {r.unit: r.figures for r in groups[(rp_a, a)]}
        by_b = {r.unit: r.figures for r in groups[(rp_b, b)]}
        shared = sorted(by_a.keys() & by_b.keys())
        if not shared:
            continue
        for metric in metrics:
            pairs = [(getattr(by_a[u], metric), getattr(by_b[u], metric)) for u in shared]
            diffs = [None if x is None or y is None else x - y for x, y in pairs]
            out.append(
                Difference(
                    rp_a,
                    a,
                    b,
                    metric,
                    _mean(diffs, n_resamples, seed),
                    sum(d is not None and d > 0 for d in diffs),
                    sum(d is not None and d < 0 for d in diffs),
                    len(shared),
                )  # fmt: skip
            )
    return out


def mean_curves(rated: Sequence[Rated], n_resamples: int = 1000, seed: int = 0) -> Curves:
    """Per (role-player, target): (exchange, mean value, dialogues, low, high) of the valid ratings,
    the interval resampling the cards rated at that exchange."""
    curves = {}
    for key, members in sorted(_groups(rated).items()):
        by_exchange: dict[int, list[float]] = {}
        for r in members:
            for exchange, value in r.figures.points:
                by_exchange.setdefault(exchange, []).append(value)
        curves[key] = [
            (x, float(np.mean(v)), len(v), *bootstrap_ci(v, n_resamples=n_resamples, seed=seed))
            if n_resamples > 0
            else (x, float(np.mean(v)), len(v), None, None)
            for x, v in sorted(by_exchange.items())
        ]
    return curves


def _cell(mean: Mean) -> Cell:
    """ "49.3 [49.1, 49.6] (n=2, 1 undefined)", read by the rules every report follows
    (`format_estimate`): equal ends are marked, "[30.0, 30.0]*", and a figure without an interval
    says why ("[no interval: one card]")."""
    e = mean.estimate
    if e.value is None:
        text = f"n/a (0 of {mean.undefined})" if mean.undefined else "n/a"
        return Cell(text, dataclasses.replace(e, note="no dialogue with this figure defined"))
    low, high = e.low, e.high
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        low = high = None
    e = dataclasses.replace(e, low=low, high=high)
    why = _no_interval(e.n)
    text = format_estimate(e, 1) + (f" [no interval: {why}]" if low is None else "")
    text += f" (n={e.n}" + (f", {mean.undefined} undefined)" if mean.undefined else ")")
    notes = [
        *([f"{mean.undefined} dialogues undefined"] if mean.undefined else []),
        *([why] if low is None else []),
    ]
    return Cell(text, dataclasses.replace(e, note="; ".join(notes) or None))


def _no_interval(n: int | None) -> str:
    """Why a figure of `n` role cards has no interval."""
    return "one card" if n == 1 else "no resamples (bootstrap=0)"


def _point(mean: float, n: int, low: float | None, high: float | None) -> Cell:
    """A curve's point: "49.3 [40.1, 58.0] (n=12)", n the dialogues rated at that exchange (one per
    role card), by the same rules as `_cell`."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        low = high = None
    e = Estimate(mean, low, high, n, UNIT, note=None if low is not None else _no_interval(n))
    why = f" [no interval: {e.note}]" if low is None else ""
    return Cell(f"{format_estimate(e, 1)}{why} (n={n})", e)


def _value(x: float | None) -> Cell:
    """One dialogue's figure: 1 decimal shown, the value kept (n/a: an invalid start or final rating)."""
    if x is None:
        return Cell("n/a", Estimate(None, n=0, unit="dialogue", note="invalid start or final rating"))
    return Cell(number_text(x, 1), Estimate(x, n=1, unit="dialogue"))


def dialogue_table(rated: Sequence[Rated]) -> Table:
    """One row per dialogue: its figures and its trajectory (exchange:value;...): trajectory.csv."""
    return Table.of(
        ["role-player", "target", "language", "card", *METRICS, "ratings", "invalid", "missing", "ended by",
         "trajectory"],
        [
            [r.roleplayer, r.target, r.language, r.card_id, *(_value(getattr(r.figures, m)) for m in METRICS),
             r.figures.rated, r.figures.invalid, r.figures.missing, r.figures.stop_reason or "",
             ";".join(f"{x}:{v:.2f}" for x, v in r.figures.points)]
            for r in rated
        ],
        csv="trajectory.csv",
        name="dialogues",
    )  # fmt: skip


def _named(groups: Iterable[Any]) -> tuple[str, ...]:
    """The columns that name a chart's target: its name, and the role-player's where there are several
    (`groups`: target rows, or (role-player, target) keys)."""
    roleplayers = {g.roleplayer if isinstance(g, TargetRow) else g[0] for g in groups}
    return ("role-player", "target") if len(roleplayers) > 1 else ("target",)


def trajectory_report(
    rows: Sequence[TargetRow], diffs: Sequence[Difference], unrated: int = 0, curves: Curves | None = None,
    rated: Sequence[Rated] = (),
) -> Report:  # fmt: skip
    """trajectory.md as a typed result: per target, then paired differences, what was left out, the
    mean curves (the chart's points) and every dialogue."""
    targets = Table.of(
        [
            "role-player",
            "target",
            "dialogues",
            "start",
            "final",
            "change",
            "area",
            "invalid ratings",
            "ended by",
        ],
        [
            [
                row.roleplayer,
                row.target,
                row.dialogues,
                *(_cell(row.means[m]) for m in METRICS),
                f"{row.invalid} of {row.ratings}" + (f" ({row.missing} missing)" if row.missing else ""),
                ", ".join(f"{k} {v}" for k, v in row.stops.items()) or "-",
            ]
            for row in rows
        ],
        metrics={m: trajectory_metrics.BY_NAME[m] for m in METRICS},
        rank_within=["role-player"],
        csv="trajectory_targets.csv",
        name="targets",
        chart=Chart(
            label=_named(rows), values=("change",), reference=0.0,
            title=("Change of the seeker's emotion, first rating to last", "求助者情绪的变化（首次到末次）"),
            axis=("final minus start (points of 0-100)", "末次减首次（0-100 分制）"),
        ),
    )  # fmt: skip
    blocks: list[Block] = [
        Text(
            "Seeker emotion 0-100 (0: at their worst, 100: much better); mean [95% bootstrap interval "
            f"resampled by {targets.resampled() or 'nothing'}] (n dialogues)."
        ),
        targets,
    ]
    if diffs:
        paired = Table.of(
            ["role-player", "A", "B", "figure", "A - B", "A higher", "B higher", "cards"],
            [
                [d.roleplayer, d.a, d.b, d.metric, _cell(d.mean), d.a_higher, d.b_higher, d.shared]
                for d in diffs
            ],
            metrics={"A - B": trajectory_metrics.DIFFERENCE},
            csv="trajectory_differences.csv",
            name="paired differences",
        )
        blocks += [
            Text(
                "Paired differences (A - B) on the cards both targets played; mean [95% bootstrap interval "
                f"resampled by {paired.resampled() or 'nothing'}]."
            ),
            paired,
        ]
    if unrated:
        blocks.append(
            Text(
                f"Left out: {unrated} complete dialogues without ratings (played without trajectory.enabled)."
            )
        )
    if curves:
        by_exchange = Table.of(
            ["role-player", "target", "exchange", "mean emotion"],
            [
                [rp, t, x, _point(mean, n, low, high)]
                for (rp, t), points in curves.items()
                for x, mean, n, low, high in points
            ],
            csv="trajectory_curves.csv",
            name="curves",
            chart=Chart(
                kind="lines", label=_named(curves), x="exchange", values=("mean emotion",),
                limits=(0.0, 100.0),
                title=("Mean emotion by exchange", "每轮对话后的平均情绪"),
                axis=("seeker emotion (0-100)", "求助者情绪（0-100）"),
            ),
        )  # fmt: skip
        blocks += [
            Text(
                "Mean emotion by exchange (the chart's points; 0: before the first reply), over the "
                "dialogues with a valid rating there [95% bootstrap interval resampled by "
                f"{by_exchange.resampled() or 'nothing'}] (n dialogues)."
            ),
            by_exchange,
        ]
    if rated:
        blocks += [
            Text("Every rated dialogue: its figures, its ratings (exchange:value) and why it ended."),
            dialogue_table(rated),
        ]
    return Report("trajectory", tuple(blocks))


def write_chart(curves: Mapping[tuple[str, str], Sequence[tuple]], path: Path) -> Path | None:
    """The mean trajectory of each target (`mean_curves`), one line each, its 95% interval as a
    band, and the dialogues behind each point."""
    if not curves:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (roleplayer, target), points in curves.items():
        xs, ys, ns, lows, highs = zip(*points, strict=True)
        label = target if len({rp for rp, _ in curves}) == 1 else f"{target} ({roleplayer})"
        (line,) = ax.plot(xs, ys, marker="o", label=label)
        if all(v is not None for v in (*lows, *highs)):
            ax.fill_between(xs, lows, highs, color=line.get_color(), alpha=0.15)
        for x, y, n, _, _ in points:
            ax.annotate(str(n), (x, y), textcoords="offset points", xytext=(0, 6), fontsize=7, ha="center")
    ax.set_xlabel("exchange (0: before the first reply)")
    ax.set_ylabel("seeker emotion (0-100)")
    ax.set_ylim(0, 100)
    ax.set_title("Mean emotion trajectory, 95% intervals (numbers: dialogues per point)")
    ax.legend(fontsize=8)
    return save_png(fig, path)


def write_report(
    out: Path, rated: Sequence[Rated], n_resamples: int, seed: int, charts: bool = True, unrated: int = 0
) -> dict[str, Any]:
    """trajectory.md, trajectory.result.json and each table's CSV (trajectory.csv: per dialogue;
    `esc.reports.result.write_result`), and charts/trajectory.png."""
    rows = target_rows(rated, n_resamples, seed)
    diffs = differences(rated, n_resamples=n_resamples, seed=seed)
    curves = mean_curves(rated, n_resamples, seed)
    markdown = write_result(out, trajectory_report(rows, diffs, unrated, curves, rated))
    chart = write_chart(curves, out / "charts" / "trajectory.png") if charts else None
    return {"markdown": markdown, "rows": rows, "differences": diffs, "chart": str(chart) if chart else None}
