"""How a report table is drawn: a `Chart` says which of its columns a picture shows, never the numbers.

A task declares the picture of a table beside the table (`esc.reports.result.Table.of(...,
chart=Chart(...))`), and every view that draws it (the report site, `esc.reports.table_chart`) reads
the points from the table's own cells, as `Estimate.shown` publishes them: a picture cannot show a
figure the table does not, and a figure that reads n/a there is a gap here, said so in the picture.

Two kinds:
- `points`: one point per table row, named by the texts of its `label` columns, placed on the value
  axis with its 95% interval as a line (Table 2 per dimension, a forest plot of paired differences,
  a stress card's changes, a judge's agreement per dimension). Several figure columns (`values`) are
  one panel each; a long table names the label column whose texts are the panels (`panel`).
- `lines`: one line per `label`, over the texts of the `x` column in table order (the seeker's
  emotion per exchange), each point with its interval.

`facet`: label columns whose texts split the table into one picture each (a language). `reference`:
a line at that value (0 for a difference); `band`: a shaded range (a tolerance); `limits`: the value
axis (0-100 for Table 2; None: the data's). Titles and axis labels are given in English and Chinese.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

KINDS = ("points", "lines")


@dataclasses.dataclass(frozen=True)
class Chart:
    """The picture of one table (see the module's docstring)."""

    label: tuple[str, ...]
    values: tuple[str, ...] = ()  # the figure columns drawn, a panel each; (): every figure column
    panel: str | None = None  # a label column whose texts are the panels (then `values` has one column)
    facet: tuple[str, ...] = ()
    kind: Literal["points", "lines"] = "points"
    x: str | None = None  # kind "lines": the label column along the x axis
    reference: float | None = None
    band: tuple[float, float] | None = None
    limits: tuple[float, float] | None = None
    title: tuple[str, str] = ("", "")  # (English, Chinese)
    axis: tuple[str, str] = ("", "")  # the value axis's label (English, Chinese)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"chart kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "lines" and not self.x:
            raise ValueError("a chart of kind 'lines' names its x column")
        if self.panel is not None and len(self.values) > 1:
            raise ValueError("a chart with a panel column draws one figure column (`values`)")

    def columns(self) -> tuple[str, ...]:
        """Every column the chart names (checked against its table's: `Table.of`)."""
        return (*self.label, *self.values, *([self.panel] if self.panel else []), *self.facet,
                *([self.x] if self.x else []))  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Chart:
        """A chart back from `to_json`; ValueError for anything else."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a chart is an object, got {data!r}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - fields
        if unknown:
            raise ValueError(f"a chart has no field {sorted(unknown)}")
        return cls(**{k: _field(k, v) for k, v in data.items()})


def _field(name: str, value: Any) -> Any:
    if name in ("label", "values", "facet", "title", "axis"):
        return _texts(name, value)
    if name in ("band", "limits"):
        if value is None:
            return None
        if not (isinstance(value, Sequence) and len(value) == 2 and all(_number(x) for x in value)):
            raise ValueError(f"a chart's {name} is two numbers, got {value!r}")
        return (float(value[0]), float(value[1]))
    if name == "reference":
        if value is not None and not _number(value):
            raise ValueError(f"a chart's reference is a number, got {value!r}")
        return None if value is None else float(value)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"a chart's {name} is a string, got {value!r}")
    return value


def _texts(name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ValueError(f"a chart's {name} is a list of strings, got {value!r}")
    return tuple(value)


def _number(x: Any) -> bool:
    """A finite JSON number: never true, "3", NaN or Infinity (as the run log's `Number`)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
