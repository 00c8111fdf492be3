"""Does a new report site show every figure an old one did? A check for a change to the site (or to
the reports it shows) that must keep the numbers while it moves them.

    .venv/bin/python benchmarks/compare_sites.py OLD_SITE NEW_SITE [--strict]

For each page in both sites (by path under the site), every figure shown: the `data-value`,
`data-low`, `data-high` and `data-n` attributes, and the numbers in table cells' text (`<td>`),
after timestamps, dates, absolute paths and hashes are masked (a rebuild changes them, and their
digits are not figures). An old figure is found on the new page when a new one reads the same at
the old one's decimals (a figure shown as "62.50" is found as data-value="62.5012"); each new figure
is used once. Prints per page how many figures were compared and the old figures not found (with
the text they stood in), and the pages only in one site. Exit 1 when an old figure is not found
(--strict: or a page's figures differ in either direction), else 0.
"""

from __future__ import annotations

import argparse
import html
import math
import re
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

MASKS = (
    re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([+-]\d{2}:\d{2}|Z| UTC)?"),  # times
    re.compile(r"\d{4}-\d{2}-\d{2}"),  # dates
    re.compile(r"(?<![\w.])/(?:[\w.+@~-]+/)+[\w.+@~-]*"),  # absolute paths
    re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,}\b"),  # commits, digests
    re.compile(r"sha256:\S+"),
)
ATTRIBUTE = re.compile(r'data-(value|low|high|n)="([^"]*)"')
CELL = re.compile(r"<td\b[^>]*>(.*?)</td>", re.S)
TAG = re.compile(r"<[^>]+>")
NUMBER = re.compile(r"(?<![\w.-])-?\d+(?:\.(\d+))?(?![\w.])")


class Figure:
    """A number as a page shows it: its value, its decimals (None: an attribute, all its digits)
    and where it stood."""

    def __init__(self, value: float, decimals: int | None, context: str) -> None:
        self.value, self.decimals, self.context = value, decimals, context

    def reads_as(self, other: Figure) -> bool:
        """Whether `other` shows this figure: equal at this figure's decimals (an attribute: to 6
        significant digits, as the site writes it)."""
        if self.decimals is None:
            return math.isclose(self.value, other.value, rel_tol=1e-5, abs_tol=1e-9)
        return abs(round(other.value, self.decimals) - self.value) <= 0.5 * 10.0**-self.decimals + 1e-9


def masked(text: str) -> str:
    for mask in MASKS:
        text = mask.sub("#", text)
    return text


def figures(page: Path) -> list[Figure]:
    text = masked(page.read_text(encoding="utf-8"))
    out = [Figure(float(v), None, f"data-{k}") for k, v in ATTRIBUTE.findall(text) if _number(v)]
    for cell in CELL.findall(text):
        shown = " ".join(html.unescape(TAG.sub(" ", cell)).split())
        for match in NUMBER.finditer(shown):
            out.append(Figure(float(match.group(0)), len(match.group(1) or ""), shown[:80]))
    return out


def _number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def unmatched(old: list[Figure], new: list[Figure]) -> tuple[list[Figure], list[Figure]]:
    """The old figures no new one shows, and the new figures left over; each new figure used once:
    first for the same attribute value or the same text, then for an old figure it rounds to."""
    buckets: dict[int, list[int]] = defaultdict(list)
    for i, f in enumerate(new):
        buckets[math.floor(f.value)].append(i)
    used = [False] * len(new)

    def take(f: Figure, fits: Callable[[Figure], bool]) -> bool:
        base = math.floor(f.value)
        for i in (i for b in (base, base - 1, base + 1) for i in buckets.get(b, ())):
            if not used[i] and fits(new[i]):
                used[i] = True
                return True
        return False

    left = [
        f
        for f in old  # the same figure: an attribute's value, or a cell's text as written
        if not take(f, lambda g, f=f: g.decimals == f.decimals and f.reads_as(g))
    ]
    missing = [f for f in left if not take(f, f.reads_as)]  # a figure shown at fewer decimals
    return missing, [f for f, u in zip(new, used, strict=True) if not u]


def pages(site: Path) -> set[str]:
    return {p.relative_to(site).as_posix() for p in site.rglob("*.html")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="the site built before the change")
    parser.add_argument("new", type=Path, help="the site built after it")
    parser.add_argument(
        "--strict", action="store_true", help="a figure only on the new page is a difference too"
    )
    parser.add_argument("--show", type=int, default=20, help="missing figures listed per page (default 20)")
    args = parser.parse_args(argv)
    for site in (args.old, args.new):
        if not (site / "index.html").is_file():
            print(f"error: {site}: not a report site (no index.html)", file=sys.stderr)
            return 2
    old, new = pages(args.old), pages(args.new)
    failed = False
    total_old = total_missing = 0
    for rel in sorted(old & new):
        before, after = figures(args.old / rel), figures(args.new / rel)
        missing, extra = unmatched(before, after)
        total_old += len(before)
        total_missing += len(missing)
        status = "ok" if not missing else "MISSING"
        counts = (
            f"{len(before)} old figures, {len(after)} new; {len(missing)} not found, {len(extra)} only new"
        )
        print(f"{rel}: {counts}: {status}")
        for f in missing[: args.show]:
            shown = f"{f.value:g}" if f.decimals is None else f"{f.value:.{f.decimals}f}"
            print(f"    missing {shown} ({f.context})")
        if len(missing) > args.show:
            print(f"    ... and {len(missing) - args.show} more")
        failed |= bool(missing) or (args.strict and bool(extra))
    for rel in sorted(old - new):
        print(f"only in {args.old}: {rel}")
    for rel in sorted(new - old):
        print(f"only in {args.new}: {rel}")
    print(
        f"{len(old & new)} pages compared, {total_old} old figures, {total_missing} not found on the new site"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
