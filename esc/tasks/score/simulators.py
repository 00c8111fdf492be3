"""Several simulators (role-players) against the same targets: does the ranking depend on who plays
the seeker? A section of the leaderboard when its records hold two or more role-players for the
same targets (one judge, one language at a time; e.g. `python evaluate.py -m +exp=evaluate/simulators_en`).

Only the cards every (simulator, target) played are used, so every cell rests on the same cards (a
paired design); targets a simulator did not play, and cards missing from some cell, are left out
and named. Every figure has a 95% bootstrap interval resampling those cards (a card's dialogues with
every simulator and target go together):

- each target's average score (0-100, the mean over its dialogues of their mean valid dimension
  score) under each simulator;
- the variance of that table split into targets, simulators and what is left (interaction plus the
  cells' sampling noise), as shares of the total sum of squares of the cell means: a large simulator
  share means the simulator moves every target's score; the rest also holds noise, so a large one
  does not by itself show that the simulator reorders the targets (Kendall's W says that);
- Kendall's W of the simulators' rankings of the targets (1: the same order under every simulator),
  with the correction for tied ranks; undefined (n/a) when every ranking is one tie. W is read
  against its chance level: under rankings drawn at random it averages 1/m with m simulators (0.50
  with 2, 0.33 with 3), and with 2 simulators W = (1 + Spearman's rho) / 2, so 0.10 is strongly
  reversed orders, not "no agreement". The report gives that level and a permutation p-value (each
  simulator's scores shuffled over the targets, `PERMUTATIONS` times).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata

from esc.reports import result as result_
from esc.reports.bootstrap import Interval, estimate, unit_intervals
from esc.reports.estimate import format_estimate
from esc.scoring.judge import VALID
from esc.scoring.store import ScoreRecord


def kendalls_w(table: np.ndarray) -> float:
    """Kendall's W of a targets x raters table of scores: each rater ranks the targets (ties get their
    mean rank), W = 12 S / (m^2 (n^3 - n) - m sum T), T = sum(t^3 - t) over each rater's ties. NaN
    with fewer than 2 targets or raters, an empty cell, or when every ranking is one tie."""
    n, m = table.shape
    if n < 2 or m < 2 or np.isnan(table).any():
        return math.nan
    ranks = np.column_stack([rankdata(-table[:, j]) for j in range(m)])
    totals = ranks.sum(axis=1)
    s = float(((totals - totals.mean()) ** 2).sum())
    ties = sum(float(((c := np.unique(table[:, j], return_counts=True)[1]) ** 3 - c).sum()) for j in range(m))
    denominator = m**2 * (n**3 - n) - m * ties
    return 12.0 * s / denominator if denominator > 0 else math.nan


PERMUTATIONS = 10_000


def w_permutation_p(table: np.ndarray, permutations: int = PERMUTATIONS, seed: int = 0) -> float:
    """P(W >= the observed W) when each rater's scores are shuffled over the targets (rankings drawn
    at random), counting the observed table itself: (1 + hits) / (1 + permutations)."""
    observed = kendalls_w(table)
    if math.isnan(observed):
        return math.nan
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(permutations):
        shuffled = np.column_stack([rng.permutation(table[:, j]) for j in range(table.shape[1])])
        hits += kendalls_w(shuffled) >= observed - 1e-12
    return (1 + hits) / (1 + permutations)


def variance_shares(table: np.ndarray) -> dict[str, float]:
    """Shares of the total sum of squares of a complete targets x simulators table of means: targets,
    simulators, and the rest (interaction and noise)."""
    grand = table.mean()
    total = float(((table - grand) ** 2).sum())
    if total == 0:
        return {"targets": math.nan, "simulators": math.nan, "rest": math.nan}
    targets = float(table.shape[1] * ((table.mean(axis=1) - grand) ** 2).sum())
    simulators = float(table.shape[0] * ((table.mean(axis=0) - grand) ** 2).sum())
    return {
        "targets": targets / total,
        "simulators": simulators / total,
        "rest": (total - targets - simulators) / total,
    }


@dataclasses.dataclass
class SimulatorTable:
    judge: str
    language: str
    targets: list[str]
    simulators: list[str]
    means: np.ndarray  # targets x simulators, 0-100
    intervals: list[list[Interval]]  # targets x simulators
    cards: int  # the cards every cell played
    shares: dict[str, tuple[float, Interval]]
    w: float
    w_interval: Interval
    left_out: dict[str, list[str]]  # "targets": not played under every simulator; "cards": missing somewhere
    w_chance: float = math.nan  # W's mean under random rankings: 1 / simulators
    w_p: float = math.nan  # permutation p-value: P(W >= the observed W) under random rankings


def _dialogue_averages(records: Sequence[ScoreRecord]) -> dict[tuple[str, str, str, str, int], float]:
    """(judge, language, role-player, target, card) -> the dialogue's mean valid score on 0-100."""
    scores: dict[tuple[str, str, str, str, int], list[float]] = defaultdict(list)
    for r in records:
        if r.status == VALID and r.card_id is not None:
            scores[(r.judge, r.language, r.roleplayer or "?", r.target or "?", r.card_id)].append(
                float(r.score)
            )
    return {k: float(np.mean(v)) / 4 * 100 for k, v in scores.items()}


