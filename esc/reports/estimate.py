"""One figure a run publishes: a value with its 95% interval, the n behind it and the unit resampled.

Every report states its numbers as `Estimate`s, and `format_estimate` is the one way they read as
text ("62.5 [50.0, 75.0]", "n/a (undefined in 12.0% of resamples)"); `Estimate.shown` is the one way
they read as numbers (none for a figure the text calls n/a), which every other view asks (the CSV,
the result and run log JSON, the site's data attributes, the charts). An estimate placed in a report
table also says where (`table`, `keys`: the row and column it fills), which is what the run log's
`results` hold (`esc.reports.runlog`): a program reads the figures from there, never from the text.

Why one type: the same figure was written six ways (per-report cell classes), and their labels drifted
from what the numbers computed (an interval "by dialogue" that resampled role cards). Here the unit
resampled travels with the figure, so the label is read from the number it describes.

A cell holds one figure and its interval; how the interval was made is said once per table, not in
every cell. Two intervals need a word a reader would otherwise miss, and carry a mark (`Estimate.mark`)
that the table explains once under itself (`mark_notes`, the lines `esc.reports.result.footnotes`
gives every view): `SAME`, every resample gave the same value ("25.00 [25.0, 25.0]*": the resamples
agree, which is not certainty), and `EXACT`, a share at 0% or 100% whose interval is the exact
(Clopper-Pearson) one by card ("0% [0, 71]†", `esc.reports.bootstrap.share_figure`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import AllowInfNan, BeforeValidator, Strict, TypeAdapter, ValidationError

from esc.runinfo import record_problem


def _pairs(value: Any) -> tuple[tuple[Any, Any], ...]:
    """A JSON object (null: an empty one) as the (key, value) pairs a frozen record keeps of it."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise ValueError(f"expected an object, got {value!r}")
    return tuple(value.items())


# The types a record of these files is read back as (`TypeAdapter(...).validate_python`): strict
# where JSON has the type itself.
Text = Annotated[str, Strict()]  # a JSON string, never a number made one
Number = Annotated[float, Strict(), AllowInfNan(False)]  # a JSON number, never true, "3", NaN or Infinity
Integer = Annotated[int, Strict()]  # never true or 2.0
#: (label, value) pairs, read back from a JSON object (a figure's place, a judgment's detail)
Pairs = Annotated[tuple[tuple[str, str], ...], BeforeValidator(_pairs)]
Counts = Annotated[tuple[tuple[str, Integer], ...], BeforeValidator(_pairs)]

#: above this share of undefined resamples a figure is shown as n/a: its interval would describe
#: only the resamples where it happens to be defined
MAX_UNDEFINED = 0.05

#: the marks an interval carries in a cell, each explained once under its table (`mark_notes`)
SAME = "*"  # every resample gave the same value
EXACT = "\u2020"  # dagger: the exact (Clopper-Pearson) 95% interval by card of a share at 0% or 100%


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A value, its 95% interval (None: none computed), n (the items behind it) and `unit`, the
    independent unit the interval resampled ("role card", "dialogue", ...). `undefined`: the share
    of resamples where the statistic was undefined (None: no resampling). `note`: why the figure is
    n/a or what its n counts. `table` and `keys` place it in a report (empty until placed);
    `metric`: the name of what it measures (`esc.reports.metric`), where its table column names one.
    `left_out`: what the figure did not count, by reason ((("invalid", 3), ("failed", 1))): a count
    beside a figure is read from the figure, not counted a second time by whoever prints it.
    `interval`: how `low` and `high` were made: "bootstrap" (percentile, resampling `unit`), or
    "exact" (Clopper-Pearson, by `unit`, for a share at 0% or 100%: `bootstrap.share_figure`)."""

    value: Number | None = None  # None: no value (`to_json` leaves out the value of an n/a figure)
    low: Number | None = None
    high: Number | None = None
    n: Integer | None = None
    unit: Text | None = None
    undefined: Number | None = None
    note: Text | None = None
    table: Text = ""
    keys: Pairs = ()
    metric: Text | None = None
    left_out: Counts = ()
    interval: Literal["bootstrap", "exact"] = "bootstrap"

    def left(self, reason: str) -> int:
        """How many items the figure left out for `reason` (0: none, or none counted)."""
        return dict(self.left_out).get(reason, 0)

    def at(self, table: str, keys: Mapping[str, Any]) -> Estimate:
        """This figure placed in `table` at the cell `keys` names (row labels and the column)."""
        return dataclasses.replace(self, table=table, keys=tuple((str(k), str(v)) for k, v in keys.items()))

    @property
    def defined(self) -> bool:
        return self.value is not None and math.isfinite(self.value)

    @property
    def unstable(self) -> bool:
        """Undefined in more than `MAX_UNDEFINED` of its resamples: shown as n/a."""
        return self.undefined is not None and math.isfinite(self.undefined) and self.undefined > MAX_UNDEFINED

    def shown(self) -> tuple[float | None, float | None, float | None]:
        """(value, low, high) as every view publishes them, the text's `format_estimate` and the
        numbers alike: all three None where the figure reads n/a, undefined or `unstable` (an interval
        of the resamples where it happens to be defined describes those, not the data), so that no
        figure is n/a in one view and a number in another. The CSV, the result and run log JSON, the
        site's data attributes and the charts read the figure through this, never its fields."""
        if self.unstable or not self.defined:
            return None, None, None
        return self.value, _finite(self.low), _finite(self.high)

    def na_reason(self) -> str:
        """Why a figure that `shown` hides is n/a, in a few words (a chart's label for the bar it
        does not draw): "undefined in 38% of resamples", else its note's first clause ("no valid
        Humanoid judgment"), else "undefined"."""
        if self.unstable:
            return f"undefined in {self.undefined:.0%} of resamples"
        return (self.note or "undefined").split(": ")[0]

    def mark(self) -> str:
        """The mark its interval carries in a cell: `EXACT` for an exact interval, `SAME` where every
        resample gave the same value (up to floating point, `all_equal`), "" otherwise and where no
        interval is shown (`shown`)."""
        _, low, high = self.shown()
        if low is None or high is None:
            return ""
        return EXACT if self.interval == "exact" else SAME if all_equal(low, high) else ""

    def why_not(self) -> str | None:
        """The note a reader sees: the given one, else the share of undefined resamples where any."""
        if self.note:
            return self.note
        if self.undefined is not None and math.isfinite(self.undefined) and self.undefined > 0:
            return f"undefined in {self.undefined:.0%} of resamples"
        return None

    def to_json(self) -> dict[str, Any]:
        """The figure as the run log and `<kind>.result.json` hold it (non-finite numbers left out;
        no value or interval where the figure reads n/a, `shown`: its share of undefined resamples
        and its note say why)."""
        out: dict[str, Any] = {}
        if self.table:
            out["table"] = self.table
            out["keys"] = dict(self.keys)
        shown = dict(zip(("value", "low", "high"), self.shown(), strict=True))  # none where n/a
        for name, x in (*shown.items(), ("undefined", _finite(self.undefined))):
            if x is not None:
                out[name] = x
        if self.n is not None:
            out["n"] = int(self.n)
        if self.unit:
            out["unit"] = self.unit
        if self.metric:
            out["metric"] = self.metric
        if self.left_out:
            out["left_out"] = dict(self.left_out)
        if self.interval != "bootstrap":
            out["interval"] = self.interval
        note = self.why_not()
        if note:
            out["note"] = note
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Estimate:
        """An estimate back from `to_json`; ValueError (pydantic's words, one line) when a field has
        the wrong type."""
        try:
            return ESTIMATE.validate_python(data)
        except ValidationError as err:
            raise ValueError(record_problem(err)) from None


