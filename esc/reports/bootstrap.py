"""Percentile bootstrap intervals (scipy) that say where a statistic is undefined.

Resampling is by the unit that is independent: a role card (its dialogues with every target, every
run and every simulator are not independent of each other: `card_units` is the one rule), an
annotated dialogue (its dimensions share it), an input of an N inputs x M systems design.
`unit_intervals` resamples unit indices with `scipy.stats.bootstrap` and hands each resample to the
caller's statistic, which expands units to items.

A resample where a statistic is undefined (a correlation of a constant series, a kappa with no
spread) gives NaN. Those resamples are never dropped silently: every `Interval` carries the share
of undefined resamples, and above `MAX_UNDEFINED` the figure is reported as "n/a (undefined in k%
of resamples)" (`esc.reports.estimate.format_estimate`), and no view carries its value or interval
(`Estimate.shown`: the CSV, the JSON, the site and the charts ask it) -- an interval computed on
the rest would be conditioned on the few items that make the statistic defined, and could exclude 0
where the data say nothing (120 items all "4" but one: Spearman 0.156 [0.147, 0.304], the one
informative item absent from 37% of resamples).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from esc.reports.estimate import Estimate, all_equal, format_estimate, interval_text
from esc.reports.estimate import number_text as _number
from esc.reports.metric import Metric, checked_unit


def bootstrap_ci(
    values: Sequence[float], statistic: Any = np.mean, n_resamples: int = 1000, seed: int = 0
) -> tuple[float | None, float | None]:
    """Percentile 95% bootstrap interval of `statistic` over `values` (None with fewer than 2)."""
    from scipy.stats import bootstrap

    data = np.asarray(values, dtype=float)
    if len(data) < 2:
        return None, None
    if np.all(data == data[0]) and statistic is np.mean:
        return float(data[0]), float(data[0])
    result = bootstrap(
        (data,),
        statistic,
        n_resamples=n_resamples,
        confidence_level=0.95,
        method="percentile",
        random_state=np.random.default_rng(seed),
        vectorized=statistic is np.mean,
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


@dataclasses.dataclass(frozen=True)
class Interval:
    """A 95% percentile interval and the share of resamples where the statistic was undefined."""

    low: float
    high: float
    undefined: float  # 0..1; NaN when no resampling was done


NO_INTERVAL = Interval(math.nan, math.nan, math.nan)


def estimate(
    value: float | None, interval: Interval = NO_INTERVAL, n: int | None = None, unit: str | None = None,
    note: str | None = None, metric: Metric | None = None,
) -> Estimate:  # fmt: skip
    """The figure `value` with its `interval` (its ends None where there is none), the `n` items
    behind it and the `unit` the interval resampled; `metric`: what it measures (its unit then
    checked against the metric's, `esc.reports.metric.checked_unit`)."""
    if metric is not None:
        unit = checked_unit(metric, unit, f"a figure of {metric.name}")
    low, high = (
        (None, None)
        if math.isnan(interval.low) or math.isnan(interval.high)
        else (interval.low, interval.high)
    )
    return Estimate(
        value, low, high, n, unit, None if math.isnan(interval.undefined) else interval.undefined, note,
        metric=metric.name if metric is not None else None,
    )  # fmt: skip


def percentile_interval(distribution: np.ndarray, level: float = 0.95) -> Interval:
    """The percentile interval of a bootstrap distribution at `level` (0.95: its 2.5th and 97.5th
    percentiles) over its defined resamples, with the share of undefined (NaN) ones."""
    defined = distribution[~np.isnan(distribution)]
    undefined = 1.0 - len(defined) / len(distribution) if len(distribution) else math.nan
    if not len(defined):
        return Interval(math.nan, math.nan, undefined)
    tail = round(50 * (1 - level), 12)  # 2.5 for 0.95 exactly (100 * 0.05 / 2 is 2.4999999999999982)
    low, high = np.percentile(defined, [tail, 100 - tail])
    return Interval(float(low), float(high), float(undefined))


def unit_intervals(
    n_units: int, statistic: Callable[[np.ndarray], object], n_resamples: int, seed: int
) -> list[Interval]:
    """95% intervals of each value `statistic(unit_indices)` returns (a number or a 1-d array),
    units resampled with replacement; the statistic of all units is `statistic(np.arange(n_units))`."""
    width = np.atleast_1d(np.asarray(statistic(np.arange(n_units)), dtype=float)).shape[0]
    distributions = unit_distributions(n_units, statistic, n_resamples, seed)
    if distributions is None:
        return [NO_INTERVAL] * width
    return [percentile_interval(dist) for dist in distributions]


def unit_distributions(
    n_units: int, statistic: Callable[[np.ndarray], object], n_resamples: int, seed: int,
    vectorized: bool = False,
) -> np.ndarray | None:  # fmt: skip
    """The bootstrap distribution behind `unit_intervals` (the same resamples for the same seed):
    one row per value `statistic` returns, one column per resample (NaN where undefined); None
    where nothing is resampled (no resamples asked, fewer than 2 units). `vectorized`: `statistic`
    takes every resample at once (an array of unit indices, one resample per row: its values one
    per row, a column per resample), which scipy draws as it draws them one by one: the same
    distribution, without a Python call per resample (Table 2's paired differences: 182 bootstraps
    at 14 targets)."""
    if n_resamples <= 0 or n_units < 2:
        return None
    from scipy.stats import bootstrap

    def call(units: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(statistic(np.asarray(units, dtype=int)), dtype=float)

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on degenerate resamples (NaN: counted)
        result = bootstrap(
            (np.arange(n_units),),
            call if vectorized else (lambda units: call(units)),
            vectorized=vectorized,
            n_resamples=n_resamples,
            method="percentile",
            random_state=np.random.default_rng(seed),
        )
    return np.atleast_2d(np.asarray(result.bootstrap_distribution, dtype=float))


def unit_index(units: Sequence[object]) -> tuple[list[object], list[np.ndarray]]:
    """(the distinct units in first-seen order, for each the positions of its items)."""
    positions: dict[object, list[int]] = {}
    for i, unit in enumerate(units):
        positions.setdefault(unit, []).append(i)
    return list(positions), [np.asarray(p, dtype=int) for p in positions.values()]


def expand(members: Sequence[np.ndarray], units: np.ndarray) -> np.ndarray:
    """Item positions of a resample of units (each drawn unit contributes all its items)."""
    if not len(units):
        return np.asarray([], dtype=int)
    return np.concatenate([members[u] for u in units])


def ratio_interval(
    units: Sequence[object], numerators: Sequence[float], denominators: Sequence[float], n_resamples: int,
    seed: int,
) -> Interval:  # fmt: skip
    """The 95% interval of sum(numerators) / sum(denominators) (a rate, a share, a mean: denominators
    of 1), resampling the units with all their items; a resample whose denominators sum to 0 is
    undefined (counted in the Interval, never dropped)."""
    distinct, members = unit_index(list(units))
    num, den = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    num_by_unit = np.asarray([num[m].sum() for m in members])
    den_by_unit = np.asarray([den[m].sum() for m in members])

    def statistic(drawn: np.ndarray) -> float:
        total = den_by_unit[drawn].sum()
        return float(num_by_unit[drawn].sum() / total) if total else math.nan

    return unit_intervals(len(distinct), statistic, n_resamples, seed)[0]


def card_units(records: Iterable[Any]) -> list[tuple[Any, ...]]:
    """The resampling unit of each record (anything with `language`, `card_id`, `dialogue_id`): its
    role card, so that all dialogues of one card (targets, runs, role-players, simulators) are drawn
    together; a record without a card id is its own dialogue's unit."""
    return [
        ("card", r.language, r.card_id) if r.card_id is not None else ("dialogue", r.dialogue_id)
        for r in records
    ]


def card_unit_name(units: Iterable[tuple[Any, ...]]) -> str | None:
    """What `card_units` resampled, in words (an estimate's `unit`): "role card", "dialogue" (records
    without a card id), both, or None (no unit)."""
    kinds = {u[0] for u in units}
    if not kinds:
        return None
    if len(kinds) > 1:
        return "role card, else dialogue"
    return "role card" if kinds == {"card"} else "dialogue"


def exact_share_interval(hits: int, total: int) -> tuple[float, float]:
    """The exact (Clopper-Pearson) 95% interval of a share of `hits` in `total` (scipy)."""
    from scipy.stats import binomtest

    interval = binomtest(int(hits), int(total)).proportion_ci(confidence_level=0.95, method="exact")
    return float(interval.low), float(interval.high)


def share_figure(
    e: Estimate, total: float, cards: int, item: str, digits: int = 1, no_interval: str | None = None
) -> tuple[str, Estimate]:
    """A share (`e`, 0-1) as its cell shows it: the text and the figure behind it. The text is the
    share in percent and its one interval: "62.5% [50.0, 75.0]". At 0% or 100% every resample gives
    the same share (or, on one card, there is no resample to give), which says nothing about how sure
    it is: there the interval is the exact (Clopper-Pearson) 95% interval by card, the independent
    unit, each card at 0 or 1 ("0.0% [0.0, 36.9]\u2020": 0 flags in 24 replies on 8 cards; the figure
    `interval="exact"`, its `mark`), and the figure's note gives the exact interval by `item` too
    (0.0-14.2% by reply) and what the resamples gave. Without an interval, `no_interval` says why
    (default: "one card" on one card)."""
    if e.unstable or not e.defined:
        return format_estimate(e, digits, 100), e  # "n/a (undefined in k% ...)"
    e = _exact_at_boundary(e, total, cards, item)
    shown = f"{_number(float(e.value or 0.0), digits, 100)}%"
    if e.low is None or e.high is None or math.isnan(e.low) or math.isnan(e.high):
        why = no_interval or ("one card" if cards == 1 else None)
        return shown + (f" [no interval: {why}]" if why else ""), e
    return shown + interval_text(e.low, e.high, digits, 100, exact=e.interval == "exact"), e


def _exact_at_boundary(e: Estimate, total: float, cards: int, item: str) -> Estimate:
    """`e` with the exact 95% interval by card where it is a share at 0% or 100% whose resamples all
    agree or that has none; unchanged otherwise (and when it has its exact interval already)."""
    value, low, high = float(e.value or 0.0), e.low, e.high
    if e.interval == "exact" or value not in (0.0, 1.0) or cards < 1 or total < 1:
        return e
    resampled = low is not None and high is not None and not (math.isnan(low) or math.isnan(high))
    if low is not None and high is not None and resampled and not all_equal(low, high):
        return e
    n_items = round(total)
    by_card = exact_share_interval(round(value * cards), cards)
    by_item = exact_share_interval(round(value * n_items), n_items)

    def span(bounds: tuple[float, float]) -> str:
        return f"{_number(bounds[0], 1, 100)}-{_number(bounds[1], 1, 100)}%"

    unit = "card" if e.unit in (None, "role card") else e.unit  # what `cards` counts, as resampled
    said = e.why_not()  # the share of undefined resamples, or why there are none
    resamples = (
        f"every resample {_number(value, 1, 100)}%" + (f" ({said})" if said else "")
        if resampled
        else said or "no resamples"
    )
    note = (
        f"exact 95% interval: {span(by_card)} by {unit} ({cards}), {span(by_item)} by {item} ({n_items}); "
        f"by resampling: {resamples}"
    )
    return dataclasses.replace(e, low=by_card[0], high=by_card[1], interval="exact", note=note)


def mean_interval(values: np.ndarray, n_resamples: int, seed: int) -> tuple[float, float]:
    """`bootstrap_ci` of the mean, NaN (not None) without enough values or resamples."""

    if n_resamples <= 0:
        return (math.nan, math.nan)
    low, high = bootstrap_ci(values, n_resamples=n_resamples, seed=seed)
    return (math.nan, math.nan) if low is None or high is None else (low, high)
