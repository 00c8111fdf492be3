"""People rate dialogues in a real browser (issue 39): headless Chromium (Playwright) opens the
rating pages from disk (file://), two raters rate 3 dialogues (one skips one), each exports a file,
`esc annotate import` reads both, and `rank.py mode=agreement` prints the raters' agreement with
each other and the tiny judge's with each. The test fails if a target's name or a judge's score is
visible on a rating page, or if Chinese is drawn as boxes. Skipped, saying why, without Playwright
or Chromium.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from esc.annotate.rating_site import write_rating_site
from esc.dialogues.record import Dialogue, Turn
from esc.reports.result import read_result
from tests.helpers import run_entry
from tests.test_report_browser import SAME_GLYPH, browser, screenshot  # noqa: F401 (a fixture)

pytestmark = pytest.mark.browser

TARGETS = ("alphabot", "betabot")
JUDGE_SCORE = "Score: 3/4"  # a judge's verdict nowhere on the pages: the test looks for it


def _dialogue_files(folder: Path) -> list[Path]:
    """3 complete dialogues: alphabot on two English cards, betabot on a Chinese one."""
    played = {
        "alphabot": [
            (32025, "en", ["I can't sleep before exams.", "That sounds exhausting. What keeps you up?",
                           "The fear of failing.", "Fear like that is common; let's plan the week."]),
            (32027, "en", ["My friend stopped talking to me.", "I'm sorry. Do you know why?",
                           "No idea.", "Maybe ask her gently what changed."]),
        ],
        "betabot": [(10000, "zh", ["我最近压力很大，睡不着。", "听起来你很辛苦。是什么让你担心？",
                                   "工作上的事情。", "我们可以一起想想怎么安排工作。"])],
    }  # fmt: skip
    files = []
    for target, dialogues in played.items():
        for language in {lang for _, lang, _ in dialogues}:
            lines = []
            for card, lang, texts in dialogues:
                if lang != language:
                    continue
                opener = "Hello, how can I help?" if lang == "en" else "你好，有什么可以帮你？"
                d = Dialogue(card, lang, "seeker", target, "sys", opener, None, status="complete")
                d.turns = [
                    Turn("roleplayer" if i % 2 == 0 else "target", t, "stop") for i, t in enumerate(texts)
                ]
                lines.append(json.dumps(d.to_dict(), ensure_ascii=False) + "\n")
            path = folder / target / "dialogues" / f"{target}__seeker__{language}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(lines), encoding="utf-8")
            files.append(path.parent.parent)
    return files


def _rate(context, index: Path, rater: str, skip_at: int | None, tmp_path: Path) -> Path:
    """Rate every dialogue as `rater` with the keyboard (the `skip_at`-th skipped), then export."""
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(index.as_uri())
    page.fill("#rater", rater)
    page.click("#start")
    for n in range(3):
        text = page.inner_text("body")
        for name in TARGETS:
            assert name not in text, f"the target {name!r} is visible on a rating page"
        assert JUDGE_SCORE not in text and "tiny" not in text
        assert page.locator("#position").inner_text() == f"{n + 1} of 3"
        if n == skip_at:
            page.keyboard.press("s")
            continue
        if "求助者" in text:  # the Chinese dialogue: the rubric in Chinese, drawn with a CJK font
            assert "流畅性" in text
            for a, b in (("流", "畅"), ("求", "助")):
                assert not page.evaluate(SAME_GLYPH, [a, b]), f"{a!r} and {b!r} are drawn as boxes"
            screenshot(page, tmp_path, f"rate-zh-{rater}")
        else:
            assert "Fluency" in text and "logical coherence" in text
        for score in "3213421":  # one key per dimension, top to bottom
            page.keyboard.press(score)
        page.fill("#comment", f"{rater} on dialogue {n + 1}")
        page.locator("#rating-box h2").click()  # leave the comment box: the keys act on the page again
        if n == 0:
            screenshot(page, tmp_path, f"rate-{rater}")
        page.keyboard.press("Enter")
    assert page.locator("#done").is_visible()
    assert re.search(r"\d rated, \d skipped, of 3", page.inner_text("#progress"))
    with page.expect_download() as download:
        page.keyboard.press("e")
    path = tmp_path / f"ratings-{rater}.jsonl"
    download.value.save_as(path)
    assert errors == []
    page.close()
    return path


def test_two_raters_rate_export_import_and_agreement_reads_them(browser, tmp_path: Path) -> None:  # noqa: F811
    runs = _dialogue_files(tmp_path / "evaluate")
    tasks = tmp_path / "tasks"
    exported = run_entry(
        "-m", ["esc", "annotate", "export", "dialogue", "--dialogues", *map(str, runs), "--out", str(tasks)]
    )
    assert exported.returncode == 0, exported.stderr
    index = write_rating_site(tasks, tmp_path / "rate", seed=7)
    assert not any(name in index.read_text(encoding="utf-8") for name in TARGETS)  # not even in the source

    files = []
    for rater, skip_at in (("ana", None), ("ben", 1)):
        context = browser.new_context(accept_downloads=True, viewport={"width": 1400, "height": 1000})
        files.append(_rate(context, index, rater, skip_at, tmp_path))
        context.close()
    records = {f.stem: [json.loads(x) for x in f.read_text().splitlines()] for f in files}
    assert len(records["ratings-ana"]) == 3 and sum(r["skipped"] for r in records["ratings-ben"]) == 1
    dims = ["fluency", "diversity", "empathy", "suggestion", "humanoid", "skill", "overall"]
    assert records["ratings-ana"][0]["scores"] == dict(zip(dims, [3, 2, 1, 3, 4, 2, 1], strict=True))
    assert {r["order_seed"] for r in records["ratings-ana"]} != {
        r["order_seed"] for r in records["ratings-ben"]
    }

    labels = tmp_path / "labels.jsonl"
    imported = run_entry(
        "-m", ["esc", "annotate", "import", str(tasks), *map(str, files), "--out", str(labels)]
    )
    assert imported.returncode == 0, imported.stderr
    assert "ana: 3 rated" in imported.stdout and "ben: 2 rated, 1 skipped" in imported.stdout
    people = tmp_path / "people.jsonl"
    converted = run_entry(
        "-m", ["esc", "annotate", "to-esc-rank", str(labels), "--tasks", str(tasks), "--out", str(people)]
    )
    assert converted.returncode == 0, converted.stderr
    agreement = run_entry("rank.py", [
        "mode=agreement", "judge=tiny", f"agreement.annotations={people}", "agreement.split=all",
        "agreement.baselines=false", "agreement.bootstrap=20", "leaderboard.breakdowns=false",
        "scoring.progress=false", "cache=off", f"hydra.run.dir={tmp_path / 'agree'}",
    ], timeout=300)  # fmt: skip
    assert agreement.returncode == 0, agreement.stderr[-2000:]
    out = agreement.stdout
    assert "people (alpha between raters)" in out and "tiny vs ana" in out and "tiny vs ben" in out
    row = next(line for line in out.splitlines() if line.startswith("| Fluency |"))
    assert row.count("n=") == 3  # the raters, the judge against each
    [table] = [
        t for t in read_result(tmp_path / "agree" / "agreement.result.json").tables()
        if t.name == "people against people"
    ]  # fmt: skip
    assert table.columns[2:] == ("tiny vs ana", "tiny vs ben")  # the raters, in order
    fluency = dict(zip(table.columns, next(r for r in table.rows if r[0].text == "Fluency"), strict=True))
    assert fluency["people (alpha between raters)"].n == 2  # the dialogues both rated
    assert fluency["tiny vs ana"].n == 3
    with (tmp_path / "agree" / "rater_agreement.csv").open() as fh:
        assert next(r for r in csv.DictReader(fh) if r["Dimension"] == "Fluency")["tiny vs ana n"] == "3"
