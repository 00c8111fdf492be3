"""The report site's page kinds: each is one registered builder in its own module of this package.

A page kind is a function that writes its pages through the build's `Site`, registered with `@page`:

    @page("targets", order=20)        # the name the build's summary counts its pages under
    def target_pages(site: Site) -> None:
        for group, entries in site.groups.items():
            site.write(site.group_href(group), "target", "targets", rows=..., ...)  # templates/target.jinja

`PAGE_KINDS` (an `esc.registry.Registry`) imports every module of `esc.site.pages` once,
so a new module (and its template in `templates/`) is a new page kind with no edit elsewhere
(docs/architecture.md, "Adding a page to the report site"). A page kind registered from outside
the package (a paper's own page) names its own template folder,
`@page("cards", templates=Path(__file__).parent / "templates")`, whose templates may extend the
site's `base.jinja`. Pages read the runs through the `Site` (its data, links and leaderboard),
never another page's output: `order` only fixes the summary's order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from esc.registry import Registry

if TYPE_CHECKING:
    from esc.site.site import Site

PageBuilder = Callable[["Site"], None]


@dataclasses.dataclass(frozen=True)
class PageKind:
    name: str  # what the build's summary counts ("3 targets")
    build: PageBuilder  # writes every page of this kind through `site.write(..., counted_as=name)`
    order: int  # place in the summary
    templates: Path | None = None  # a folder with this kind's templates, beside the site's own


PAGE_KINDS: Registry[PageKind] = Registry("page kind", __name__, origin=lambda kind: kind.build)


def page(name: str, order: int = 100, templates: Path | None = None) -> Callable[[PageBuilder], PageBuilder]:
    """Register the decorated function as the builder of the page kind `name` (`templates`: a folder
    its templates are in, where they are not in the site's own); a taken name is refused."""

    def register(build: PageBuilder) -> PageBuilder:
        PAGE_KINDS.add(name, PageKind(name, build, order, templates))
        return build

    return register


def unregister(name: str) -> None:
    """Drop a page kind (for tests that register a toy one)."""
    PAGE_KINDS.remove(name)


def page_kinds() -> list[PageKind]:
    """Every registered page kind in summary order (the modules of this package imported first, once)."""
    return sorted(PAGE_KINDS.values(), key=lambda kind: (kind.order, kind.name))
