"""What every page of one report-site build shares: the data, the file names and links, the
templates, the leaderboard, and the one writer (`Site.write`) that masks secrets in every page.

A page kind (`esc.site.pages`) gets a `Site` and writes its pages through it; no page reads
another page's output, so their order does not matter.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import io
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from esc.cards import load_taxonomy
from esc.reports.bootstrap import interval_text
from esc.reports.charts import pyplot
from esc.secrets.redaction import scrub_text, secret_values
from esc.site.collect import Entry, Run, SiteData
from esc.tasks.safety.checklist import checklist
from esc.tasks.score.leaderboard import TABLE_ORDER, Cell, Row, leaderboard, no_interval_reason

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"

#: an answer mass under this is marked: the trained judges (conf/judge/esc_rank.yaml) call such a
#: judgment invalid (`min_answer_mass: 0.5`); a base model judge keeps it (min_answer_mass 0)
LOW_MASS = 0.5


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


def board_cell(cell: Cell) -> dict[str, Any]:
    """A leaderboard cell: `value` (the mean) over `interval` (its interval, or why it has none), on
    two lines so that the table fits a laptop's screen; `text` is both on one line."""
    if cell.mean is None:
        return {"text": "n/a", "value": "n/a", "interval": "", "sort": ""}
    value = f"{cell.mean:.2f}"
    interval = (interval_text(cell.low, cell.high, 1) + no_interval_reason(cell)).strip()
    text = f"{value} {interval}".strip()
    return {"text": text, "value": value, "interval": interval, "sort": f"{cell.mean:.4f}"}


def tex_safe(text: str) -> str:
    """A label matplotlib draws as written (a `$` would start math)."""
    return str(text).replace("$", r"\$")


def svg(fig: Any, salt: str) -> Markup:
    """The figure as inline SVG: text kept as text, ids salted per figure (several SVGs share a page),
    no date (a rebuild gives the same file)."""
    plt = pyplot()
    buffer = io.StringIO()
    try:
        with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
            fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    finally:
        plt.close(fig)
    text = buffer.getvalue()
    return Markup(text[text.index("<svg") :])  # matplotlib escapes the text it writes


class Site:
    """One build's shared state; `root` is the folder being written."""

    def __init__(
        self, data: SiteData, root: Path, title: str, n_resamples: int, seed: int,
        templates: Sequence[Path] = (),
    ) -> None:  # fmt: skip
        """`templates`: folders of page kinds' own templates, searched after the site's (one name
        space: a page kind's template named like one of the site's is not found; name it apart)."""
        self.data, self.root, self.title = data, root, title
        self.n_resamples, self.seed = n_resamples, seed
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
        self.env.globals.update(
            site_title=title,
            built=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            n_runs=len(data.runs),
        )
        self.taxonomy = load_taxonomy()
        self.questions = {q["key"]: q for q in checklist()["questions"]}
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
        self.by_pair_key = {
            (e.roleplayer, e.language, e.card_id, e.target): e.dialogue_id for e in data.entries.values()
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

    @functools.cached_property
    def leaderboard_rows(self) -> list[Row]:
        """Table 2 over every run's scores, with bootstrap intervals."""
        data = self.data
        return leaderboard(data.records, self.n_resamples, self.seed) if data.records else []

    @functools.cached_property
    def board(self) -> list[dict[str, Any]]:
        """The leaderboard's rows as the overview and each target's page show them."""
        board = []
        for row in sorted(self.leaderboard_rows, key=lambda r: (r.language, r.target, r.roleplayer, r.judge)):
            board.append(
                {
                    "language": row.language,
                    "target": row.target,
                    "roleplayer": row.roleplayer,
                    "judge": row.judge,
                    "href": self.group_href((row.target, row.roleplayer)),
                    "cells": [board_cell(row.cells[k]) for k in TABLE_ORDER],
                    "average": board_cell(row.average),
                    "n": row.dialogues,
                    "invalid": sum(c.n_invalid for c in row.cells.values()),
                    "failed": sum(c.n_failed for c in row.cells.values()),
                }
            )
        return board

    def report_href(self, run: Run, kind: str) -> str:
        """The page of the report `kind` (OUT/<kind>.md) of `run`."""
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
        return sorted(entry.scores) or [""]
