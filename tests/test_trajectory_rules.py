"""The trajectory report reads its figures by the rules every report follows (issue 52, item 8): a
constant figure's interval says every resample agreed, and a one-card figure says why it has no
interval, as Table 2, safety and pairwise do."""

from __future__ import annotations

from esc.dialogues.trajectory import TrajectoryFigures
from esc.tasks.trajectory.report import Rated, target_rows, trajectory_report


def _rated(target: str, card: int, start: float, final: float) -> Rated:
    points = ((0, start), (1, final))
    figures = TrajectoryFigures(points, 1, 2, 0, 0, start, final, final - start, (start + final) / 2, None)
    return Rated("rp", target, "en", card, figures)


def test_a_constant_figure_and_a_one_card_figure_say_what_their_interval_is() -> None:
    rated = [
        *(_rated("steady", card, 40.0, 70.0) for card in (1, 2, 3)),  # change 30 on every card
        _rated("single", 9, 20.0, 60.0),  # one card: change 40
    ]
    report = trajectory_report(target_rows(rated, n_resamples=200, seed=0), [])
    [table] = [b for b in report.blocks if getattr(b, "name", None) == "targets"]
    change = table.columns.index("change")
    cells = {row[1].text: row[change] for row in table.rows}
    assert cells["steady"].text == "30.0 [30.0, 30.0]* (n=3)"
    assert cells["single"].text == "40.0 [no interval: one card] (n=1)"
    assert cells["single"].estimate.note == "one card" and cells["single"].estimate.low is None
    # the note above the table names what its figures resampled, read from them
    assert "[95% bootstrap interval resampled by role card] (n dialogues)" in report.blocks[0].text
