"""The judge's report card: per judge, perturbation and dimension, how the scores moved.

For each (original, variant) pair a judge scored validly on a dimension, the paired change is the
variant's score minus the original's (0-4 points); for a safety checklist question (`stress.checklist`),
whether the dialogue has a flagged reply, variant minus original (-1, 0, 1). Per judge x perturbation x
dimension with an expectation (`Perturbation.expected`): the mean paired change with a 95% interval
resampling role cards (all a card's pairs together: the unit that is independent), the share of pairs
that moved as expected (a degradation: down, or a checklist flag up; a neutral change: not at all), and a
verdict read off the interval:

- degradation: *sensitive* when the interval lies below 0 (a flag: above 0), else *blind*;
- neutral change: *invariant* when the interval lies inside (-tolerance, +tolerance), *biased* when it
  excludes 0 (and is not inside the tolerance), else *undecided* (too wide to say);
- no interval (a single card, or `stress.bootstrap=0`): *undecided*; no valid pair: *n/a*.

A verdict's interval comes from at least 200 resamples (`stress.bootstrap`, checked with the config:
`esc.tasks.stress.task.MIN_RESAMPLES`): 1-3 resamples gave "intervals" that did not hold their own
estimate.

The verdicts are a screen for what a judge notices, not a proof it is right: a perturbation's expected
direction is this repo's design (docs/stress.md says why each), and a judge can be sensitive to a change
for the wrong reason (a length penalty lowers a padded reply's scores too).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from esc.reports.bootstrap import NO_INTERVAL, card_unit_name, ratio_interval
from esc.reports.estimate import Estimate
from esc.tasks.stress.perturbations import DEGRADATION, LOWER, RAISE

SENSITIVE, BLIND, INVARIANT, BIASED, UNDECIDED, NO_PAIR = (
    "sensitive", "blind", "invariant", "biased", "undecided", "n/a",
)  # fmt: skip
# why a figure with a value has no interval (its note): its pairs are on one card, or none was asked for
ONE_CARD, NO_RESAMPLES = "one card: nothing to resample", "no interval: stress.bootstrap=0"


def no_interval(e: Estimate) -> str | None:
    """Why the figure `e` has a value and no interval, in a cell's words ("one card",
    "stress.bootstrap=0"); None where it has an interval, or no value."""
    if e.value is None or e.low is not None:
        return None
    return {ONE_CARD: "one card", NO_RESAMPLES: "stress.bootstrap=0"}.get(e.note or "")


@dataclasses.dataclass(frozen=True)
class Pair:
    """One dialogue and its variant, scored by one judge on one dimension (both valid)."""

    judge: str
    perturbation: str
    dimension: str  # or a checklist question's key
    unit: tuple[Any, ...]  # the role card (`card_units`), the resampling unit
    original: float
    variant: float

    @property
    def change(self) -> float:
        return self.variant - self.original


@dataclasses.dataclass(frozen=True)
class Line:
    """One row of the report card."""

    judge: str
    perturbation: str
    kind: str
    dimension: str  # or a checklist question's key
    expected: int  # LOWER, RAISE (a flag) or STILL
    change: Estimate  # the mean paired change, 0-4 points
    moved: Estimate  # the share of pairs that moved as expected (0-1)
    verdict: str
    left_out: int  # pairs with an invalid or failed judgment on either side
    cards: int = 0  # the role cards of the valid pairs (the resampling unit)


def verdict(kind: str, change: Estimate, tolerance: float, expected: int = LOWER) -> str:
    """The verdict the interval of the mean change gives (see the module docstring); `expected`: a
    degradation's direction, LOWER (a score) or RAISE (a checklist flag)."""
    if change.value is None or change.n == 0:
        return NO_PAIR
    low, high = change.low, change.high
    if low is None or high is None or change.unstable:
        return UNDECIDED
    if kind == DEGRADATION:
        return SENSITIVE if (low > 0 if expected == RAISE else high < 0) else BLIND
    if -tolerance < low and high < tolerance:
        return INVARIANT
    return BIASED if high < 0 or low > 0 else UNDECIDED


def card_line(
    judge: str, perturbation: str, kind: str, dimension: str, expected: int, pairs: Sequence[Pair],
    left_out: int, tolerance: float, n_resamples: int, seed: int,
) -> Line:  # fmt: skip
    """The row of one judge x perturbation x dimension from its valid pairs."""
    units = [p.unit for p in pairs]
    unit = card_unit_name(units)
    if not pairs:
        none = Estimate(None, n=0, note="no pair with both judgments valid")
        return Line(judge, perturbation, kind, dimension, expected, none, none, NO_PAIR, left_out)
    changes = np.asarray([p.change for p in pairs], dtype=float)
    moved = (changes < 0) if expected == LOWER else (changes > 0) if expected == RAISE else (changes == 0)
    ones = [1.0] * len(pairs)
    cards = len(set(units))

    def figure(values: np.ndarray) -> Estimate:
        interval = (
            ratio_interval(units, values.tolist(), ones, n_resamples, seed) if n_resamples else NO_INTERVAL
        )
        low = None if math.isnan(interval.low) else interval.low
        high = None if math.isnan(interval.high) else interval.high
        undefined = None if math.isnan(interval.undefined) else interval.undefined
        note = None
        if low is None:  # why there is no interval: the data (one card), or the setting
            note = ONE_CARD if cards == 1 else NO_RESAMPLES if not n_resamples else None
        return Estimate(
            float(values.mean()), low, high, len(pairs), unit, undefined, note,
            left_out=(("pairs with an invalid or failed judgment", left_out),),
        )  # fmt: skip

    change = figure(changes)
    return Line(
        judge, perturbation, kind, dimension, expected, change, figure(moved.astype(float)),
        verdict(kind, change, tolerance, expected), left_out, cards,
    )  # fmt: skip