SHARES = ("targets", "simulators", "rest")


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
        played = {(s, t) for s, t, _ in values}
        every = sorted({t for _, t, _ in values})
        targets = [t for t in every if all((s, t) in played for s in simulators)]
        if len(simulators) < 2 or len(targets) < 2:
            continue
        cells = [(s, t) for t in targets for s in simulators]
        all_cards = sorted({c for _, _, c in values})
        cards = [c for c in all_cards if all((s, t, c) in values for s, t in cells)]
        if len(cards) < 2:
            continue
        # cards x targets x simulators: every value present (the paired design)
        cube = np.asarray([[[values[(s, t, c)] for s in simulators] for t in targets] for c in cards])
        means = cube.mean(axis=0)

        def w_of(drawn: np.ndarray, cube: np.ndarray = cube) -> float:
            return kendalls_w(cube[drawn].mean(axis=0)) if len(drawn) else math.nan

        def shares_of(drawn: np.ndarray, cube: np.ndarray = cube) -> np.ndarray:
            split = variance_shares(cube[drawn].mean(axis=0)) if len(drawn) else {}
            return np.asarray([split.get(k, math.nan) for k in SHARES])

        def cells_of(drawn: np.ndarray, cube: np.ndarray = cube) -> np.ndarray:
            return cube[drawn].mean(axis=0).ravel() if len(drawn) else np.full(cube[0].size, math.nan)

        flat = unit_intervals(len(cards), cells_of, n_resamples, seed)
        intervals = [flat[i * len(simulators) : (i + 1) * len(simulators)] for i in range(len(targets))]
        share_intervals = unit_intervals(len(cards), shares_of, n_resamples, seed)
        point = variance_shares(means)
        shares = {k: (point[k], share_intervals[i]) for i, k in enumerate(SHARES)}
        left_out = {"targets": [t for t in every if t not in targets],
                    "cards": [str(c) for c in all_cards if c not in cards]}  # fmt: skip
        w_interval = unit_intervals(len(cards), w_of, n_resamples, seed)[0]
        tables.append(SimulatorTable(judge, language, targets, simulators, means, intervals, len(cards),
                                     shares, kendalls_w(means), w_interval, left_out,
                                     1.0 / len(simulators), w_permutation_p(means, seed=seed)))  # fmt: skip
    return tables


def simulator_blocks(tables: Sequence[SimulatorTable]) -> list[result_.Block]:
    """Per judge and language: each target's average under each simulator; then how stable the
    ranking is across simulators, a row per judge and language (simulators.csv)."""
    blocks: list[result_.Block] = []
    for t in tables:
        rows = [
            [target, *(_cell(t.means[i, j], t.intervals[i][j], t.cards) for j in range(len(t.simulators)))]
            for i, target in enumerate(t.targets)
        ]
        blocks += [
            result_.Heading(f"Several simulators ({t.language}, judge {t.judge})"),
            result_.Text(
                f"Each target's average (0-100) under each simulator (role-player), on the {t.cards} cards "
                "every cell played; 95% bootstrap intervals over those cards."
            ),
            result_.Table.of(["target", *t.simulators], rows),
        ]
        if t.left_out["targets"] or t.left_out["cards"]:
            missing = ", ".join(t.left_out["targets"]) or "none"
            blocks.append(
                result_.Text(
                    f"Left out: targets not played under every simulator: {missing}; "
                    f"{len(t.left_out['cards'])} cards missing from some cell."
                )
            )
    if not tables:
        return blocks

    def share(t: SimulatorTable, key: str) -> result_.Cell:
        value, interval = t.shares[key]
        e = estimate(value, interval, t.cards, "role card")
        return result_.Cell(format_estimate(e, 0, 100, suffix="%"), e)

    def w(t: SimulatorTable) -> result_.Cell:
        e = estimate(t.w, t.w_interval, t.cards, "role card")
        return result_.Cell(format_estimate(e, 2), e)

    return blocks + [
        result_.Heading("Several simulators: ranking stability"),
        result_.Text(
            "Variance of the cell means (sum of squares) split into targets, simulators and the rest "
            "(interaction and noise); Kendall's W of the simulators' rankings of the targets (1: the same "
            "order under every simulator) beside its chance level (the mean W of random rankings) and a "
            "permutation p; with 2 simulators and no ties W = (1 + Spearman's rho) / 2. 95% bootstrap "
            "intervals over the cards every cell played."
        ),
        result_.Table.of(
            [
                "judge",
                "language",
                *(f"share: {k}" for k in SHARES),
                "Kendall's W",
                "chance level",
                "permutation p",
                "simulators",
                "targets",
                "cards",
            ],
            [
                [
                    t.judge,
                    t.language,
                    *(share(t, k) for k in SHARES),
                    w(t),
                    f"{t.w_chance:.2f}",
                    _p(t.w_p),
                    len(t.simulators),
                    len(t.targets),
                    t.cards,
                ]
                for t in tables
            ],
            csv="simulators.csv",
            name="ranking stability",
        ),  # fmt: skip
    ]


def _cell(mean: float, interval: Interval, cards: int) -> result_.Cell:
    """A target's average under a simulator; n: the cards every cell played (resampled)."""
    e = estimate(mean, interval, cards, "role card")
    return result_.Cell(format_estimate(e, 1), e)


def _p(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3f}"
