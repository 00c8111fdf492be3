"""What every page of one report-site build shares: the data, the file names and links, the
templates, and the one writer (`Site.write`) that masks secrets in every page.

A page kind (`esc.site.pages`) gets a `Site` and writes its pages through it; no page reads
another page's output, so their order does not matter.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from esc.cards import load_taxonomy
from esc.secrets.redaction import scrub_text, secret_values
from esc.site.collect import Entry, Run, SiteData, whole

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"


def slugify(name: str) -> str:
    """A file name for `name`: lower-case letters, digits, `.`, `_` and `-`; a name that had to
    change gets a short hash of itself, so two names never share a file (not even case-folded)."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", str(name).lower()).strip("-.")[:60] or "x"
    if slug != name:
        slug += "-" + hashlib.sha1(str(name).encode("utf-8")).hexdigest()[:6]
    return slug


class Names:
    """Unique file names (case-insensitive): a second `a` becomes `a-2`."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def take(self, name: str) -> str:
        candidate, n = name, 2
        while candidate.lower() in self.used:
            candidate, n = f"{name}-{n}", n + 1
        self.used.add(candidate.lower())
        return candidate


def num(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def figure(value: float | None) -> str:
    """A judgment's score as the judge gave it: a whole number without decimals, else two."""
    if value is None:
        return "n/a"
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


class Site:
    """One build's shared state; `root` is the folder being written."""

    def __init__(
        self, data: SiteData, root: Path, title: str, templates: Sequence[Path] = (), low_mass: float = 0.0
    ) -> None:
        """`templates`: folders of page kinds' own templates, searched after the site's (one name
        space: a page kind's template named like one of the site's is not found; name it apart).
        `low_mass`: the answer mass under which a valid judgment is marked (`report.low_mass`)."""
        self.data, self.root, self.title, self.low_mass = data, root, title, low_mass
        self.secrets = secret_values()  # masked in every page (read once: thousands of pages)
        self.env = Environment(
            loader=FileSystemLoader([str(TEMPLATES), *map(str, templates)]),
            autoescape=True,
            trim_blocks=True,
            lstrip_blocks=True,
            undefined=StrictUndefined,
            auto_reload=False,  # each template read once per build, not checked again per page
        )
        self.env.filters["num"] = num
        self.env.filters["figure"] = figure
        self.env.globals.update(
            site_title=title,
            built=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            n_runs=len(data.runs),
        )
        self.taxonomy = load_taxonomy()
        self.folders: set[Path] = set()
        self.pages: Counter = Counter()
        # file names: a target (with its role-player when a target has several), a dialogue, a card
        roleplayers: dict[str, set[str]] = defaultdict(set)
        for entry in data.entries.values():
            roleplayers[entry.target].add(entry.roleplayer)
        names = Names()
        self.group_slug: dict[tuple[str, str], str] = {}
        for entry in data.entries.values():
            if entry.group not in self.group_slug:
                base = (
                    entry.target
                    if len(roleplayers[entry.target]) <= 1
                    else f"{entry.target}__{entry.roleplayer}"
                )
                self.group_slug[entry.group] = names.take(slugify(base))
        self.groups: dict[tuple[str, str], list[Entry]] = defaultdict(list)
        self.page: dict[str, str] = {}  # dialogue id -> path from the root
        per_group: dict[tuple[str, str], Names] = defaultdict(Names)
        for entry in data.entries.values():
            self.groups[entry.group].append(entry)
            card = str(entry.card_id) if entry.card_id is not None else slugify(entry.dialogue_id)
            name = per_group[entry.group].take(f"{slugify(entry.language)}-{card}")
            self.page[entry.dialogue_id] = f"dialogues/{self.group_slug[entry.group]}/{name}.html"
        self.by_card: dict[tuple[str, int], list[Entry]] = defaultdict(list)
        for entry in data.entries.values():
            if entry.card_id is not None:
                self.by_card[(entry.language, entry.card_id)].append(entry)
        self.compare = {
            key: f"compare/{slugify(key[0])}-{key[1]}.html"
            for key, group in self.by_card.items()
            if len(group) > 1
        }
        run_names = Names()
        self.run_slug = {id(run): run_names.take(slugify(run.path.name)) for run in data.runs}

    def write(self, relative: str, template: str, counted_as: str, **context: Any) -> int:
        """Render `templates/<template>.jinja` to `relative` (secrets masked), counted under
        `counted_as` in the build's summary; the bytes written."""
        depth = relative.count("/")
        text = self.env.get_template(f"{template}.jinja").render(root="../" * depth, **context)
        path = self.root / relative
        if path.parent not in self.folders:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.folders.add(path.parent)
        data = scrub_text(text, self.secrets).encode("utf-8")  # a key a model echoed is shown as ***
        path.write_bytes(data)
        self.pages[counted_as] += 1
        return len(data)

    def report_href(self, run: Run, kind: str) -> str:
        """The page of the report `kind` of `run` (its log's `reports`)."""
        return f"runs/{self.run_slug[id(run)]}-{kind}.html"

    def topic(self, entry: Entry) -> tuple[str, str]:
        """(key, label) of the card's tier-1 topic, or unknown."""
        if entry.card is None:
            return ("unknown", "unknown")
        try:
            return (entry.card.topic, self.taxonomy.node(entry.card.topic).en)
        except ValueError:
            return (entry.card.topic, entry.card.topic)

    def group_href(self, group: tuple[str, str]) -> str | None:
        slug = self.group_slug.get(group)
        return None if slug is None else f"targets/{slug}.html"

    def judges_of(self, entry: Entry) -> list[str]:
        """The judges of its judgments about it as a whole ([""]: none), a row each on its target's page."""
        return sorted({j.judge for js in entry.judgments.values() for j in js if whole(j)}) or [""]