ESTIMATE = TypeAdapter(Estimate)


def resampled_units(units: Iterable[str | None]) -> str:
    """What a set of figures' intervals resampled, in words, read from the figures themselves (their
    `unit`s): "role card", "dialogue", or "input and dialogue" where they differ; "" for none."""
    named = sorted({u for u in units if u})
    return " and ".join(named)


def format_estimate(
    e: Estimate, digits: int = 3, scale: float = 1.0, interval_digits: int | None = None, suffix: str = ""
) -> str:
    """ "v [low, high]" (with its mark, `interval_text`); "v" without an interval; "n/a" when
    undefined; "n/a (undefined in k% of resamples)" when the resamples say the figure is unstable.
    `scale` multiplies every number (a proportion shown in percent: 100); `interval_digits`: the
    interval's decimals where they are fewer than the value's (Table 2 shows "62.50 [50.0, 75.0]");
    `suffix`: the value's unit, after it ("%": "12% [3, 30]", " pp"), never after an n/a."""
    if e.unstable:
        return f"n/a (undefined in {e.undefined:.1%} of resamples)"
    if not e.defined:
        return "n/a"
    ends = digits if interval_digits is None else interval_digits
    return (
        number_text(e.value, digits, scale)
        + suffix
        + interval_text(e.low, e.high, ends, scale, exact=e.interval == "exact")
    )


def interval_text(
    low: float | None, high: float | None, digits: int, scale: float = 1.0, exact: bool = False
) -> str:
    """ " [low, high]", "" without an interval; marked `EXACT` when `exact` (a share's exact interval
    by card), `SAME` when all resamples gave the same value (up to floating point): a zero-width
    percentile interval says the resamples agree, not that the figure is certain (0 flags in 24
    replies, a constant judge), which the mark's note under the table says (`mark_notes`)."""
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return ""
    mark = EXACT if exact else SAME if all_equal(low, high) else ""
    return f" [{number_text(low, digits, scale)}, {number_text(high, digits, scale)}]{mark}"


def mark_notes(figures: Iterable[Estimate]) -> list[str]:
    """What the marks of `figures` (those whose cells show one, `Estimate.mark`) mean, one line per
    mark used, in the order `SAME`, `EXACT`: the note a table carries once under itself instead of
    every cell repeating its method. The exact interval's unit is read from its figures."""
    used: dict[str, list[Estimate]] = {}
    for e in figures:
        if e.mark():
            used.setdefault(e.mark(), []).append(e)
    notes = []
    if SAME in used:
        notes.append(
            f"{SAME} every resample (where the figure is defined) gave the same value: the resamples "
            "agree, which is not certainty (a judge that gives one score whatever it reads, no flag in a "
            "few replies)."
        )
    if EXACT in used:
        unit = resampled_units(e.unit for e in used[EXACT]) or "role card"
        notes.append(
            f"{EXACT} a share at 0% or 100%, which every resample gives again: its interval is the "
            f"exact (Clopper-Pearson) 95% interval by {unit}, each counted once; the exact interval by "
            "the items it counts is in the figure's note (the site's tooltip, the result JSON)."
        )
    return notes


def all_equal(low: float, high: float) -> bool:
    """The two ends of an interval are one value, up to floating-point error (a mean of 7 equal
    values can come out 1 ulp apart in two resamples)."""
    return math.isclose(low, high, rel_tol=1e-9, abs_tol=1e-12)


def number_text(x: float, digits: int, scale: float = 1.0) -> str:
    """`x` x `scale` with `digits` decimals, never "-0.000"."""
    text = f"{x * scale:.{digits}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)
