"""Parity with the paper's own normalisation (issue 52): a Table 2 cell is 100 x sum(scores) /
(4 x N), N the high-quality cards of the language (331 en, 324 zh), and the Average the mean of the
seven. Published rows (paper, Table 2) are rebuilt from the integer sums that give them, through
the toolkit's leaderboard, to two decimals."""

from __future__ import annotations

import pytest

from esc.scoring.judge import VALID
from esc.scoring.rubrics import TABLE_2_ORDER
from esc.scoring.store import ScoreRecord
from esc.tasks.score.leaderboard import leaderboard, leaderboard_blocks

CARDS = {"en": 331, "zh": 324}
#: (language, model): the seven published cells in Table 2's order, then the Average
PUBLISHED = {
    ("en", "GPT-4"): ["74.32", "71.68", "71.22", "73.72", "74.92", "36.40", "44.18", "63.78"],
    ("en", "EmoLLM"): ["36.56", "68.96", "70.85", "71.45", "74.47", "65.26", "46.53", "62.01"],
    ("zh", "EmoLLM"): ["78.09", "71.45", "74.77", "73.15", "78.63", "68.67", "57.10", "71.69"],
}


def _records(language: str, model: str, sums: list[int]) -> list[ScoreRecord]:
    """One dialogue per card, its 0-4 scores spread so each dimension's sum is `sums[i]`."""
    n = CARDS[language]
    out = []
    for dim, total in zip(TABLE_2_ORDER, sums, strict=True):
        q, r = divmod(total, n)
        for card in range(n):
            score = q + (card < r)
            out.append(ScoreRecord(
                f"{model}__rp__{language}/{card}", dim, language, "people", {"style": "official"}, VALID,
                score, target=model, roleplayer="rp", card_id=card,
            ))  # fmt: skip
    return out


@pytest.mark.parametrize(("language", "model"), sorted(PUBLISHED))
def test_published_rows_come_back_from_their_integer_sums(language: str, model: str) -> None:
    cells = PUBLISHED[(language, model)]
    n = CARDS[language]
    sums = [round(float(p) * 4 * n / 100) for p in cells[:7]]
    assert [f"{100 * s / (4 * n):.2f}" for s in sums] == cells[:7]  # each cell is an integer sum / 4N
    [row] = leaderboard(_records(language, model, sums), n_resamples=0)
    [table] = [b for b in leaderboard_blocks([row]) if hasattr(b, "rows")][:1]
    shown = [c.text for c in table.rows[0][3:11]]
    assert shown == cells  # the seven, then the Average (the mean of the seven), to two decimals
