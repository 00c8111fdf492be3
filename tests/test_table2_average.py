"""Table 2's Average is the mean of the seven dimension means, and nothing else (issue 52, items
1 and 2): a row lacking a dimension is n/a with the reason, never an average of six printed beside
averages of seven; a resample lacking a dimension is undefined, counted, never an average of fewer.
Expected values are computed here with numpy and the binomial law, apart from the toolkit."""

from __future__ import annotations

import numpy as np
import pytest

from esc.scoring.judge import INVALID, VALID
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord
from esc.tasks.score.leaderboard import leaderboard, leaderboard_blocks

CARDS = 10
RESAMPLES = 2000


def _records(target: str, score_of, valid_on) -> list[ScoreRecord]:
    """One dialogue per card; `score_of(card, dim)` its score, `valid_on(card, dim)` whether valid."""
    out = []
    for card in range(CARDS):
        for dim in DIMENSION_KEYS:
            ok = valid_on(card, dim)
            out.append(ScoreRecord(
                f"{target}__rp__en/{card}", dim, "en", "judge", {"style": "official", "version": 2},
                VALID if ok else INVALID, score_of(card, dim) if ok else None, target=target, roleplayer="rp",
                card_id=card,
            ))  # fmt: skip
    return out


def _score(card: int, dim: str) -> int:
    return (card * 3 + DIMENSION_KEYS.index(dim)) % 5


@pytest.fixture(scope="module")
def rows():
    records = [
        *_records("full", _score, lambda c, d: True),
        *_records("no_humanoid", _score, lambda c, d: d != "humanoid"),
        *_records("empathy_once", _score, lambda c, d: d != "empathy" or c == 0),
    ]
    return {r.target: r for r in leaderboard(records, RESAMPLES, seed=3)}


def test_a_full_row_averages_the_seven_dimension_means(rows) -> None:
    scores = np.array([[_score(c, d) for d in DIMENSION_KEYS] for c in range(CARDS)], dtype=float)
    expected = scores.mean(axis=0).mean() / 4 * 100
    average = rows["full"].average.estimate
    assert average.value == pytest.approx(expected) and average.undefined == 0.0


def test_a_row_lacking_a_dimension_is_n_a_with_the_reason(rows) -> None:
    average = rows["no_humanoid"].average.estimate
    assert average.value is None and "Humanoid" in average.note
    [table] = [b for b in leaderboard_blocks(list(rows.values())) if hasattr(b, "rows")][:1]
    [row] = [r for r in table.rows if r[1].text == "no_humanoid"]
    average_cell = row[table.columns.index("Average")]
    assert average_cell.text.startswith("n/a (no valid Humanoid judgment")
    # the six it has stay in their own columns, each a figure of its own
    assert row[table.columns.index("Empathy")].estimate.value is not None


def test_resamples_without_a_dimension_are_undefined_not_an_average_of_six(rows) -> None:
    """Empathy is valid on 1 card of 10: a resample misses that card with probability 0.9^10."""
    average = rows["empathy_once"].average.estimate
    missing = 0.9**CARDS  # 0.3487
    tolerance = 4 * np.sqrt(missing * (1 - missing) / RESAMPLES)  # binomial sd of the share, x4
    assert average.undefined == pytest.approx(missing, abs=tolerance)
    assert average.unstable and average.value is not None  # defined on all cards, unstable under resampling
    [table] = [b for b in leaderboard_blocks(list(rows.values())) if hasattr(b, "rows")][:1]
    [row] = [r for r in table.rows if r[1].text == "empathy_once"]
    text = row[table.columns.index("Average")].text
    assert text == f"n/a (undefined in {average.undefined:.1%} of resamples)"


def test_a_run_of_fewer_dimensions_labels_its_average_with_them() -> None:
    """A run of `dimensions=[empathy,overall]` averages those two, under a label that says so."""
    records = [r for r in _records("two", _score, lambda c, d: True) if r.dimension in ("empathy", "overall")]
    [row] = leaderboard(records, 200, seed=0)
    scores = np.array([[_score(c, d) for d in ("empathy", "overall")] for c in range(CARDS)], dtype=float)
    assert row.average.estimate.value == pytest.approx(scores.mean(axis=0).mean() / 4 * 100)
    table = leaderboard_blocks([row])[0]
    assert "Average (2 of 7: Empa., Over.)" in table.columns and "Average" not in table.columns


def test_table2s_note_names_the_unit_its_figures_resampled() -> None:
    """Issue 52: the note under Table 2 reads the unit from the figures (role cards where the records
    name their card, each dialogue where they do not), not from a sentence written beside them."""
    import dataclasses

    carded = _records("full", _score, lambda c, d: True)
    for records, unit in (
        (carded, "role card"),
        ([dataclasses.replace(r, card_id=None) for r in carded], "dialogue"),
    ):
        text = leaderboard_blocks(leaderboard(records, 50, seed=0))[1].text
        assert f"intervals resampled by {unit} (each with all its dialogues)" in text
