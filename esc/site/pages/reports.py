"""`runs/<run>-<kind>.html`: the reports rank.py wrote (agreement, correlation, safety, pairwise,
trajectory, ...), each from its typed result (`esc.reports.result`), with judge-vs-human scatters."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from markdown_it import MarkdownIt
from markupsafe import Markup

from esc.reports.charts import pyplot
from esc.reports.result import read_result, result_path
from esc.scoring.rubrics import dimension
from esc.site.collect import HumanPairs, human_pairs
from esc.site.pages import page
from esc.site.result_html import result_html
from esc.site.site import Site, svg, tex_safe
from esc.tasks.score.leaderboard import TABLE_ORDER

log = logging.getLogger(__name__)


@page("reports", order=50)
def report_pages(site: Site) -> None:
    """`runs/<run>-<kind>.html`: each report rank.py wrote (OUT/<kind>.md), from its typed result."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")  # raw HTML in the text is escaped
    for run in site.data.runs:
        pairs = human_pairs(run) if {"agreement", "correlation"} & set(run.reports) else None
        for kind, path in run.reports.items():
            href = site.report_href(run, kind)
            figure, note = None, None
            if kind in ("agreement", "correlation") and pairs is not None:
                figure = scatter(pairs, f"scatter-{site.run_slug[id(run)]}-{kind}")
                note = pairs.note
            body, source = report_body(path, kind), result_path(path.parent, kind)
            if body is None:  # a run from before typed results, or a markdown newer than its result
                body, source = Markup(md.render(path.read_text(encoding="utf-8"))), path
            site.write(
                href,
                "report",
                "reports",
                page_title=f"{kind}: {run.path.name}",
                kind=kind,
                run=str(run.path),
                source=str(source),
                body=body,
                scatter=figure,
                scatter_note=note,
                annotations=str(pairs.annotations) if pairs and pairs.annotations else None,
            )


def report_body(path: Path, kind: str) -> Markup | None:
    """The page of OUT/<kind>.md from its typed result, when that is there, readable and not older
    than the markdown (an edited .md wins); None otherwise, and the page shows the markdown."""
    typed = result_path(path.parent, kind)
    if not typed.is_file() or typed.stat().st_mtime_ns < path.stat().st_mtime_ns:
        return None
    try:
        return result_html(read_result(typed))
    except ValueError as err:
        log.warning("%s; the page shows %s instead", err, path.name)
        return None


def scatter(pairs: HumanPairs, salt: str) -> Markup | None:
    """Judge (expected score) against people (the annotators' median), one panel per judge and
    dimension; human scores jittered sideways so that equal ones do not hide each other."""
    order = {k: i for i, k in enumerate(TABLE_ORDER)}
    panels = [
        (j, d, dims[d]) for j, dims in sorted(pairs.points.items()) for d in sorted(dims, key=order.get)
    ]
    if not panels:
        return None
    plt = pyplot()
    rng = np.random.default_rng(0)
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.2), squeeze=False)
    for ax, (judge, dim, pts) in zip(axes[0], panels, strict=True):
        human = np.array([h for h, _ in pts], dtype=float)
        judged = np.array([v for _, v in pts], dtype=float)
        ax.scatter(human + rng.uniform(-0.18, 0.18, len(human)), judged, s=8, alpha=0.35, color="#4C72B0")
        ax.plot([0, 4], [0, 4], color="#999999", lw=0.8, ls="--")
        ax.set_xlim(-0.5, 4.5)
        ax.set_ylim(-0.2, 4.2)
        ax.set_xlabel("human score")
        ax.set_ylabel(tex_safe(f"{judge}: expected score"))
        ax.set_title(f"{dimension(dim).paper_name} (n={len(pts)})", fontsize=9)
    fig.tight_layout()
    return svg(fig, salt)
