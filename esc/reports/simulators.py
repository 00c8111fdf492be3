"""Several simulators (role-players) against the same targets: does the ranking depend on who plays
the seeker? A section of the leaderboard when its records hold two or more role-players for the
same targets (one judge, one language at a time; e.g. `python evaluate.py -m +exp=evaluate/simulators_en`).

- each target's average score (0-100, the mean over dialogues of their mean valid dimension score)
  under each simulator, with n;
- the variance of that table split into targets, simulators and what is left (interaction), as
  shares of the total sum of squares of the cell means: a large simulator share means the simulator
  moves every target's score; a large interaction share means it reorders them;
- Kendall's W, the agreement of the simulators' rankings of the targets (1: the same order under
  every simulator, 0: none), with a 95% bootstrap interval resampling role cards (a card's
  dialogues with every simulator and target go together); a resample where a cell is empty gives
  no W and is counted (`bootstrap.MAX_UNDEFINED`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import rankdata

from esc.reports.bootstrap import Interval, expand, format_figure, unit_index, unit_intervals
from esc.scoring.judge import VALID
from esc.scoring.store import ScoreRecord


def kendalls_w(table: np.ndarray) -> float:
    """Kendall's W of a targets x raters table of scores (each rater ranks the targets; ties get
    their mean rank, without the tie correction). NaN with fewer than 2 targets or raters, or an
    empty cell."""
    n, m = table.shape
    if n < 2 or m < 2 or np.isnan(table).any():
        return math.nan
    ranks = np.column_stack([rankdata(-table[:, j]) for j in range(m)])
    totals = ranks.sum(axis=1)
    s = float(((totals - totals.mean()) ** 2).sum())
    return 12.0 * s / (m**2 * (n**3 - n))


def variance_shares(table: np.ndarray) -> dict[str, float]:
    """Shares of the total sum of squares of a complete targets x simulators table of means."""
    grand = table.mean()
    total = float(((table - grand) ** 2).sum())
    if total == 0:
        return {"targets": math.nan, "simulators": math.nan, "interaction": math.nan}
    targets = float(table.shape[1] * ((table.mean(axis=1) - grand) ** 2).sum())
    simulators = float(table.shape[0] * ((table.mean(axis=0) - grand) ** 2).sum())
    return {"targets": targets / total, "simulators": simulators / total,
            "interaction": (total - targets - simulators) / total}  # fmt: skip


@dataclasses.dataclass
class SimulatorTable:
    judge: str
    language: str
    targets: list[str]
    simulators: list[str]
    means: np.ndarray  # targets x simulators, 0-100
    counts: np.ndarray  # dialogues per cell
    shares: dict[str, float]
    w: float
    w_interval: Interval


def _dialogue_averages(records: Sequence[ScoreRecord]) -> dict[tuple[str, str, str, str, int], float]:
    """(judge, language, role-player, target, card) -> the dialogue's mean valid score on 0-100."""
    scores: dict[tuple[str, str, str, str, int], list[float]] = defaultdict(list)
    for r in records:
        if r.status == VALID and r.card_id is not None:
            scores[(r.judge, r.language, r.roleplayer or "?", r.target or "?", r.card_id)].append(
                float(r.score)
            )
    return {k: float(np.mean(v)) / 4 * 100 for k, v in scores.items()}


def simulator_tables(
    records: Sequence[ScoreRecord], n_resamples: int = 1000, seed: int = 0
) -> list[SimulatorTable]:
    """One table per (judge, language) whose records hold 2+ simulators sharing 2+ targets."""
    averages = _dialogue_averages(records)
    by_group: dict[tuple[str, str], dict[tuple[str, str, int], float]] = defaultdict(dict)
    for (judge, language, sim, target, card), value in averages.items():
        by_group[(judge, language)][(sim, target, card)] = value
    tables = []
    for (judge, language), values in sorted(by_group.items()):
        simulators = sorted({s for s, _, _ in values})
        targets = sorted(
            t
            for t in {t for _, t, _ in values}
            if all(any(k[:2] == (s, t) for k in values) for s in simulators)
        )
        if len(simulators) < 2 or len(targets) < 2:
            continue
        cards, members = unit_index(sorted({c for _, _, c in values}))
        by_card = {c: {(s, t): v for (s, t, cc), v in values.items() if cc == c} for c in cards}

        def cell_means(
            drawn: np.ndarray, cards: list = cards, members: list = members, by_card: dict = by_card,
            targets: list = targets, simulators: list = simulators,
        ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
            picked = [cards[i] for i in expand(members, drawn)] if len(drawn) else []
            sums = np.zeros((len(targets), len(simulators)))
            counts = np.zeros_like(sums)
            for c in picked:
                for (s, t), v in by_card[c].items():
                    if t in targets:
                        sums[targets.index(t), simulators.index(s)] += v
                        counts[targets.index(t), simulators.index(s)] += 1
            with np.errstate(invalid="ignore", divide="ignore"):
                return sums / counts, counts

        means, counts = cell_means(np.arange(len(cards)))
        w_interval = unit_intervals(
            len(cards), lambda d, cell_means=cell_means: kendalls_w(cell_means(d)[0]), n_resamples, seed
        )[0]
        shares = variance_shares(means) if not np.isnan(means).any() else {}
        tables.append(SimulatorTable(judge, language, targets, simulators, means, counts, shares,
                                     kendalls_w(means), w_interval))  # fmt: skip
    return tables


def to_markdown(tables: Sequence[SimulatorTable]) -> str:
    if not tables:
        return ""
    lines = []
    for t in tables:
        lines += [
            "",
            f"## Several simulators ({t.language}, judge {t.judge})",
            "",
            "Each target's average (0-100) under each simulator (role-player); n dialogues.",
            "",
            "| target | " + " | ".join(t.simulators) + " |",
            "|---|" + "---|" * len(t.simulators),
        ]
        for i, target in enumerate(t.targets):
            cells = [
                "n/a" if math.isnan(t.means[i, j]) else f"{t.means[i, j]:.1f} (n={int(t.counts[i, j])})"
                for j in range(len(t.simulators))
            ]
            lines.append(f"| {target} | " + " | ".join(cells) + " |")
        shares = ", ".join(f"{k} {v:.0%}" for k, v in t.shares.items() if not math.isnan(v)) or "n/a"
        lines += [
            "",
            f"Variance of the cell means: {shares}.",
            "Ranking stability across simulators, Kendall's W: "
            f"{format_figure(t.w, t.w_interval, digits=2)} ({len(t.simulators)} simulators x "
            f"{len(t.targets)} targets; 95% bootstrap interval over cards).",
        ]
    return "\n".join(lines) + "\n"


def to_json(tables: Sequence[SimulatorTable]) -> list[dict[str, Any]]:
    return [
        {"judge": t.judge, "language": t.language, "targets": t.targets, "simulators": t.simulators,
         "means": np.where(np.isnan(t.means), None, t.means).tolist(), "counts": t.counts.tolist(),
         "variance_shares": t.shares, "kendalls_w": t.w,
         "kendalls_w_interval": dataclasses.asdict(t.w_interval)}
        for t in tables
    ]  # fmt: skip
