"""The report site: static HTML pages of rank.py runs that anyone can browse from disk (docs/report.md).

`collect.py` reads what the site shows from run folders; `site.py` holds what a build's pages share;
`pages/` has one registered builder per kind of page; `build.py` runs them into a folder (`build_site`).
"""

from esc.site.build import SiteResult, build_site
from esc.site.site import slugify

__all__ = ["SiteResult", "build_site", "slugify"]
