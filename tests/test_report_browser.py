"""The report site in a real browser: headless Chromium (Playwright) opens index.html from disk
(file://), sorts the leaderboard's headline table, clicks through to a target and one of its
dialogues, reads the answers the page shows against the run log, and checks that model text is text
(no alert runs); every chart renders and its points, read back from where they are drawn, are the
figures of its table's CSV. Screenshots go to the test's folder, and to
$ESC_SCREENSHOTS when it is set. Skipped, saying why, without Playwright or Chromium.

    .venv/bin/python -m pytest -q -m browser tests/test_report_browser.py
"""

from __future__ import annotations

import csv
import itertools
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from esc.reports.runlog import read_run_log
from esc.site import build_site, slugify
from tests.synthetic_run import inject_text, synthetic_run

pytestmark = pytest.mark.browser

INJECTION = "<script>alert(1)</script>"
DIMENSIONS = ("fluency", "diversity", "empathy", "suggestion", "skill", "humanoid", "overall")
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def chromium() -> str | None:
    """A Chromium to drive: $ESC_CHROMIUM, a system one, else Playwright's own (None: use it)."""
    for path in (os.environ.get("ESC_CHROMIUM"), *CHROMIUM):
        if path and Path(path).is_file():
            return path
    return None


@pytest.fixture()
def browser():
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright)")
    with sync_playwright() as p:
        try:
            launched = p.chromium.launch(executable_path=chromium(), headless=True, args=["--no-sandbox"])
        except Error as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            pytest.skip(
                f"no Chromium to launch (install chromium, or `playwright install chromium`): {first}"
            )
        try:
            yield launched
        finally:
            launched.close()


def screenshot(page, tmp_path: Path, name: str) -> None:
    path = tmp_path / "screenshots" / f"{name}.png"
    path.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    wanted = os.environ.get("ESC_SCREENSHOTS")
    if wanted:
        Path(wanted).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(wanted) / path.name)


def test_click_from_the_overview_to_a_dialogue_and_read_its_scores(browser, tmp_path: Path) -> None:
    rank = synthetic_run(
        tmp_path / "run", cards=6, targets=["alpha", "beta"], dims=7, seed=3, safety=True, bootstrap=50
    )
    target, language, card = inject_text(rank, INJECTION)
    build_site([rank], tmp_path / "site", title="Browser test")
    judgments = read_run_log(rank).by_dialogue()

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    dialogs, errors = [], []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((tmp_path / "site" / "index.html").as_uri())
    assert page.title() == "Overview · Browser test"
    screenshot(page, tmp_path, "1-index")

    # the leaderboard (its report's first table) sorts by a column's figures when its header is clicked
    board = page.locator('[data-report="leaderboard"] table').first
    column = board.locator("thead th").all_inner_texts().index("Average") + 1
    cells = board.locator(f"tbody td:nth-child({column})")

    def figures() -> list[float | None]:  # an n/a Average has no value (issue 62): it sorts last
        return [None if v is None else float(v) for v in (c.get_attribute("data-value") for c in cells.all())]

    board.locator("th", has_text="Average").click()
    averages = figures()
    shown = [v for v in averages if v is not None]
    assert len(averages) == 4 and averages == [*sorted(shown), *[None] * (4 - len(shown))]
    board.locator("th", has_text="Average").click()
    assert figures() == [*sorted(shown)[::-1], *[None] * (4 - len(shown))]

    page.locator("#targets").get_by_role("link", name=target).click()
    assert page.url.endswith(f"targets/{slugify(target)}.html")
    rows = page.locator("#dialogues tbody tr")
    assert rows.count() == 6
    first = [float(x) for x in page.locator("#dialogues tbody td.avg").all_inner_texts() if x != "n/a"]
    assert first == sorted(first)  # worst first
    page.locator("#order").click()
    best = [float(x) for x in page.locator("#dialogues tbody td.avg").all_inner_texts() if x != "n/a"]
    assert best == sorted(first)[::-1]
    page.select_option("select[data-filter=language]", language)
    visible = page.locator("#dialogues tbody tr:visible")
    assert 0 < visible.count() < 6
    assert page.locator("#shown").inner_text() == f"{visible.count()} of 6 dialogues shown"
    screenshot(page, tmp_path, "2-target")

    page.get_by_role("link", name=f"{language}-{card}", exact=True).click()
    assert page.url.endswith(f"dialogues/{slugify(target)}/{language}-{card}.html")
    logged = {j.key: j for j in judgments[f"{target}__esc_role__{language}/{card}"] if j.task == "score"}
    for key in DIMENSIONS:
        shown = page.locator(f'table[data-task="score"] tr[data-key="{key}"] td.answer').inner_text().strip()
        assert shown == (logged[key].answer if logged[key].status == "valid" else logged[key].status), key
    assert page.locator('.bubble .judged[data-task="safety"]').count() == 5  # beside each reply
    # model text is shown as text, and nothing it holds runs
    assert page.get_by_text(f"I hear you. {INJECTION} & more").count() == 1
    assert page.get_by_text(f"Score: {INJECTION}").count() == 1
    page.wait_for_timeout(200)
    assert dialogs == [] and errors == []
    screenshot(page, tmp_path, "3-dialogue")

    page.get_by_role("link", name="Side by side with the other targets on this card").click()
    assert page.locator("section.column").count() == 2
    page.locator("#columns input").first.uncheck()
    assert page.locator("section.column:visible").count() == 1
    screenshot(page, tmp_path, "4-compare")
    assert dialogs == [] and errors == []


