"""The report site: static pages of rank.py runs that open from disk (file://): no server, no network.

    build_site([RANK_OUT, ...], SITE)          # the library
    esc report RANK_OUT ... --out SITE         # the file tool (esc/cli/report.py)

Every page is read from the folders' run logs (`OUT/run.json`, `esc.reports.runlog`), and no page
knows a task: a task's judgments, figures and reports are shown as the log gives them.
Pages (docs/report.md): `index.html` (each report's headline table, judgment counts per task, each
run's header), `targets/<target>.html` (the report rows that name the target; its dialogues with
their judgments, filters), `dialogues/<target>/<lang>-<card id>.html` (the transcript with each
reply's judgments beside it, every judgment by task with its probabilities, the seeker's emotion),
`compare/<lang>-<card id>.html` (every target's dialogue of a card side by side),
`runs/<run>-<kind>.html` (each report of a run, whole).

Each kind of page is one registered builder (`esc.site.pages`); they share one `Site`
(`site.py`: the data, file names, links and the writer that masks secrets).

The templates (`templates/*.jinja`) are autoescaped: text from models is shown as text, never read as
HTML. SITE is written as every output folder is (`esc.output_folder`): built in a folder beside it
and put in its place when complete; only what an earlier build wrote is replaced (its marker,
`.esc-report`, lists its files), and a SITE that holds anything else (notes, a copied run folder) or
is not a site is refused, so no one's file is deleted. `--out LINK` writes the folder LINK names.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from esc.errors import UserError
from esc.output_folder import Command, check, owner_tag, process_gone, staged
from esc.paths import REPO_ROOT
from esc.site.collect import collect
from esc.site.pages import page_kinds
from esc.site.site import HERE, Site

STATIC = HERE / "static"
MARKER = ".esc-report"  # in every site: the files it wrote, which a new build may replace
#: what a site wrote before its marker listed its files (issue 50): the paths its pages take
LEGACY_SITE_ENTRIES = re.compile(
    r"\.esc-report|index\.html|static/site\.(css|js)|(targets|compare|runs)/[^/]+\.html"
    r"|dialogues/[^/]+/[^/]+\.html"
)


@dataclasses.dataclass
class SiteResult:
    index: Path
    pages: dict[str, int]  # kind -> pages written
    seconds: float
    index_bytes: int

    def summary(self) -> str:
        counts = ", ".join(f"{n} {kind}" for kind, n in self.pages.items())
        return (
            f"{self.index} ({sum(self.pages.values())} pages: {counts}; index.html "
            f"{self.index_bytes / 1024:.0f} kB) in {self.seconds:.1f} s"
        )


def _start(site: Site) -> None:
    """What every site has before its pages: the stylesheet and the script."""
    (site.root / "static").mkdir(parents=True, exist_ok=True)
    for name in ("site.css", "site.js"):
        shutil.copyfile(STATIC / name, site.root / "static" / name)


def _legacy_site(out: Path) -> re.Pattern[str] | None:
    """A site of an earlier version (its marker lists no files): the paths its pages take."""
    return LEGACY_SITE_ENTRIES if (out / MARKER).is_file() else None


#: how `esc report` writes its folder: `esc.output_folder`, the rule of every output folder
SITE = Command(
    "esc report", MARKER, "a site `esc report` built", input_noun="the run folder", force_flag=None,
    legacy=_legacy_site,
)  # fmt: skip


def _remove_old_leftovers(out: Path) -> None:
    """The temporary folders a build killed before issue 62 left beside `out` (`.NAME.building-PID`,
    `.NAME.old-PID` of a process that is gone); those of a build still running stay. A killed
    build's staging folder is `esc.output_folder`'s to remove."""
    for path in out.parent.glob(f".{out.name}.*-*"):
        kind, _, pid = path.name.removeprefix(f".{out.name}.").rpartition("-")
        if kind not in ("building", "old") or not pid.isdigit() or not path.is_dir():
            continue
        if int(pid) != os.getpid() and not process_gone(owner_tag().rpartition("-")[0], int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)


def configured_low_mass() -> float:
    """`report.low_mass` as conf/rank.yaml sets it (`esc report` without `--low-mass`, the library)."""
    return float(
        yaml.safe_load((REPO_ROOT / "conf" / "rank.yaml").read_text(encoding="utf-8"))["report"]["low_mass"]
    )


def build_site(
    sources: Sequence[Path], out: Path, title: str | None = None, cards: Sequence[Path] | None = None,
    low_mass: float | None = None,
) -> SiteResult:  # fmt: skip
    """The site of the rank.py folders `sources` in `out` (replaced whole when it is an earlier site).
    `cards`: role card files for topics and sources (default: the released cards); `low_mass`: the
    answer mass under which a valid judgment is marked (None: `report.low_mass` of conf/rank.yaml)."""
    start = time.perf_counter()
    out = Path(out)
    if not sources:
        raise UserError("name at least one rank.py output folder")
    check(out, SITE, sources)
    data = collect([Path(s) for s in sources], cards)
    if title is None:
        names = [run.path.name for run in data.runs]
        title = "ESC-Eval report: " + (", ".join(names) if len(names) <= 3 else f"{len(names)} runs")
    _remove_old_leftovers(out.resolve())
    with staged(out, SITE, sources) as building:
        kinds = page_kinds()
        low_mass = configured_low_mass() if low_mass is None else low_mass
        site = Site(data, building, title, [k.templates for k in kinds if k.templates], low_mass)
        _start(site)
        for kind in kinds:
            kind.build(site)
        index = building / "index.html"
        index_bytes = index.stat().st_size if index.is_file() else 0  # no overview kind: no index
    pages = {kind.name: site.pages.get(kind.name, 0) for kind in kinds}
    return SiteResult(out / "index.html", pages, time.perf_counter() - start, index_bytes)
