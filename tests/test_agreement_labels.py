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


def test_a_breakdown_says_its_n_counts_the_units_it_resampled() -> None:
    """Issue 52, item 5: four English dialogues played from two role cards are n = 2 inputs."""
    from esc.reports.breakdown import annotation_facets
    from esc.tasks.agreement.breakdown import agreement_breakdown_blocks, agreement_breakdowns

    class Ann:  # what annotation_facets reads of an annotation
        def __init__(self, dialogue_id: str) -> None:
            self.dialogue_id, self.language = dialogue_id, "en"
            self.lines = (("user", "x"), ("assistant", "y")) * 3

    ids = ["e1", "e2", "e3", "e4"]
    for unit_of, n, word in ((lambda d: f"card{int(d[1]) // 3}", 2, "inputs"), (lambda d: d, 4, "dialogues")):
        items = [agree.Item((d, "empathy"), 3, unit_of(d)) for d in ids]
        rows = {"judge": {(d, "empathy"): agree.Prediction(3) for d in ids}}
        [language, _] = agreement_breakdowns(
            items, rows, annotation_facets([Ann(d) for d in ids]), min_n=2, n_resamples=0
        )
        assert [(c.value, c.n_units) for c in language.columns] == [("en", n)]
        text = Report("agreement", tuple(agreement_breakdown_blocks([language]))).to_markdown()
        assert f"en (n={n})" in text and f"n = {word} (the resampled unit)" in text


def test_an_acc_soft_of_100_percent_gets_its_exact_interval() -> None:
    """Issue 52, item 11: every resample giving 100% says nothing about how sure it is; the exact
    (Clopper-Pearson) 95% interval by unit does (the cell's, marked; issue 64), and by item (its
    note), as for safety and pairwise shares."""
    from scipy.stats import beta

    items = [agree.Item((f"d{i}", "empathy"), 2, f"card{i // 2}") for i in range(20)]  # 10 cards
    rows = {"judge": {it.key: agree.Prediction(3) for it in items}}  # always within 1: ACC_soft 100%
    tables = agree.agreement_tables(items, rows, n_resamples=100, seed=0)
    text = Report("agreement", tuple(agree.agreement_blocks(tables))).to_markdown()
    by_unit, by_item = beta.ppf(0.025, 10, 1), beta.ppf(0.025, 20, 1)  # exact lower ends at 10/10, 20/20
    assert f"100.0% [{100 * by_unit:.1f}, 100.0]\u2020" in text
    assert "\u2020 a share at 0% or 100%" in text and "exact (Clopper-Pearson) 95% interval by input" in text
    notes = [e.note or "" for e in Report("agreement", tuple(agree.agreement_blocks(tables))).estimates()]
    assert any(f"{100 * by_item:.1f}-100.0% by item (20)" in n for n in notes)
    assert agree.find_row(tables, "empathy", "judge", "argmax").values["acc"] == 0.0  # 0%: exact too
    assert f"0.0% [0.0, {100 * beta.ppf(0.975, 1, 10):.1f}]\u2020" in text


def test_the_console_names_each_judges_invalid_judgments() -> None:
    """Issue 52, item 11: the console listed only the first judge's invalid judgments, unnamed."""
    from esc.tasks.agreement.task import AgreementResult

    summary = AgreementResult(
        "OUT", "tables", {"j1": {"empathy": 2, "overall": 0}, "j2": {"empathy": 0}}
    ).summary()
    assert "invalid judgments of j1 by dimension: Empathy 2" in summary
    assert "invalid judgments of j2 by dimension: none" in summary
