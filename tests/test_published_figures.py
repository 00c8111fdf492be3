"""Figures a paper would print, recomputed on planted inputs by an independent route (numpy, scipy):
issue 35's audit, one test per defect it found."""

from __future__ import annotations

import numpy as np
import pytest

from esc.reports import leaderboard as board
from esc.scoring.judge import VALID
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord


def scored(dialogue: str, card: int, dim: str, score: int, target: str = "bot") -> ScoreRecord:
    return ScoreRecord(dialogue, dim, "en", "judge", {"style": "official", "version": 2}, VALID, score,
                       target=target, roleplayer="rp", card_id=card)  # fmt: skip


def by_card_percentile_interval(per_card: list[np.ndarray], draws: int = 20000, seed: int = 7) -> tuple:
    """An independent by-card bootstrap: draw cards with replacement, pool all their dialogues' values."""
    rng = np.random.default_rng(seed)
    sums = np.asarray([v.sum() for v in per_card])
    counts = np.asarray([len(v) for v in per_card])
    drawn = rng.integers(0, len(per_card), size=(draws, len(per_card)))
    means = sums[drawn].sum(axis=1) / counts[drawn].sum(axis=1)
    return tuple(np.percentile(means, [2.5, 97.5]))


def test_table_2_resamples_cards_when_a_row_pools_several_dialogues_per_card() -> None:
    """Defect 1: two runs of the same 12 cards in one row (24 dialogues, the runs nearly equal per
    card). Table 2's interval is the by-card one, not ~30% narrower as a by-dialogue bootstrap is."""
    rng = np.random.default_rng(3)
    card_level = rng.integers(0, 5, size=12)
    records, values = [], []
    for card, level in enumerate(card_level):
        runs = [int(level), int(np.clip(level + (card % 5 == 0), 0, 4))]  # two runs, almost the same
        values.append(np.asarray(runs, dtype=float) / 4 * 100)
        for run, score in enumerate(runs):
            records += [scored(f"c{card}-r{run}", card, dim, score) for dim in DIMENSION_KEYS]
    [row] = board.leaderboard(records, n_resamples=4000, seed=0)
    cell, average = row.cells["empathy"], row.average
    low, high = by_card_percentile_interval(values)
    assert cell.n_valid == 24 and cell.mean == pytest.approx(np.concatenate(values).mean())
    width = high - low
    for got in (cell, average):  # every dimension scores the same here: the average equals a cell
        assert got.low == pytest.approx(low, abs=0.06 * width)
        assert got.high == pytest.approx(high, abs=0.06 * width)


# --- Bradley-Terry ----------------------------------------------------------------------------------


def judged_pairs(results: list) -> list:
    """Judged verdicts from (x, y, result, card): result x, y, "tie" or None (unread)."""
    from esc.reports.pairwise import Judged
    from esc.scoring.pairwise import Pair, Verdict

    out = []
    for x, y, result, card in results:
        pair = Pair("rp", "en", card, x, y, None, None)
        out.append(Judged(pair, "empathy", Verdict(result, result is not None, 1, 2)))
    return out


Plan = list[tuple[str, str, str | None, int]]


def independent_fit(targets: list[str], results: Plan, prior: float) -> dict:
    """Maximum likelihood by scipy: wins (a tie half each way) plus `prior` pseudo-wins each way."""
    from scipy.optimize import minimize

    index = {t: i for i, t in enumerate(targets)}
    wins = np.full((len(targets), len(targets)), prior)
    np.fill_diagonal(wins, 0.0)
    for x, y, result, _ in results:
        if result is None:
            continue
        share = 0.5 if result == "tie" else float(result == x)
        wins[index[x], index[y]] += share
        wins[index[y], index[x]] += 1 - share

    def negative_log_likelihood(free: np.ndarray) -> float:
        theta = np.concatenate([[0.0], free])
        diff = theta[:, None] - theta[None, :]
        return float(np.sum(wins * np.logaddexp(0.0, -diff)))

    start = np.zeros(len(targets) - 1)
    fit = minimize(negative_log_likelihood, start, method="BFGS", options={"gtol": 1e-10})
    theta = np.concatenate([[0.0], fit.x])
    return dict(zip(targets, theta - theta.mean(), strict=True))


def test_bradley_terry_leaves_out_a_target_without_a_valid_verdict() -> None:
    """Defect 2: a beats b on all 10 cards, d is never validly judged. With the stated prior (1
    pseudo-win each way) a's strength is log(11)/2 = 1.199, as a fit of a and b alone gives; d is n/a."""
    from esc.reports.pairwise import strengths

    results = [("a", "b", "a", c) for c in range(10)] + [("a", "d", None, c) for c in range(10)]
    got = {s.target: s for s in strengths(judged_pairs(results), n_resamples=0)}
    assert got["a"].theta == pytest.approx(np.log(11) / 2, abs=1e-6)
    assert got["a"].theta == pytest.approx(independent_fit(["a", "b"], results, 1.0)["a"], abs=1e-6)
    assert got["b"].theta == pytest.approx(-np.log(11) / 2, abs=1e-6)
    assert np.isnan(got["d"].theta) and got["d"].undefined == "no verdict"


def test_bradley_terry_prior_is_the_stated_pseudo_wins_with_three_targets() -> None:
    """Defect 3: with three targets, choix's `alpha` is not "1 pseudo-win each way"; the strengths are
    now the exact fit of the data plus those pseudo-wins (scipy, independently)."""
    from esc.reports.pairwise import strengths

    plan = [("a", "b", "a")] * 6 + [("a", "b", "b")] * 2 + [("a", "c", "a")] * 7 + [("a", "c", "tie")]
    plan += [("b", "c", "b")] * 4 + [("b", "c", "c")] * 3 + [("b", "c", "tie")] * 2
    results = [(x, y, r, card) for card, (x, y, r) in enumerate(plan)]
    expected = independent_fit(["a", "b", "c"], results, 1.0)
    got = {s.target: s.theta for s in strengths(judged_pairs(results), n_resamples=0)}
    for target in "abc":
        assert got[target] == pytest.approx(expected[target], abs=1e-6), target


# --- intervals at the boundary --------------------------------------------------------------------


def test_a_share_at_zero_gives_its_exact_interval_not_a_zero_width_one() -> None:
    """Defect 5: 0 flags in 24 replies on 8 cards was printed "0.0 [0.0, 0.0]%". The exact 95%
    upper bounds are 1 - 0.025^(1/8) = 36.9% by card and 1 - 0.025^(1/24) = 14.2% by reply."""
    from esc.reports.safety import _rate

    units = [("card", "en", c) for c in range(8) for _ in range(3)]
    rate = _rate([False] * 24, units, ["valid"] * 24, 1000, 0)
    by_card, by_reply = 100 * (1 - 0.025 ** (1 / 8)), 100 * (1 - 0.025 ** (1 / 24))
    cell = rate.cell()
    assert f"0.0-{by_card:.1f}% by card (8)" in cell and f"0.0-{by_reply:.1f}% by reply (24)" in cell
    assert "[0.0, 0.0]" not in cell and cell.startswith("0.0% [every resample 0.0; exact 95%")


def test_a_constant_judge_says_every_resample_agrees_instead_of_a_bare_interval() -> None:
    """Defect 5: a judge that always says 3 printed "75.00 [75.0, 75.0]" as if it were certain."""
    records = [scored(f"d{c}", c, dim, 3) for c in range(6) for dim in DIMENSION_KEYS]
    markdown = board.to_markdown(board.leaderboard(records, n_resamples=500))
    assert "75.00 [every resample 75.0]" in markdown and "[75.0, 75.0]" not in markdown
