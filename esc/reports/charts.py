"""Writing a chart: matplotlib without a display, Chinese names drawn, and a PNG replaced in one step."""

from __future__ import annotations

import functools
import io
import logging
from pathlib import Path
from typing import Any

from esc.jsonl import atomic_write_bytes

#: files of CJK fonts a system may have (the Makefile installs Debian's fonts-wqy-zenhei; the report
#: site's stylesheet names the same families), by a part of the file name
CJK_FONT_FILES = (
    "wqy-zenhei",
    "wqy-microhei",
    "NotoSansCJK",
    "NotoSerifCJK",
    "SourceHanSans",
    "DroidSansFallback",
)


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed), imported when a chart is drawn,
    with a CJK font after the default one where the system has one (`cjk_fonts`), so a Chinese
    target's name is drawn, not boxes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # a CJK font's only weight is 500: matplotlib says so at each lookup of "normal", and uses it
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    family = list(matplotlib.rcParams["font.family"])  # a glyph the first lacks comes from the next
    matplotlib.rcParams["font.family"] = [*family, *(f for f in cjk_fonts() if f not in family)]
    return plt


@functools.cache
def cjk_fonts() -> tuple[str, ...]:
    """The family names of the system's CJK fonts, each made known to matplotlib (its font list is
    cached: a font installed after the cache was written is not in it until added). Looked up once
    per process: it scans the system's font folders, and every chart asks."""
    from matplotlib import font_manager

    names = []
    for path in sorted(font_manager.findSystemFonts()):
        if any(part in Path(path).name for part in CJK_FONT_FILES):
            known = {f.fname: f.name for f in font_manager.fontManager.ttflist}
            if path not in known:
                font_manager.fontManager.addfont(path)
                known = {f.fname: f.name for f in font_manager.fontManager.ttflist}
            if path in known and known[path] not in names:
                names.append(known[path])
    return tuple(names)


def save_png(fig: Any, path: Path) -> Path:
    """The figure as `path` (its folder made), replaced in one step: a write that fails (a full
    disk) leaves the chart of the previous run as it was, not half a PNG."""
    plt = pyplot()
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(Path(path), buffer.getvalue())
    return Path(path)