#: draws two characters on a canvas in the page's font: equal pixels mean they were drawn as the same
#: glyph, which for two different characters is the missing-glyph box
SAME_GLYPH = """([a, b]) => {
  const canvas = document.createElement('canvas');
  canvas.width = 60; canvas.height = 60;
  const g = canvas.getContext('2d');
  const draw = (t) => {
    g.clearRect(0, 0, 60, 60);
    g.font = '40px ' + getComputedStyle(document.body).fontFamily;
    g.fillText(t, 4, 46);
    return g.getImageData(0, 0, 60, 60).data.join(',');
  };
  return draw(a) === draw(b);
}"""


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_board_fits_the_screen_and_chinese_is_drawn_not_boxes(browser, tmp_path: Path, width: int):
    """Issue 37: at 1400 px the Average was cut mid-number and n, invalid and failed were off-screen;
    Chinese text rendered as boxes without a CJK font. The overview, a target page and a Chinese
    dialogue at 1280 and 1920 px (the screenshots in docs/img come from here)."""
    targets = ["Qwen1.5-72B-Chat", "LLaMA3-8B-Instruct", "ChatGLM3-6B", "gpt4"]
    rank = synthetic_run(tmp_path / "run", cards=8, targets=targets, dims=7, seed=5, bootstrap=50)
    build_site([rank], tmp_path / "site", title="ESC-Eval report")
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto((tmp_path / "site" / "index.html").as_uri())
    board = '[data-report="leaderboard"] table'
    heads = page.locator(f"{board} thead th").all_inner_texts()
    for name in ("Target", "n", "invalid", "failed", "Average"):
        box = page.locator(f"{board} thead th").nth(heads.index(name)).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (name, box)
    for cell in page.locator(f"{board} tbody td:nth-child({heads.index('Average') + 1})").all():
        box = cell.bounding_box()  # the Average is whole, not cut
        assert box is not None and box["x"] + box["width"] <= width
    fits = f"() => {{ const s = document.querySelector('{board}').parentElement; "
    fits += "return s.scrollWidth <= s.clientWidth; }"
    assert page.evaluate(fits)  # the whole board, every dimension, with no scrolling
    screenshot(page, tmp_path, f"report-overview-{width}")

    page.locator("#targets").get_by_role("link", name="Qwen1.5-72B-Chat").click()
    summary = page.locator("#results table").first.locator("tbody tr")  # its rows of the leaderboard
    assert (
        summary.count() == 2 and "[" in summary.first.locator("td").nth(heads.index("Average")).inner_text()
    )
    assert summary.first.locator("td").nth(heads.index("n")).inner_text() == "4"  # n: 4 English dialogues
    screenshot(page, tmp_path, f"report-target-{width}")
    page.select_option("select[data-filter=language]", "zh")
    page.locator("#dialogues tbody tr:visible a").first.click()
    assert "/zh-" in page.url
    chinese = page.get_by_text(re.compile("[\u4e00-\u9fff]{2,}")).first  # the card, the turns
    assert chinese.is_visible()
    characters = sorted(set(re.findall("[\u4e00-\u9fff]", chinese.inner_text())))
    assert len(characters) >= 2
    for a, b in itertools.pairwise(characters):  # all alike: the missing-glyph box (`make browser`)
        assert not page.evaluate(SAME_GLYPH, [a, b]), f"{a!r} and {b!r} are drawn as boxes: no CJK font"
    assert page.evaluate(SAME_GLYPH, ["\u0378", "\u0379"])  # the check can fail: characters no font has
    screenshot(page, tmp_path, f"report-dialogue-zh-{width}")


