"""The report site: static HTML pages of rank.py runs that anyone can browse from disk (docs/report.md).

`collect.py` reads what the site shows from the run folders' logs (`OUT/run.json`); `site.py`
holds what a build's pages share; `pages/` has one registered builder per kind of page; `build.py`
runs them into a folder (`build_site`). No part of it knows a task.
"""

from esc.site.build import SiteResult, build_site
from esc.site.site import slugify

__all__ = ["SiteResult", "build_site", "slugify"]
