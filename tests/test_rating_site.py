"""The rating pages' files, their import, the sample of dialogues to rate, and the raters' agreement
(issue 39), without a browser (tests/test_rating_browser.py drives the pages)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from esc.annotate.human_scores import Annotation
from esc.annotate.rating_site import write_rating_site
from esc.annotate.tasks import (
    RATING_FORMAT,
    Payload,
    Task,
    export_tasks,
    import_labels,
    read_salt,
    read_tasks,
    sample_tasks,
    task_key,
)
from esc.errors import DataError
from esc.hashing import sha256_file
from esc.reports.result import Report
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.tasks.agreement.raters import alpha_text, people_blocks, rater_rows
from esc.tasks.agreement.report import Prediction


def _task(target: str, language: str, card: int) -> Task:
    lines = [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": f"card {card}"}]
    payload = {"card_id": card, "roleplayer": "rolebot", "target": target, "dialogue": lines}
    return Task(
        f"dialogue:{target}:rolebot:{language}:{card}", "dialogue", language, "text", Payload(**payload)
    )


@pytest.fixture()
def tasks_dir(tmp_path: Path) -> Path:
    tasks = [_task("alphabot", "en", 32025), _task("betabot", "en", 32025), _task("betabot", "zh", 10000)]
    export_tasks(tasks, tmp_path / "tasks")
    return tmp_path / "tasks"


def _page_data(index: Path) -> dict:
    html = index.read_text(encoding="utf-8")
    return json.loads(
        re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S).group(1)
    )


def test_the_pages_are_blind_and_carry_both_rubrics(tasks_dir: Path, tmp_path: Path) -> None:
    index = write_rating_site(tasks_dir, tmp_path / "rate")
    html = index.read_text(encoding="utf-8")
    for hidden in ("alphabot", "betabot", "rolebot", "dialogue:"):
        assert hidden not in html
    data = _page_data(index)
    keys = [item["key"] for item in data["items"]]
    assert keys == sorted(keys)  # not the export's order, which groups by target
    checksum = sha256_file(tasks_dir / "tasks.jsonl")
    assert set(keys) == {task_key(checksum, t, read_salt(tasks_dir)) for t in read_tasks(tasks_dir)}
    assert data["tasks_sha256"] == checksum
    assert list(data["rubrics"]["en"]) == list(DIMENSION_KEYS)
    assert data["rubrics"]["zh"]["fluency"]["title"].startswith("流畅性")
    assert len(data["rubrics"]["zh"]["overall"]["levels"]) == 5
    assert {i["language"] for i in data["items"]} == {"en", "zh"}
    assert all(i["card"] for i in data["items"])  # the released cards 32025 (en) and 10000 (zh)
    assert (tmp_path / "rate" / "rate.js").is_file() and (tmp_path / "rate" / "rate.css").is_file()


def _rating(checksum: str, task_id: str, rater: str, salt: str | None = None, **fields) -> dict:
    key = task_key(checksum, task_id, salt)
    record = {"format": RATING_FORMAT, "rater": rater, "task": key, "comment": "",
              "skipped": False, "rated_at": "2026-11-27T00:00:00Z", "tasks_sha256": checksum, "order_seed": 1,
              "scores": {k: 2 for k in DIMENSION_KEYS}}  # fmt: skip
    return {**record, **fields}


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_import_reads_the_pages_exports_and_refuses_a_changed_task_file(
    tasks_dir: Path, tmp_path: Path
) -> None:
    tasks = read_tasks(tasks_dir)
    checksum = sha256_file(tasks_dir / "tasks.jsonl")
    first, second, third = list(tasks)
    ana = _write(tmp_path / "ana.jsonl", [_rating(checksum, t, "ana") for t in (first, second, third)])
    skip = _rating(checksum, second, "ben", skipped=True, scores=None)
    ben = _write(tmp_path / "ben.jsonl", [_rating(checksum, first, "ben"), skip])
    skipped: Counter = Counter()
    labels = import_labels(tasks, [ana, ben], checksum, skipped=skipped)
    assert len(labels) == 4 * 7 and skipped == {"ben": 1}
    assert {(x.annotator, x.task_id) for x in labels if x.field == "empathy"} == {
        ("ana", first), ("ana", second), ("ana", third), ("ben", first)}  # fmt: skip

    with pytest.raises(DataError, match=r"ben.jsonl.*labelled twice \(also in the labels already imported\)"):
        import_labels(tasks, [ben], checksum, existing=labels)
    with pytest.raises(DataError, match=r"another task file"):
        import_labels(tasks, [ana], "0" * 64)  # the task file changed after the pages were made
    stray = _write(tmp_path / "stray.jsonl", [_rating(checksum, first, "ana", task="ffff")])
    with pytest.raises(DataError, match=r"stray.jsonl \[record line 1\]: task 'ffff' is none of"):
        import_labels(tasks, [stray], checksum)
    bad = _write(tmp_path / "bad.jsonl", [_rating(checksum, first, "ana", scores={"empathy": 7})])
    with pytest.raises(DataError, match=r"empathy: 7 is not one of"):
        import_labels(tasks, [bad], checksum)


def test_the_sample_takes_an_equal_share_of_each_target_and_language() -> None:
    tasks = [_task(t, lang, card) for t in ("a", "b", "c") for lang in ("en", "zh") for card in range(10)]
    picked = sample_tasks(tasks, 9, seed=0)
    counts = Counter((t.payload.target, t.language) for t in picked)
    assert sum(counts.values()) == 9 and set(counts.values()) == {1, 2}  # 6 strata: 3 get 2, 3 get 1
    assert counts[("a", "en")] == 2  # the remainder goes to the first strata in sorted order
    assert sample_tasks(tasks, 9, seed=0) == picked and sample_tasks(tasks, 9, seed=1) != picked
    small = [_task("a", "en", 1), *[_task("b", "en", c) for c in range(10)]]
    assert Counter(t.payload.target for t in sample_tasks(small, 6)) == {
        "a": 1,
        "b": 5,
    }  # a's unused share
    assert len(sample_tasks(tasks, 100)) == len(tasks)


def _annotations(scores: dict[str, list[int]]) -> list[Annotation]:
    """One dimension (empathy), dialogue i played from card i, each rater's scores by dialogue."""
    return [
        Annotation(f"d{i}", "en", (("user", "hi"),), "empathy", s, rater, input=f"en:{i}")
        for rater, values in scores.items()
        for i, s in enumerate(values)
    ]