#: each chart point where it is drawn, in screen pixels along the axis holding its value: its
#: marker's centre, its interval's ends, and the tick marks of its own axes with their labels
DRAWN = """(svg) => {
  const centre = (el, axis) => { const r = el.getBoundingClientRect();
    return axis === 'x' ? r.left + r.width / 2 : r.top + r.height / 2; };
  return [...svg.querySelectorAll('g.point')].map(g => {
    const axis = g.dataset.axis, axes = g.parentElement.closest('g[id*="axes_"]');
    const ticks = [...axes.querySelectorAll(`g[id*="${axis}tick_"]`)]
      .map(t => [t.querySelector('use'), t.querySelector('text')])
      .filter(([mark, label]) => mark && label && label.textContent.trim() !== '')
      .map(([mark, label]) => [centre(mark, axis), label.textContent]);
    const path = g.querySelector('path'), r = path && path.getBoundingClientRect();
    const ends = !path ? null : axis === 'x' ? [r.left, r.right] : [r.bottom, r.top];
    const at = centre(g.querySelector('use'), axis);
    return { row: +g.dataset.row, column: g.dataset.column, ticks, ends, at };
  });
}"""


#: the smallest text of a chart as drawn on screen, in CSS pixels, and whether its box scrolls
TEXT_SIZE = """(svg) => {
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  const sizes = [...svg.querySelectorAll('text')].map(t => parseFloat(getComputedStyle(t).fontSize) * scale);
  const box = svg.parentElement;
  return { smallest: Math.min(...sizes), scrolls: box.scrollWidth > box.clientWidth,
           inside: box.getBoundingClientRect().right <= document.documentElement.clientWidth + 0.5 };
}"""


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_the_charts_draw_the_figures_of_their_csv_and_fetch_nothing(browser, tmp_path: Path) -> None:
    """Issue 64: every chart the overview and the report pages show renders, and each point drawn,
    read back from its position against its axis's ticks, is the figure its table's CSV holds (its
    value, low and high, within 5% of a tick's step); each n/a is a gap. At a phone's width the
    charts' text stays readable (at least 8 px), their box scrolling sideways where the chart is
    wider than the screen. Nothing is fetched from the network."""
    targets = ["Qwen1.5-72B-Chat", "LLaMA3-8B-Instruct", "ChatGLM3-6B", "gpt4"]
    rank = synthetic_run(
        tmp_path / "run", cards=8, targets=targets, dims=7, seed=5, bootstrap=50, trajectory_report=True
    )
    build_site([rank], tmp_path / "site", title="ESC-Eval report")
    logged = read_run_log(rank)
    charted = {kind for kind, r in logged.reports.items() for b in r["blocks"] if b.get("chart")}
    assert "trajectory" in charted
    pages = ["index.html", *(f"runs/{p.name}" for p in sorted((tmp_path / "site" / "runs").glob("*.html")))]

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    checked = 0
    for name in pages:
        page.goto((tmp_path / "site" / name).as_uri())
        figures = page.locator("figure.chart")
        if name == "index.html":  # every report's lead that declares a chart draws it on the overview
            leads = {
                kind for kind, r in logged.reports.items()
                if (b := next((b for b in r["blocks"] if b["type"] == "table"), None)) and b.get("chart")
            }  # fmt: skip
            shown = page.locator("section.headline:has(figure.chart)").evaluate_all(
                "els => els.map(e => e.dataset.report)"
            )
            assert leads and set(shown) == leads
        for f in range(figures.count()):
            figure = figures.nth(f)
            table_id = figure.get_attribute("data-table")
            assert page.locator(f"table#{table_id}").count() == 1  # the numbers beside it, linked
            assert figure.locator(f'figcaption a[href="#{table_id}"]').count() == 1
            rows = _csv_rows(rank / figure.get_attribute("data-csv"))
            points, gaps = set(), set()
            for svg in figure.locator("svg").all():
                box = svg.bounding_box()
                assert box is not None and box["width"] > 50 and box["height"] > 50  # it renders
                for point in svg.evaluate(DRAWN):
                    row = rows[point["row"]]
                    pixels, values = zip(*((p, float(v)) for p, v in point["ticks"]), strict=True)
                    slope, intercept = np.polyfit(pixels, values, 1)  # pixels to values, by the ticks
                    tolerance = 0.05 * abs(values[1] - values[0])  # a twentieth of a tick's step
                    expected = {k: row[f"{point['column']} {k}"] for k in ("value", "low", "high")}
                    drawn = slope * point["at"] + intercept
                    assert drawn == pytest.approx(float(expected["value"]), abs=tolerance)
                    if expected["low"] and expected["high"]:
                        ends = sorted(slope * p + intercept for p in point["ends"])
                        interval = [float(expected["low"]), float(expected["high"])]
                        assert ends == pytest.approx(interval, abs=tolerance)
                    points.add((point["row"], point["column"]))
                gaps |= {
                    (int(g.get_attribute("data-row")), g.get_attribute("data-column"))
                    for g in svg.locator("g.na").all()
                }
            columns = {c for _, c in points | gaps}
            # a point for each figure of the CSV, a gap for each blank (an n/a), nothing else
            assert points == {(i, c) for i, r in enumerate(rows) for c in columns if r[f"{c} value"]}
            assert not points & gaps
            checked += len(points)
    assert checked >= 4 + 4 + 4 * 6  # the trajectory's changes (overview and page) and its curves at least
    assert fetched == []

    phone = browser.new_page(viewport={"width": 390, "height": 800})
    for name in pages:
        phone.goto((tmp_path / "site" / name).as_uri())
        for svg in phone.locator("figure.chart svg").all():
            seen = svg.evaluate(TEXT_SIZE)
            assert seen["smallest"] >= 8 and seen["inside"], (name, seen)
    screenshot(phone, tmp_path, "report-trajectory-390")


