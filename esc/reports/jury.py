"""A jury of judges (`rank.py jury=...`): the pooled score, and how the judges differ.

Each member judges every (dialogue, dimension) into its own score files; nothing is averaged there.
From their records:

- **pooled score**: per (dialogue, dimension), the mean (or median, `jury.pool`) of the members'
  expected scores (the stated score where a judge gives no probabilities), over the members whose
  judgment is valid; fewer than `jury.min_valid` valid members (default: all) make the pooled
  judgment invalid, counted like any invalid judgment. The pooled rows join the leaderboard as
  judge ``jury``.
- **leniency**: per member, the mean of its score minus the mean of the other members' scores on the
  same (dialogue, dimension), where all are valid, on the 0-4 scale, with a 95% bootstrap interval
  resampling role cards; above 0: more lenient than the rest of the jury.
- **agreement**: Krippendorff's alpha (ordinal, over the stated 0-4 scores) between the members, per
  dimension; undefined (n/a) where the scores do not vary.
- **rankings**: per (role-player, language), each member's order of the targets by their average,
  Kendall's tau between each member's order and the pooled one, and every pair of targets that two
  members put in opposite orders.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from esc.annotate.agreement import krippendorff_alpha
from esc.reports.bootstrap import NO_INTERVAL, Interval, expand, format_figure, unit_index, unit_intervals
from esc.reports.leaderboard import Row
from esc.scoring.judge import DIGITS, INVALID, VALID
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord

JURY = "jury"
POOLS = ("mean", "median")


def _value(record: ScoreRecord) -> float:
    return float(record.expected if record.expected is not None else record.score)


def _by_item(records: Sequence[ScoreRecord]) -> dict[tuple[str, str], dict[str, ScoreRecord]]:
    items: dict[tuple[str, str], dict[str, ScoreRecord]] = defaultdict(dict)
    for r in records:
        items[r.key][r.judge] = r
    return items


def pooled_records(
    records: Sequence[ScoreRecord], members: Sequence[str], pool: str = "mean", min_valid: int | None = None
) -> list[ScoreRecord]:
    """One record per (dialogue, dimension) with judge ``jury`` (see the module docstring)."""
    combine = statistics.fmean if pool == "mean" else statistics.median
    need = len(members) if min_valid is None else int(min_valid)
    out = []
    for _, by_judge in sorted(_by_item(records).items()):
        first = next(iter(by_judge.values()))
        valid = [_value(r) for j, r in by_judge.items() if j in members and r.status == VALID]
        base = {f: getattr(first, f) for f in ("dialogue_id", "dimension", "language", "target", "roleplayer",
                                                "card_id", "content_sha", "source")}  # fmt: skip
        prompt = {"pool": pool, "members": list(members)}
        if len(valid) >= need and valid:
            value = float(combine(valid))
            out.append(
                ScoreRecord(**base, judge=JURY, prompt=prompt, status=VALID, score=value, expected=value)
            )
        else:
            error = f"{len(valid)} of {len(members)} judges gave a valid score (min_valid {need})"
            out.append(ScoreRecord(**base, judge=JURY, prompt=prompt, status=INVALID, error=error))
    return out


@dataclasses.dataclass(frozen=True)
class Leniency:
    judge: str
    offset: float | None  # mean (own - others' mean), 0-4 scale
    interval: Interval
    items: int  # (dialogue, dimension) where every member is valid


def leniency(
    records: Sequence[ScoreRecord], members: Sequence[str], n: int = 1000, seed: int = 0
) -> list[Leniency]:
    complete = [
        by_judge for by_judge in _by_item(records).values()
        if all(m in by_judge and by_judge[m].status == VALID for m in members)
    ]  # fmt: skip
    units, groups = unit_index([(b[members[0]].card_id, b[members[0]].language) for b in complete])
    out = []
    for m in members:
        offsets = np.asarray(
            [_value(b[m]) - np.mean([_value(b[o]) for o in members if o != m]) for b in complete], dtype=float
        )
        if not len(offsets) or len(members) < 2:
            out.append(Leniency(m, None, NO_INTERVAL, len(offsets)))
            continue

        def statistic(drawn: np.ndarray, offsets: np.ndarray = offsets) -> float:
            picked = expand(groups, drawn)
            return float(offsets[picked].mean()) if len(picked) else math.nan

        interval = unit_intervals(len(units), statistic, n, seed)[0]
        out.append(Leniency(m, float(offsets.mean()), interval, len(offsets)))
    return out


def agreement(records: Sequence[ScoreRecord], members: Sequence[str]) -> dict[str, tuple[float | None, int]]:
    """{dimension: (Krippendorff's alpha between the members, items)} over their stated scores."""
    out = {}
    items = _by_item(records)
    for dim in DIMENSION_KEYS:
        keys = sorted(k for k in items if k[1] == dim)
        table = [
            [str(items[k][m].score) if m in items[k] and items[k][m].status == VALID else None for k in keys]
            for m in members
        ]
        if keys:
            out[dim] = (krippendorff_alpha(table, DIGITS, ordinal=True), len(keys))
    return out


def _kendall(a: Sequence[str], b: Sequence[str]) -> float | None:
    from scipy.stats import kendalltau

    common = [t for t in a if t in b]
    if len(common) < 2:
        return None
    tau = kendalltau([a.index(t) for t in common], [b.index(t) for t in common]).statistic
    return None if math.isnan(tau) else float(tau)


def rankings(rows: Sequence[Row], members: Sequence[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (role-player, language): each judge's order of targets (best first), Kendall's tau with
    the jury's order, and the target pairs two members order oppositely."""
    out = {}
    groups: dict[tuple[str, str], dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        groups[(row.roleplayer, row.language)][row.judge].append(row)
    for key, by_judge in sorted(groups.items()):
        orders = {
            judge: [
                r.target
                for r in sorted(rs, key=lambda r: -(r.average.mean if r.average.mean is not None else -1))
            ]
            for judge, rs in by_judge.items()
        }
        pooled = orders.get(JURY, [])
        disputed = []
        for t1, t2 in itertools.combinations(sorted(pooled), 2):
            above = {
                m: orders[m].index(t1) < orders[m].index(t2)
                for m in members
                if m in orders and {t1, t2} <= set(orders[m])
            }
            if len(set(above.values())) > 1:
                disputed.append((t1, t2, {m: t1 if up else t2 for m, up in above.items()}))
        out[key] = {
            "orders": orders,
            "tau": {m: _kendall(orders[m], pooled) for m in members if m in orders},
            "disputed": disputed,
        }
    return out


def to_markdown(
    leniencies: Sequence[Leniency], alphas: Mapping[str, tuple[float | None, int]],
    ranks: Mapping[tuple[str, str], Mapping[str, Any]], pool: str, members: Sequence[str],
) -> str:  # fmt: skip
    lines = [
        f"## The jury: {', '.join(members)}",
        "",
        f"The pooled score (judge `{JURY}` in the table above) is the {pool} of the judges' expected scores "
        "(each judge's own row, like Table 2, averages its stated scores: the two need not match).",
        "",
        "Leniency: mean score minus the other judges' mean on the same judgment (0-4 scale; above 0 = more "
        "lenient), 95% bootstrap interval over cards, on the judgments every judge read.",
        "",
        "| judge | leniency | judgments |",
        "|---|---|---|",
    ]
    for le in leniencies:
        value = "n/a" if le.offset is None else format_figure(le.offset, le.interval, digits=2)
        lines.append(f"| {le.judge} | {value} | {le.items} |")
    lines += ["", "Agreement between the judges, Krippendorff's alpha (ordinal) per dimension:", "",
              "| dimension | alpha | judgments |", "|---|---|---|"]  # fmt: skip
    for dim, (alpha, n) in alphas.items():
        lines.append(f"| {dim} | {'n/a (no variation)' if alpha is None else f'{alpha:.3f}'} | {n} |")
    for (roleplayer, language), r in ranks.items():
        lines += ["", f"Rankings ({language}, role-player {roleplayer}), best first:", ""]
        for judge, order in r["orders"].items():
            tau = "" if judge == JURY else f" (Kendall's tau with the jury: {_tau(r['tau'].get(judge))})"
            lines.append(f"- {judge}: {' > '.join(order)}{tau}")
        if r["disputed"]:
            pairs = [
                f"{a} vs {b} ({', '.join(f'{m}: {w}' for m, w in who.items())})"
                for a, b, who in r["disputed"]
            ]
            lines.append("- judges disagree on: " + "; ".join(pairs))
        else:
            lines.append("- every judge orders the targets the same way")
    return "\n".join(lines) + "\n"


def _tau(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
