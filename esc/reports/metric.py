"""What a published figure measures: a `Metric`, registered once with how it aggregates, which
direction is better and the unit its interval resamples.

A task declares its metrics in its own folder (`esc/tasks/<kind>/metrics.py`) and names one where a
table column holds it (`esc.reports.result.Table.of(..., metrics={column: metric})`). Each figure
of that column then carries the metric's name (`Estimate.metric`), the run log's header carries the
definitions of the metrics its results name (`esc.tasks.run_log`), and every view reads them from
there: the site marks a column's direction and its best row without knowing any task.

Why registered (lm-evaluation-harness registers a metric with its aggregation and
`higher_is_better` the same way): what a number means was written beside it by hand in each
report, and drifted from what was computed; here a figure whose resampled unit differs from its
metric's is refused where it is placed (`checked_unit`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from esc.registry import Registry
from esc.runinfo import Record


@dataclasses.dataclass(frozen=True)
class Metric:
    """`name` (dotted: "<task>.<what>"), `aggregation` (how its items become the figure, in words),
    `higher_is_better` (None: neither direction is better, e.g. a bias or a count), `unit` (what its
    95% interval resamples; None: the data decide, e.g. role cards where the items name their card,
    else dialogues, and each figure says which), `scale` (the values' range or unit, e.g. "0-4")."""

    name: str
    aggregation: str
    higher_is_better: bool | None
    unit: str | None
    scale: str = ""

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "name"}


class Definition(Record):
    """A metric's definition as a run log's header holds it (`Metric.to_json`, its name the key)."""

    aggregation: str | None = None
    higher_is_better: bool | None = None
    unit: str | None = None
    scale: str | None = None

    def metric(self, name: str) -> Metric:
        return Metric(name, self.aggregation or "", self.higher_is_better, self.unit, self.scale or "")


#: every metric by name; a task's metrics module fills it when imported (its report imports it)
METRICS: Registry[Metric] = Registry("metric", origin=lambda m: m)


def metric(
    name: str, aggregation: str, higher_is_better: bool | None, unit: str | None, scale: str = ""
) -> Metric:
    """Register a metric and return it (a second, different definition of one name is an error)."""
    return METRICS.add(name, Metric(name, aggregation, higher_is_better, unit, scale))


def checked_unit(m: Metric, unit: str | None, where: str) -> str | None:
    """The unit a figure of `m` states: the one its computation resampled, else the metric's; a
    ValueError when the two differ (the label would not describe the number)."""
    if unit and m.unit and unit != m.unit:
        raise ValueError(f"{where}: metric {m.name} resamples {m.unit}s, but this figure resampled {unit}s")
    return unit or m.unit


def definitions(names: Any) -> dict[str, dict[str, Any]]:
    """The registered definitions of `names` (unknown names left out), as a run log's header holds them."""
    return {n: METRICS[n].to_json() for n in sorted(set(names)) if n in METRICS}
