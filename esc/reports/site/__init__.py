"""The report site: static HTML pages of rank.py runs that anyone can browse from disk (docs/report.md).

`collect.py` reads what the site shows from run folders; `build.py` writes the pages (`build_site`);
`synthetic.py` makes a run of any size to time it.
"""

from esc.reports.site.build import SiteResult, build_site, slugify

__all__ = ["SiteResult", "build_site", "slugify"]
