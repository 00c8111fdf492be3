"""`runs/<run>-<kind>.html`: each report of a run's log (`reports`: blocks of text and tables), the
whole of it, every figure with its numbers (`esc.site.result_html`)."""

from __future__ import annotations

from esc.reports.runlog import RUN_LOG
from esc.site.pages import page
from esc.site.result_html import result_html
from esc.site.site import Site


@page("reports", order=50)
def report_pages(site: Site) -> None:
    for run in site.data.runs:
        for kind, report in run.reports.items():
            site.write(
                site.report_href(run, kind),
                "report",
                "reports",
                page_title=f"{kind}: {run.path.name}",
                kind=kind,
                task=run.task,
                source=str(run.path / RUN_LOG),
                body=result_html(report, metrics=run.log.metrics()),
            )