def test_people_against_people_and_a_judge_against_each_person() -> None:
    people = {"ana": [0, 1, 2, 3, 4, 2], "ben": [0, 1, 2, 3, 4, 2]}
    judge = {(f"d{i}", "empathy"): Prediction(s) for i, s in enumerate([0, 1, 2, 3, 4, 2])}
    raters, rows = rater_rows(_annotations(people), {"tiny": judge}, 50, 0)
    assert raters == ["ana", "ben"] and [r.dimension for r in rows] == ["empathy"]
    assert rows[0].people.value == pytest.approx(1.0) and rows[0].people.n == 6
    assert rows[0].people.unit == "input"  # each dialogue's card (its input) resampled
    assert rows[0].judges[("tiny", "ana")].value == pytest.approx(1.0)

    people["ben"] = [4, 3, 2, 1, 0, 2]  # the opposite order: alpha well below 0
    judge[("d5", "empathy")] = Prediction(None)  # an invalid judgment: a gap, not a score
    raters, rows = rater_rows(_annotations(people), {"tiny": judge}, 50, 0)
    assert rows[0].people.value < 0 and rows[0].judges[("tiny", "ana")].n == 5
    table = Report("agreement", tuple(people_blocks(raters, rows, ["tiny"]))).to_markdown()
    assert "| Empathy |" in table and "tiny vs ben" in table and table.count("n=") == 3

    same = {"ana": [2, 2, 2], "ben": [2, 2, 2]}  # one value only: alpha is undefined, and says so
    _, rows = rater_rows(_annotations(same), {}, 50, 0)
    assert alpha_text(rows[0].people).startswith("n/a") and rows[0].people.n == 3


def test_the_cli_makes_pages_and_adds_a_raters_file(tasks_dir: Path, tmp_path: Path, capsys) -> None:
    from esc.cli import main as esc_main

    assert esc_main(["annotate", "site", str(tasks_dir), "--out", str(tmp_path / "rate"), "--seed", "3"]) == 0
    assert _page_data(tmp_path / "rate" / "index.html")["seed"] == 3
    checksum = sha256_file(tasks_dir / "tasks.jsonl")
    first, second, _ = list(read_tasks(tasks_dir))
    salt = read_salt(tasks_dir)
    ana = _write(tmp_path / "ana.jsonl", [_rating(checksum, first, "ana", salt)])
    ben = _write(
        tmp_path / "ben.jsonl",
        [_rating(checksum, first, "ben", salt), _rating(checksum, second, "ben", salt)],
    )
    labels = tmp_path / "labels.jsonl"
    assert esc_main(["annotate", "import", str(tasks_dir), str(ana), "--out", str(labels)]) == 0
    assert esc_main(["annotate", "import", str(tasks_dir), str(ben), "--out", str(labels), "--add"]) == 0
    out = capsys.readouterr().out
    assert "(added to its 7)" in out and "ana: 1 rated" in out and "ben: 2 rated" in out
    assert len(labels.read_text().splitlines()) == 3 * 7  # nothing of ana's overwritten
    with pytest.raises(SystemExit) as stopped:  # the same file again: refused, the labels kept
        esc_main(["annotate", "import", str(tasks_dir), str(ben), "--out", str(labels), "--add"])
    assert stopped.value.code == 2 and "labelled twice" in capsys.readouterr().err
    assert len(labels.read_text().splitlines()) == 3 * 7


def test_the_annotators_agreement_has_intervals_by_card() -> None:
    from esc.annotate.annotator_agreement import agreement
    from esc.annotate.tasks import Label
    from esc.tasks.agreement.raters import annotator_markdown, label_intervals

    scores = [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    labels = [Label(f"t{i}", "dialogue", who, "empathy", str(s)) for who in ("ana", "ben")
              for i, s in enumerate(scores)]  # fmt: skip
    units = {f"t{i}": f"card{i // 2}" for i in range(10)}  # two tasks per card: 5 units
    intervals = label_intervals(labels, units, 200, 0)["empathy"]
    alpha = intervals["krippendorff_alpha"]
    assert (alpha.low, alpha.high, alpha.undefined) == (1.0, 1.0, 0.0)  # the same scores: alpha 1 always
    table = annotator_markdown(agreement(labels), {"empathy": intervals}, "role card")
    assert "| empathy | 10 | 2 | 1.000 |" in table and "1.000 [1.000, 1.000]*" in table
    assert "resampled by role card (each with all its tasks)" in table

    disagree = [*labels[:10], *[Label(f"t{i}", "dialogue", "ben", "empathy", str(4 - s))
                                for i, s in enumerate(scores)]]  # fmt: skip
    alpha = label_intervals(disagree, units, 200, 0)["empathy"]["krippendorff_alpha"]
    assert alpha.high < 0  # the opposite scores: every resample below 0
