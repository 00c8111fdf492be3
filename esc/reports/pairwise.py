"""The pairwise report (`rank.py mode=pairwise`): which chatbot the judge prefers, card by card.

From each pair's verdicts (`esc.scoring.pairwise.verdict`: the same result both orders stands, two
different results are a tie, an unread answer leaves the pair out and is counted), per role-player:

- **position consistency**: the share of pairs (with both answers read) judged the same both ways,
  and the share of decisive answers that chose the conversation shown first (0.5 when the judge has
  no position preference);
- **win rates**: per pair of targets, the share of their shared cards' verdicts each won (a tie
  counts half), over all dimensions and per dimension;
- **strengths**: Bradley-Terry log-strengths (`choix.ilsr_pairwise`, centred on 0; a win of i over j
  has probability 1 / (1 + exp(theta_j - theta_i))), a tie counted as half a win each way, with 95%
  bootstrap intervals resampling cards (every verdict of a card together), over all dimensions and
  per dimension.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from esc.jsonl import atomic_write_text
from esc.reports.bootstrap import NO_INTERVAL, Interval, expand, format_figure, unit_index, unit_intervals
from esc.scoring.pairwise import TIE, Pair, Verdict

ALL = "all"


@dataclasses.dataclass(frozen=True)
class Judged:
    """One pair's verdict on one dimension."""

    pair: Pair
    dimension: str
    verdict: Verdict


@dataclasses.dataclass(frozen=True)
class Consistency:
    pairs: int  # pairs with both answers read
    consistent: int
    unread: int  # pairs left out: an answer invalid or failed
    decisive_answers: int
    first_position: int  # decisive answers that chose A

    @property
    def rate(self) -> float | None:
        return self.consistent / self.pairs if self.pairs else None

    @property
    def first_share(self) -> float | None:
        return self.first_position / self.decisive_answers if self.decisive_answers else None


def consistency(judged: Sequence[Judged]) -> Consistency:
    read = [j for j in judged if j.verdict.consistent is not None]
    return Consistency(
        len(read),
        sum(bool(j.verdict.consistent) for j in read),
        len(judged) - len(read),
        sum(j.verdict.decisive for j in judged),
        sum(j.verdict.first_position for j in judged),
    )


def comparisons(judged: Sequence[Judged], index: dict[str, int]) -> list[tuple[int, int]]:
    """(winner, loser) pairs for choix: a win twice, a tie once each way (half a win each)."""
    data: list[tuple[int, int]] = []
    for j in judged:
        x, y, result = index[j.pair.x], index[j.pair.y], j.verdict.result
        if result is None:
            continue
        if result == TIE:
            data += [(x, y), (y, x)]
        elif result == j.pair.x:
            data += [(x, y), (x, y)]
        else:
            data += [(y, x), (y, x)]
    return data


def bradley_terry(n_items: int, data: Sequence[tuple[int, int]], alpha: float = 0.01) -> np.ndarray:
    """Centred log-strengths; NaN for every item when there is no comparison. `alpha` (a small
    ridge) keeps the estimate finite when an item won or lost every comparison."""
    import choix

    if not data:
        return np.full(n_items, np.nan)
    params = np.asarray(choix.ilsr_pairwise(n_items, list(data), alpha=alpha), dtype=float)
    return params - params.mean()


@dataclasses.dataclass(frozen=True)
class Strength:
    target: str
    theta: float
    interval: Interval
    verdicts: int  # verdicts it took part in


def strengths(judged: Sequence[Judged], n_resamples: int = 200, seed: int = 0) -> list[Strength]:
    """Bradley-Terry strengths of the targets in `judged` (one role-player), best first."""
    targets = sorted({t for j in judged for t in (j.pair.x, j.pair.y)})
    index = {t: i for i, t in enumerate(targets)}
    usable = [j for j in judged if j.verdict.result is not None]
    units, members = unit_index([j.pair.unit for j in usable])

    def statistic(drawn: np.ndarray) -> np.ndarray:
        chosen = [usable[i] for i in expand(members, drawn)] if len(drawn) else []
        return bradley_terry(len(targets), comparisons(chosen, index))

    theta = statistic(np.arange(len(units)))
    intervals = (
        unit_intervals(len(units), statistic, n_resamples, seed) if usable else [NO_INTERVAL] * len(targets)
    )
    counts = {t: sum(t in (j.pair.x, j.pair.y) for j in usable) for t in targets}
    rows = [Strength(t, float(theta[i]), intervals[i], counts[t]) for t, i in index.items()]
    return sorted(rows, key=lambda r: (-(r.theta if not math.isnan(r.theta) else -math.inf), r.target))


def win_rates(judged: Sequence[Judged]) -> dict[tuple[str, str], tuple[float, int]]:
    """{(a, b): (a's share of their verdicts, verdicts)} for every ordered pair that met."""
    tally: dict[tuple[str, str], list[float]] = {}
    for j in judged:
        result = j.verdict.result
        if result is None:
            continue
        x, y = j.pair.x, j.pair.y
        score_x = 0.5 if result == TIE else float(result == x)
        tally.setdefault((x, y), []).append(score_x)
        tally.setdefault((y, x), []).append(1.0 - score_x)
    return {key: (float(np.mean(v)), len(v)) for key, v in tally.items()}


def _groups(judged: Sequence[Judged]) -> dict[str, list[Judged]]:
    groups: dict[str, list[Judged]] = {}
    for j in judged:
        groups.setdefault(j.pair.roleplayer, []).append(j)
    return groups


