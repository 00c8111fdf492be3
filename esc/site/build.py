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
HTML. The site is built in a folder beside SITE and put in its place when complete. Only what an
earlier build wrote is replaced: its marker (`.esc-report`) lists its files, and a SITE that holds
anything else (notes, a copied run folder) or is not a site is refused, so no one's file is deleted.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from esc.errors import UserError
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


def _entries(folder: Path) -> tuple[list[str], list[str]]:
    """The files (links included) and folders under `folder`, as sorted relative POSIX paths; a
    linked folder counts as a file: it is not entered."""
    files, folders = [], []
    for top, dirs, names in os.walk(folder):
        rel = Path(top).relative_to(folder)
        for name in list(dirs):
            if (Path(top) / name).is_symlink():
                dirs.remove(name)
                names.append(name)
            else:
                folders.append((rel / name).as_posix())
        files.extend((rel / name).as_posix() for name in names)
    return sorted(files), sorted(folders)


def _mark(root: Path) -> None:
    """The marker, written last: every file and folder of the build, so that a later build replaces
    those only."""
    files, folders = _entries(root)
    note = "built by `esc report`; a new build replaces these files, and refuses a folder with others"
    record = {"note": note, "files": sorted({*files, MARKER}), "folders": folders}
    (root / MARKER).write_text(json.dumps(record, indent=0) + "\n")


def _site_entries(out: Path) -> re.Pattern[str] | set[str] | None:
    """The files and folders the site in `out` wrote, from its marker (for a site of an earlier
    version, whose marker lists none, a pattern of the paths its pages take); None: no marker."""
    if not (out / MARKER).is_file():
        return None
    try:
        record = json.loads((out / MARKER).read_text(encoding="utf-8"))
        return {str(p) for p in [*record["files"], *record.get("folders", [])]}
    except (ValueError, TypeError, KeyError, AttributeError):
        return LEGACY_SITE_ENTRIES


def _foreign(out: Path, site: re.Pattern[str] | set[str]) -> list[str]:
    """What in `out` the site did not write: files, and folders that hold no file it wrote (named
    for all they hold)."""
    files, folders = _entries(out)
    ours = (lambda p: p in site) if isinstance(site, set) else (lambda p: bool(site.fullmatch(p)))
    kept = {parent.as_posix() for f in files if ours(f) for parent in Path(f).parents}
    foreign_folders = {d for d in folders if d not in kept and not ours(d)}
    foreign = [*(f for f in files if not ours(f)), *foreign_folders]
    return sorted(p for p in foreign if not any(q.as_posix() in foreign_folders for q in Path(p).parents))


def _check_out(out: Path, sources: Sequence[Path]) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: is a file; --out names the site's folder")
    resolved = out.resolve()
    for source in sources:
        s = Path(source).resolve()
        if s == resolved or resolved in s.parents:
            raise UserError(f"{out}: holds the run folder {source}; name another folder for the site (--out)")
    if not out.is_dir() or not any(out.iterdir()):
        return
    site = _site_entries(out)
    if site is None:
        raise UserError(
            f"{out}: a folder that is not empty and not a site `esc report` built; name a new or empty "
            "folder (--out)"
        )
    foreign = _foreign(out, site)
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise UserError(
            f"{out}: holds {foreign[0]}{more}, which `esc report` did not write, and a new build replaces "
            "the whole folder; move what is yours out of it, or name a new or empty folder (--out)"
        )


def _remove_leftovers(out: Path) -> None:
    """Remove the temporary folders a killed build left beside `out` (`.NAME.building-PID`,
    `.NAME.old-PID` of a process that is gone); those of a build still running stay."""
    for path in out.parent.glob(f".{out.name}.*-*"):
        kind, _, pid = path.name.removeprefix(f".{out.name}.").rpartition("-")
        if kind not in ("building", "old") or not pid.isdigit() or not path.is_dir():
            continue
        if int(pid) != os.getpid() and _alive(int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


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
    _check_out(out, sources)
    data = collect([Path(s) for s in sources], cards)
    if title is None:
        names = [run.path.name for run in data.runs]
        title = "ESC-Eval report: " + (", ".join(names) if len(names) <= 3 else f"{len(names)} runs")
    out.parent.mkdir(parents=True, exist_ok=True)
    building = out.parent / f".{out.name}.building-{os.getpid()}"
    _remove_leftovers(out)
    shutil.rmtree(building, ignore_errors=True)
    try:
        kinds = page_kinds()
        low_mass = configured_low_mass() if low_mass is None else low_mass
        site = Site(data, building, title, [k.templates for k in kinds if k.templates], low_mass)
        _start(site)
        for kind in kinds:
            kind.build(site)
        _mark(building)
        index = building / "index.html"
        index_bytes = index.stat().st_size if index.is_file() else 0  # no overview kind: no index
        if out.exists():
            _check_out(out, sources)  # again: a file put there while the site was built is refused too
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            building.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            building.rename(out)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    pages = {kind.name: site.pages.get(kind.name, 0) for kind in kinds}
    return SiteResult(out / "index.html", pages, time.perf_counter() - start, index_bytes)
