"""The report site in a real browser: headless Chromium (Playwright) opens index.html from disk
(file://), clicks through to a target and one of its dialogues, reads the scores the page shows, and
checks that model text is text (no alert runs). Screenshots go to the test's folder, and to
$ESC_SCREENSHOTS when it is set. Skipped, saying why, without Playwright or Chromium.

    .venv/bin/python -m pytest -q -m browser tests/test_report_browser.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from esc.reports.site import build_site, slugify
from esc.reports.site.synthetic import inject_text, synthetic_run
from esc.scoring.store import latest, read_scores

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
    rank = synthetic_run(tmp_path / "run", cards=6, targets=["alpha", "beta"], dims=7, seed=3, safety=True)
    target, language, card = inject_text(rank, INJECTION)
    build_site([rank], tmp_path / "site", title="Browser test", n_resamples=50)
    records = {}
    for path in (rank / "scores").glob("*.jsonl"):
        records.update(latest(read_scores(path)))

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    dialogs, errors = [], []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((tmp_path / "site" / "index.html").as_uri())
    assert page.title() == "Overview · Browser test"
    screenshot(page, tmp_path, "1-index")

    # the leaderboard sorts by a column when its header is clicked
    board = page.locator("#board")
    board.locator("th", has_text="Average").click()
    averages = [float(t.split()[0]) for t in board.locator("tbody td.avg").all_inner_texts()]
    assert averages == sorted(averages)
    board.locator("th", has_text="Average").click()
    assert [float(t.split()[0]) for t in board.locator("tbody td.avg").all_inner_texts()] == sorted(averages)[
        ::-1
    ]

    board.get_by_role("link", name=target).first.click()
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
    stem = f"{target}__esc_role__{language}"
    for key in DIMENSIONS:
        record = records[(f"{stem}/{card}", key)]
        shown = page.locator(f'tr[data-dimension="{key}"] td.score').inner_text().strip()
        assert shown == (str(record.score) if record.status == "valid" else record.status), key
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