@pytest.mark.parametrize("width", [1280])
def test_the_leaderboard_and_the_stress_card_pages_draw_their_charts(browser, tmp_path: Path, width: int):
    """Issue 64: the leaderboard's report page draws Table 2 per dimension and the paired differences
    as a forest plot (a line at 0), and the stress card draws each change with its tolerance band;
    the screenshots in docs/img (`ESC_SCREENSHOTS=docs/img`) come from here."""
    from tests.test_stress import CARDS, _dialogue, _jury_run, _write

    targets = ["Qwen1.5-72B-Chat", "LLaMA3-8B-Instruct", "ChatGLM3-6B", "gpt4"]
    rank = synthetic_run(tmp_path / "run", cards=8, targets=targets, dims=7, seed=5, bootstrap=200)
    folder = _write(tmp_path / "eval", [_dialogue(c) for c in range(CARDS)])
    stress = tmp_path / "stress"
    _jury_run(stress, folder, {"ideal": {"behaviour": "ideal"}, "length": {"behaviour": "length"}})
    build_site([rank, stress], tmp_path / "site", title="ESC-Eval report")
    page = browser.new_page(viewport={"width": width, "height": 900})
    runs = tmp_path / "site" / "runs"

    [board] = runs.glob("*-leaderboard.html")
    page.goto(board.as_uri())
    titles = page.locator("figure.chart figcaption .title[lang=en]").all_inner_texts()
    assert any(t.startswith("Scores (0-100)") for t in titles)
    assert any("Paired differences" in t for t in titles)
    forest = page.locator("figure.chart").filter(has_text="Paired differences").first
    assert forest.locator("g.point").count() == 6 * 8 * 2  # 6 pairs of 4 targets x 8 columns x 2 languages
    assert forest.locator('[id*="esc-ref-"]').count() >= 1  # the line at 0
    screenshot(page, tmp_path, f"report-leaderboard-{width}")

    [card] = runs.glob("*-stress.html")
    page.goto(card.as_uri())
    chart = page.locator("figure.chart").first
    assert chart.locator("g.point").count() > 0 and chart.locator('[id*="esc-band-"]').count() > 0
    assert chart.locator("svg").first.bounding_box()["width"] > 300
    screenshot(page, tmp_path, f"report-stress-{width}")
