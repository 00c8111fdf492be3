"""Which of two systems is better: the paired difference over the units both have (issue 64).

Two chatbots played the same role cards, so their scores are paired by card: the question "is A
better than B?" is answered by the difference A - B card by card, averaged over the cards both
played, with a bootstrap that resamples cards (every resample draws a card's value for A and for B
together), never by two separate intervals that happen to touch. Knows no task: a report hands in
each system's values per unit (a card may hold several dialogues: their mean is the card's value).

- `paired_differences`: per measure (a dimension, the Average), A - B over the units where both have
  a valid value, its percentile interval (one bootstrap by unit for every measure with the same
  units, `esc.reports.bootstrap.unit_distributions`, the run's seed), n (units paired), what was left
  out (units one side lacks, or where one side has no valid value), and the share of resamples
  where A is ahead (the difference above 0).
- Several pairs compared at once (m pairs in one group: k systems give k(k-1)/2): each interval is at
  1 - 0.05/m (Bonferroni, `family_level`), so that all m hold together with at least 95%
  probability; two systems give m = 1, the plain 95%.
- `tied_ranks`: a system's rank is 1 + the number of systems shown ahead of it (a paired interval
  entirely on their side of 0): systems that cannot be told apart share a rank.
- `marked_best`: the best figure of a comparable group is emphasised only where its paired interval
  against every other system of the group (the runner-up first) excludes 0; `separated_best` is the
  stand-in where no paired interval exists: the best figure's own interval does not overlap any
  other's (conservative: two overlapping intervals can still differ, paired).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from esc.reports.bootstrap import NO_INTERVAL, estimate, percentile_interval, unit_distributions
from esc.reports.estimate import Estimate

ALPHA = 0.05  # 95% for one pair; a family of m pairs: each at 1 - ALPHA / m
ONE_SIDE = "one side only"  # a unit only one system has (left out, counted)
NO_VALUE = "no valid value"  # a unit both have, one of them without a valid value there
K = TypeVar("K", bound=Hashable)


def family_level(pairs: int, alpha: float = ALPHA) -> float:
    """The level of each of `pairs` intervals so that all hold together at 1 - `alpha` (Bonferroni)."""
    return 1.0 - alpha / max(1, pairs)


@dataclasses.dataclass(frozen=True)
class Difference:
    """A's figure minus B's over the units both have: `estimate` (value, the interval at `level`, n the
    units paired, the unit resampled, `left_out` by reason), `ahead` the share of the defined resamples
    where A - B > 0 (None: nothing resampled)."""

    estimate: Estimate
    ahead: float | None
    level: float = 1 - ALPHA

    @property
    def sign(self) -> int:
        """+1 where the interval lies above 0 (A ahead), -1 below (B ahead), 0 where they cannot be
        told apart (the interval holds 0, or there is none: n/a, unstable, one unit, no resamples)."""
        _, low, high = self.estimate.shown()
        if low is None or high is None:
            return 0
        return 1 if low > 0 else -1 if high < 0 else 0

    @property
    def has_interval(self) -> bool:
        return self.estimate.shown()[1] is not None


def difference_from(
    value: float | None, distribution: np.ndarray | None, n: int, unit: str | None, level: float = 1 - ALPHA,
    left_out: Sequence[tuple[str, int]] = (), note: str | None = None,
) -> Difference:  # fmt: skip
    """A `Difference` from its value and bootstrap distribution (None: no resampling): the
    percentile interval at `level` and the share of defined resamples above 0."""
    interval, ahead = NO_INTERVAL, None
    if distribution is not None and value is not None:
        interval = percentile_interval(distribution, level)
        defined = distribution[~np.isnan(distribution)]
        ahead = float(np.mean(defined > 0)) if len(defined) else None
    e = estimate(value, interval, n, unit, note)
    return Difference(dataclasses.replace(e, left_out=tuple(left_out)), ahead, level)


def unit_means(values: Mapping[Hashable, Sequence[float]]) -> dict[Hashable, float]:
    """Each unit's mean of its finite values (NaN where it has none): a card's value."""
    out = {}
    for unit, xs in values.items():
        finite = [float(x) for x in xs if x is not None and math.isfinite(float(x))]
        out[unit] = float(np.mean(finite)) if finite else math.nan
    return out


def paired_differences(
    a: Mapping[str, Mapping[Hashable, Sequence[float]]], b: Mapping[str, Mapping[Hashable, Sequence[float]]],
    n_resamples: int, seed: int, level: float = 1 - ALPHA, unit: str | None = "role card", scale: float = 1.0,
) -> dict[str, Difference]:  # fmt: skip
    """Per measure of `a` (measure -> unit -> that unit's values; the same shape for `b`): the mean over
    the units where both have a valid value of (A's unit mean - B's), times `scale`, with its interval at
    `level` resampling those units (the measures that pair the same units share one bootstrap: the same
    resamples), n the units paired, and left out by reason: `ONE_SIDE` (a unit one side lacks),
    `NO_VALUE` (a unit both have, one without a valid value there)."""
    paired: dict[str, tuple[list[Hashable], np.ndarray, tuple[tuple[str, int], ...]]] = {}
    for measure in a:
        mine, theirs = unit_means(a[measure]), unit_means(b.get(measure, {}))
        both = [u for u in mine if u in theirs]
        units = [u for u in both if not (math.isnan(mine[u]) or math.isnan(theirs[u]))]
        one_side = len(set(mine) ^ set(theirs))
        left = tuple((k, v) for k, v in ((ONE_SIDE, one_side), (NO_VALUE, len(both) - len(units))) if v)
        diffs = np.asarray([mine[u] - theirs[u] for u in units], dtype=float) * scale
        paired[measure] = (units, diffs, left)
    by_units: dict[tuple[Hashable, ...], list[str]] = {}
    for measure, (units, _, _) in paired.items():
        by_units.setdefault(tuple(units), []).append(measure)
    out: dict[str, Difference] = {}
    for units, measures in by_units.items():
        table = np.column_stack([paired[m][1] for m in measures]) if units else np.empty((0, len(measures)))
        dist = unit_distributions(  # every resample at once: drawn is (resamples, units) or (units,)
            len(units),
            lambda drawn, table=table: table[drawn].mean(axis=-2).T,
            n_resamples,
            seed,
            vectorized=True,
        )
        for j, m in enumerate(measures):
            n = len(units)
            value = float(table[:, j].mean()) if n else None
            name = unit or "unit"
            note = f"no {name} where both have a value" if not n else f"one {name}: nothing to resample"
            note = note if n < 2 else None
            row = None if dist is None else dist[j]
            out[m] = difference_from(value, row, n, unit, level, paired[m][2], note)
    return {m: out[m] for m in a}


def paired_difference(
    a: Mapping[Hashable, Sequence[float]], b: Mapping[Hashable, Sequence[float]], n_resamples: int, seed: int,
    level: float = 1 - ALPHA, unit: str | None = "role card", scale: float = 1.0,
) -> Difference:  # fmt: skip
    """`paired_differences` of one measure: unit -> values of A, of B."""
    return paired_differences({"x": a}, {"x": b}, n_resamples, seed, level, unit, scale)["x"]


def _ahead(x: str, y: str, differences: Mapping[tuple[str, str], Difference], higher: bool) -> bool:
    """Whether `x` is shown better than `y`: their paired interval lies on x's side of 0."""
    d = differences.get((x, y))
    sign = d.sign if d is not None else -differences[(y, x)].sign if (y, x) in differences else 0
    return sign == (1 if higher else -1)


def tied_ranks(
    values: Mapping[str, float | None], differences: Mapping[tuple[str, str], Difference],
    higher_is_better: bool = True,
) -> dict[str, int | None]:  # fmt: skip
    """Each system's rank: 1 + the number of systems shown better than it (`differences[(x, y)]`: x - y,
    either order given; an interval entirely on the better side of 0), so that systems that cannot be
    told apart share a rank; None for a system without a value. Where no pair has an interval (nothing
    was resampled), 1 + the number of systems with a better value: equal values share a rank."""
    present = {s: float(v) for s, v in values.items() if v is not None and math.isfinite(v)}
    if not any(d.has_interval for d in differences.values()):
        ranks = value_ranks(present, higher_is_better)
    else:
        ranks = {s: 1 + sum(_ahead(o, s, differences, higher_is_better) for o in present if o != s)
                 for s in present}  # fmt: skip
    return {s: ranks.get(s) for s in values}


def value_ranks(values: Mapping[str, float], higher_is_better: bool = True) -> dict[str, int]:
    """1 + the number of systems with a strictly better value: equal values share a rank (1, 1, 3)."""
    sign = 1 if higher_is_better else -1
    return {s: 1 + sum(sign * (w - v) > 0 for w in values.values()) for s, v in values.items()}


def marked_best(
    values: Mapping[str, float | None], differences: Mapping[tuple[str, str], Difference],
    higher_is_better: bool = True,
) -> str | None:  # fmt: skip
    """The system holding the group's best value, where its paired interval against every other system
    with a value (the runner-up first) excludes 0 on its side; None where it does not, where two share
    the best value, or where fewer than two systems have a value."""
    present = {s: float(v) for s, v in values.items() if v is not None and math.isfinite(v)}
    if len(present) < 2:
        return None
    order = sorted(present, key=lambda s: present[s], reverse=higher_is_better)
    best = order[0]
    if present[order[1]] == present[best]:
        return None
    return best if all(_ahead(best, o, differences, higher_is_better) for o in order[1:]) else None


def separated_best(estimates: Mapping[K, Estimate], higher_is_better: bool) -> K | None:
    """Where no paired interval exists: the key of the best shown value whose own interval does not
    overlap the interval of any other shown figure of the group; None where it does, where a figure
    lacks an interval, where two share the best value, or with fewer than two figures."""
    shown = {k: e.shown() for k, e in estimates.items() if e.shown()[0] is not None}
    if len(shown) < 2:
        return None
    order = sorted(shown, key=lambda k: float(shown[k][0] or 0.0), reverse=higher_is_better)
    best = order[0]
    if shown[order[1]][0] == shown[best][0] or any(shown[k][1] is None for k in order):
        return None
    _, low, high = shown[best]
    for other in order[1:]:
        _, o_low, o_high = shown[other]
        if (low <= o_high) if higher_is_better else (high >= o_low):  # type: ignore[operator]
            return None
    return best
