"""Agreement's words about its intervals come from the figures (issue 52, items 3, 4 and 11): what
was resampled is read from the tables' and the raters' estimates, never written beside them."""

from __future__ import annotations

import numpy as np

from esc.annotate.annotator_agreement import Label
from esc.reports.estimate import Estimate
from esc.reports.result import Report
from esc.tasks.agreement import report as agree
from esc.tasks.agreement.raters import DimensionRow, label_unit, people_blocks


def _tables(by_card: bool):
    rng = np.random.default_rng(1)
    human = rng.integers(0, 5, 40).tolist()
    # two dialogues per card where the annotations name it (their input), else each its own unit
    items = [
        agree.Item((f"d{i}", "empathy"), h, f"card{i // 2}" if by_card else f"d{i}")
        for i, h in enumerate(human)
    ]
    judge = {
        it.key: agree.Prediction(min(4, h + int(rng.integers(0, 2))))
        for it, h in zip(items, human, strict=True)
    }
    other = {it.key: agree.Prediction(int(rng.integers(0, 5))) for it in items}
    return agree.agreement_tables(items, {"judge": judge, "other": other}, n_resamples=200, seed=0)


def test_the_tables_say_the_unit_their_intervals_resampled() -> None:
    for by_card, unit in ((True, "input"), (False, "dialogue")):
        tables = _tables(by_card)
        assert {t.unit for t in tables} == {unit}  # what the computation resampled...
        text = Report("agreement", tuple(agree.agreement_blocks(tables))).to_markdown()
        assert (
            f"paired bootstrap by {unit} (" in text and f"resampled by {unit}]" in text
        )  # ...is what it says
        assert "over dialogues" not in text and "dialogues resampled" not in text


def test_the_people_section_says_what_its_figures_resampled() -> None:
    def row(unit: str) -> DimensionRow:
        judged = {("j", r): Estimate(0.4, n=10, unit=unit) for r in ("ana", "ben")}
        return DimensionRow("empathy", Estimate(0.5, 0.2, 0.7, 10, unit), judged)

    for unit in ("role card", "dialogue"):
        text = Report("agreement", tuple(people_blocks(["ana", "ben"], [row(unit)], ["j"]))).to_markdown()
        assert f"95% intervals resampled by {unit};" in text
    assert (
        "resample role cards"
        not in Report("a", tuple(people_blocks(["ana"], [row("dialogue")], ["j"]))).to_markdown()
    )


def test_annotator_agreement_names_tasks_or_cards_as_the_labels_allow() -> None:
    labels = [Label(f"t{i}", "dialogue", who, "empathy", "3") for who in ("ana", "ben") for i in range(4)]
    assert label_unit(labels, None) == "task"
    assert label_unit(labels, {f"t{i}": f"en:{i // 2}" for i in range(4)}) == "role card"
    assert label_unit(labels, {"t0": "en:0"}) == "role card, else task"
