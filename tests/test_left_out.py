"""A figure carries its count of what it left out (issue 52, "What to build": the estimate carries
its unit, its n and what it left out): Table 2's invalid and failed columns and agreement's valid-item
figures read their counts from the figure, and the run log keeps them. Expected counts are tallied here
from the planted records, apart from the toolkit."""

from __future__ import annotations

from collections import Counter

from esc.reports.estimate import Estimate
from esc.reports.result import Report, read_result, result_path, write_result
from esc.scoring.judge import FAILED, INVALID, VALID
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord
from esc.tasks.agreement import report as agree
from esc.tasks.score.leaderboard import leaderboard, leaderboard_blocks


def _status(card: int, dim: str) -> str:
    i = DIMENSION_KEYS.index(dim)
    return FAILED if (card + i) % 7 == 0 else INVALID if (card * i) % 5 == 3 else VALID


def _records() -> list[ScoreRecord]:
    out = []
    for card in range(8):
        for dim in DIMENSION_KEYS:
            status = _status(card, dim)
            out.append(ScoreRecord(
                f"t__rp__en/{card}", dim, "en", "judge", {"style": "official", "version": 2}, status,
                card % 5 if status == VALID else None, target="t", roleplayer="rp", card_id=card,
            ))  # fmt: skip
    return out


def test_table2_cells_carry_the_judgments_they_left_out(tmp_path) -> None:
    records = _records()
    planted = Counter((r.dimension, r.status) for r in records)
    [row] = leaderboard(records, n_resamples=50, seed=0)
    for dim in DIMENSION_KEYS:
        e = row.cells[dim].estimate
        assert e.n == planted[dim, VALID]
        assert dict(e.left_out) == {INVALID: planted[dim, INVALID], FAILED: planted[dim, FAILED]}
    total = Counter(r.status for r in records)
    assert dict(row.average.estimate.left_out) == {INVALID: total[INVALID], FAILED: total[FAILED]}

    table = next(b for b in leaderboard_blocks([row]) if hasattr(b, "rows"))
    [cells] = table.rows
    assert cells[table.columns.index("invalid")].text == str(total[INVALID]) != "0"
    assert cells[table.columns.index("failed")].text == str(total[FAILED]) != "0"
    # the report file, and the run log built from it, keep the counts with each figure
    write_result(tmp_path, Report("leaderboard", (table,)))
    read_back = read_result(result_path(tmp_path, "leaderboard"))
    logged = [Estimate.from_json(e.to_json()) for e in read_back.estimates()]
    empathy = next(e for e in logged if dict(e.keys).get("column") == "Empathy")
    assert empathy.left(INVALID) == planted["empathy", INVALID]
    assert empathy.left(FAILED) == planted["empathy", FAILED]


def test_agreement_figures_over_common_items_say_which_items_they_left_out() -> None:
    human = [i % 5 for i in range(20)]
    items = [agree.Item((f"d{i}", "empathy"), h, f"d{i}") for i, h in enumerate(human)]
    own_invalid = {0, 1, 2}
    other_invalid = {2, 3, 4, 5, 6}  # item 2 is invalid in both rows: counted once, as the row's own
    judge = {it.key: agree.Prediction(None if i in own_invalid else it.human) for i, it in enumerate(items)}
    other = {it.key: agree.Prediction(None if i in other_invalid else it.human) for i, it in enumerate(items)}
    tables = agree.agreement_tables(items, {"judge": judge, "other": other}, n_resamples=50, seed=0)
    figures = Report("agreement", tuple(agree.every_figure(tables))).estimates()
    mine = {
        e.metric: e
        for e in figures
        if dict(e.keys).get("Judge") == "judge" and dict(e.keys).get("reading") == "argmax" and e.metric
    }
    qwk = mine["agreement.qwk"]
    assert qwk.n == 20 - len(own_invalid | other_invalid)
    assert dict(qwk.left_out) == {
        "invalid": len(own_invalid),
        "invalid in another row": len(other_invalid - own_invalid),
    }
    acc = mine["agreement.acc"]
    assert acc.n == 20 and acc.left_out == ()  # invalid counts as wrong: nothing left out
