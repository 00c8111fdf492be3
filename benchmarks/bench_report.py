"""How long the report site of a paper-sized run takes to build, and how big its pages are.

    .venv/bin/python benchmarks/bench_report.py                       # 655 cards x 14 targets x 7 dimensions
    .venv/bin/python benchmarks/bench_report.py --cards 100 --targets 4 --browser   # + page loads in Chromium

A synthetic rank.py folder (`tests.synthetic_run.synthetic_run`: dialogue files with emotion
ratings, score files of the given size, random but well-formed, and the run log rank.py writes of
them, its leaderboard with 1,000 bootstrap resamples computed there, untimed) is written once, then
the site is built from it as `esc report` builds it (`build_site`, from the run log), timed
wall-clock, with the peak memory of this process. Prints the build time, the pages
written, the size of index.html and of the whole site; with `--browser`, the time headless Chromium
takes to open the overview and the largest target page (Playwright, the system browser). Targets:
under 3 minutes on 2 cores, index.html under 2 MB (issue 24). Figures: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from esc.site import build_site  # noqa: E402
from tests.synthetic_run import synthetic_run  # noqa: E402


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def browser_loads(site: Path) -> list[tuple[str, float]]:
    """Seconds to load the overview and the largest target page in headless Chromium."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return []
    pages = [site / "index.html", max((site / "targets").glob("*.html"), key=lambda p: p.stat().st_size)]
    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        page = browser.new_page()
        for path in pages:
            start = time.perf_counter()
            page.goto(path.as_uri(), wait_until="load")
            out.append((path.relative_to(site).as_posix(), time.perf_counter() - start))
        browser.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cards", type=int, default=655)
    parser.add_argument("--targets", type=int, default=14)
    parser.add_argument("--dims", type=int, default=7)
    parser.add_argument("--browser", action="store_true", help="also time page loads in headless Chromium")
    parser.add_argument("--out", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = parser.parse_args(argv)
    scratch = args.out or Path(tempfile.mkdtemp(prefix="esc-bench-report-"))
    start = time.perf_counter()
    rank = synthetic_run(scratch / "run", args.cards, args.targets, args.dims, seed=0)
    made = time.perf_counter() - start
    site = scratch / "site"
    shutil.rmtree(site, ignore_errors=True)
    result = build_site([rank], site)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{args.cards} cards x {args.targets} targets x {args.dims} dimensions "
        f"(synthetic run written in {made:.1f} s)"
    )
    print(
        f"build: {result.seconds:.1f} s, {sum(result.pages.values())} pages ({result.pages}), "
        f"peak memory {peak_mb:.0f} MB"
    )
    print(f"index.html: {result.index_bytes / 1024:.0f} kB; whole site: {folder_bytes(site) / 1e6:.0f} MB")
    for page, seconds in browser_loads(site) if args.browser else []:
        print(f"Chromium load {page}: {seconds:.2f} s")
    print(f"targets: build < 180 s: {'met' if result.seconds < 180 else 'MISSED'}; "
          f"index.html < 2 MB: {'met' if result.index_bytes < 2e6 else 'MISSED'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