def report(
    judged: Sequence[Judged], dimensions: Sequence[str], n_resamples: int, seed: int
) -> dict[str, Any]:
    """Per role-player: consistency, win rates and strengths, over all dimensions and per dimension."""
    out = {}
    for roleplayer, members in sorted(_groups(judged).items()):
        per_dimension = {d: [j for j in members if j.dimension == d] for d in dimensions}
        out[roleplayer] = {
            "consistency": consistency(members),
            "strengths": {ALL: strengths(members, n_resamples, seed)}
            | {d: strengths(js, n_resamples, seed) for d, js in per_dimension.items() if js},
            "win_rates": {ALL: win_rates(members)}
            | {d: win_rates(js) for d, js in per_dimension.items() if js},
        }
    return out


def _strength(s: Strength | None) -> str:
    return "n/a" if s is None else format_figure(s.theta, s.interval, digits=2)


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def to_markdown(results: dict[str, Any], judge: str) -> str:
    lines = [f"Pairwise preferences of judge `{judge}`: every pair of targets on every card both played, "
             "each dimension asked in both orders; two different answers are a tie."]  # fmt: skip
    for roleplayer, res in results.items():
        c: Consistency = res["consistency"]
        lines += [
            "",
            f"## Role-player {roleplayer}",
            "",
            f"Position consistency: {_share(c.rate)} of {c.pairs} pairs judged the same both ways "
            f"({c.pairs - c.consistent} counted as ties; {c.unread} left out: an answer unread). "
            f"Answers that chose the conversation shown first: {_share(c.first_share)} of "
            f"{c.decisive_answers} decisive answers (50%: no preference for a position).",
            "",
            "Bradley-Terry strength (log scale, centred; 95% bootstrap interval over cards), all dimensions:",
            "",
            "| rank | target | strength | verdicts |",
            "|---|---|---|---|",
        ]
        for rank, s in enumerate(res["strengths"][ALL], 1):
            lines.append(
                f"| {rank} | {s.target} | {format_figure(s.theta, s.interval, digits=2)} | {s.verdicts} |"
            )
        rates = res["win_rates"][ALL]
        targets = [s.target for s in res["strengths"][ALL]]
        lines += ["", "Win rate of the row's target against the column's (a tie counts half; verdicts):", ""]
        lines += ["| | " + " | ".join(targets) + " |", "|---|" + "---|" * len(targets)]
        for a in targets:
            cells = [
                "-"
                if a == b
                else (f"{rates[(a, b)][0]:.2f} ({rates[(a, b)][1]})" if (a, b) in rates else "n/a")
                for b in targets
            ]
            lines.append(f"| {a} | " + " | ".join(cells) + " |")
        dims = [d for d in res["strengths"] if d != ALL]
        if dims:
            lines += ["", "Strength per dimension:", "", "| target | " + " | ".join(dims) + " |",
                      "|---|" + "---|" * len(dims)]  # fmt: skip
            by_dim = {d: {s.target: s for s in res["strengths"][d]} for d in dims}
            for t in targets:
                cells = [_strength(by_dim[d].get(t)) for d in dims]
                lines.append(f"| {t} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(out: Path, judged: Sequence[Judged], dimensions: Sequence[str], judge: str, n_resamples: int,
                 seed: int) -> dict[str, Any]:  # fmt: skip
    """pairwise.md, pairwise.json, strengths.csv and verdicts.csv."""
    results = report(judged, dimensions, n_resamples, seed)
    markdown = to_markdown(results, judge)
    atomic_write_text(out / "pairwise.md", markdown)
    payload = {
        rp: {
            "consistency": {
                **dataclasses.asdict(r["consistency"]),
                "rate": r["consistency"].rate,
                "first_position_share": r["consistency"].first_share,
            },  # fmt: skip
            "strengths": {
                d: [{**dataclasses.asdict(s), "interval": dataclasses.asdict(s.interval)} for s in rows]
                for d, rows in r["strengths"].items()
            },  # fmt: skip
            "win_rates": {
                d: {f"{a}|{b}": {"rate": v, "verdicts": n} for (a, b), (v, n) in rates.items()}
                for d, rates in r["win_rates"].items()
            },  # fmt: skip
        }
        for rp, r in results.items()
    }
    atomic_write_text(out / "pairwise.json", json.dumps(payload, indent=1, default=float) + "\n")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        ["roleplayer", "dimension", "target", "strength", "low", "high", "undefined_share", "verdicts"]
    )
    for rp, r in results.items():
        for d, rows in r["strengths"].items():
            for s in rows:
                writer.writerow(
                    [
                        rp,
                        d,
                        s.target,
                        s.theta,
                        s.interval.low,
                        s.interval.high,
                        s.interval.undefined,
                        s.verdicts,
                    ]
                )
    atomic_write_text(out / "strengths.csv", buffer.getvalue())
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["roleplayer", "language", "card_id", "x", "y", "dimension", "result", "consistent"])
    for j in judged:
        p = j.pair
        writer.writerow([p.roleplayer, p.language, p.card_id, p.x, p.y, j.dimension, j.verdict.result or "",
                         "" if j.verdict.consistent is None else j.verdict.consistent])  # fmt: skip
    atomic_write_text(out / "verdicts.csv", buffer.getvalue())
    return {"markdown": markdown, "results": results}
