"""The agreement table by facet (language, turns): `agree.agreement_tables` on each facet value's
annotated items, computed only where the resampled units reach `leaderboard.min_n`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from esc.reports import result as result_
from esc.reports.breakdown import AGREEMENT_FACETS, MIN_N, TITLES, UNKNOWN, Facets, _order, turn_labels
from esc.tasks.agreement import report as agree


@dataclasses.dataclass
class AgreementColumn:
    value: str
    n_units: int  # the resampled units of its items (`AgreementBreakdown.unit`: inputs or dialogues)
    n_items: int  # annotated (dialogue, dimension) pairs
    tables: list[agree.Table] | None  # None: n_units < min_n, not computed


@dataclasses.dataclass
class AgreementBreakdown:
    facet: str
    columns: list[AgreementColumn]
    min_n: int
    unit: str = "dialogue"  # what a column's n counts and its intervals resample (`agree.unit_name`)


def agreement_breakdowns(
    items: Sequence[agree.Item],
    rows: Mapping[str, Mapping[tuple[str, str], agree.Prediction]],
    facets: Mapping[str, Facets],
    min_n: int = MIN_N,
    n_resamples: int = 1000,
    seed: int = 0,
    whole: Sequence[agree.Table] | None = None,
) -> list[AgreementBreakdown]:
    """Per facet (`AGREEMENT_FACETS`) and value: `agree.agreement_tables` on that value's items
    (all sources together), computed only where the units reach `min_n`. `whole`: the tables of all
    `items` with the same resamples, reused (not computed again) for a value that holds every item."""
    reuse = [t for t in whole or [] if t.source == agree.ALL_SOURCES]
    unit = agree.unit_name((it.unit, it.key[0]) for it in items)  # what n counts: the items' units
    out = []
    for facet in AGREEMENT_FACETS:
        values = {it.key[0]: facets.get(it.key[0], Facets()).value(facet) for it in items}
        if facet == "turns":
            labels = turn_labels(int(v) for v in values.values() if v != UNKNOWN)
            values = {k: v if v == UNKNOWN else labels[int(v)] for k, v in values.items()}
        columns = []
        for value in _order(facet, values.values()):
            chosen = [it for it in items if values[it.key[0]] == value]
            n_units = len({it.unit for it in chosen})
            tables = None
            if n_units >= min_n:
                everything = len(chosen) == len(items) and reuse
                tables = (
                    reuse if everything else agree.agreement_tables(chosen, rows, n_resamples, seed, False)
                )
            columns.append(AgreementColumn(value, n_units, len(chosen), tables))
        out.append(AgreementBreakdown(facet, columns, min_n, unit))
    return out


def agreement_breakdown_blocks(breakdowns: Sequence[AgreementBreakdown]) -> list[result_.Block]:
    """The sections after agreement.md's tables: per facet, ACC, ACC_soft, QWK and Spearman of every row
    and reading on all dimensions pooled, one column per value."""
    blocks: list[result_.Block] = []
    for b in breakdowns:
        computed = [c for c in b.columns if c.tables]
        names = list(dict.fromkeys(r.judge for c in computed for t in c.tables or [] for r in t.rows))
        rows: list[list[result_.CellLike]] = []
        for name in names:
            for reading in agree.READINGS:
                for metric in agree.HEADLINE:
                    cells: list[result_.CellLike] = []
                    for c in b.columns:
                        if c.tables is None:
                            cells.append(f"n={c.n_units} (< {b.min_n})")
                            continue
                        r = agree.find_row(c.tables, agree.POOLED, name, reading)
                        resampled = c.tables[0].unit
                        cells.append(
                            agree.figure_cell(
                                r.values[metric], r.intervals[metric], metric, c.n_units, resampled
                            )
                        )
                    rows.append([name, reading, agree.LABELS[metric], *cells])
        if not names:
            rows.append(["(none)", "", "", *(f"n={c.n_units} (< {b.min_n})" for c in b.columns)])
        per_column = ", ".join(f"{c.value}: {c.n_items}" for c in b.columns)
        blocks += [
            result_.Heading(TITLES[b.facet]),
            result_.Table.of(
                ["Judge", "reading", "figure", *(f"{c.value} (n={c.n_units})" for c in b.columns)], rows
            ),
            result_.Text(
                f"All dimensions pooled, every row on the annotated items of the column; n = {b.unit}s (the "
                f"resampled unit) [95% percentile bootstrap interval]; a column with n < {b.min_n} "
                f"(`leaderboard.min_n`) is not computed. Items per column: {per_column}."
            ),
        ]
    blocks.append(
        result_.Text(
            "The annotated dialogues have no role card: the taxonomy tiers and the card source do not apply."
        )
    )
    return blocks
