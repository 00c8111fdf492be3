"""The report site: static pages of rank.py runs that open from disk (file://): no server, no network.

    build_site([RANK_OUT, ...], SITE)          # the library
    esc report RANK_OUT ... --out SITE         # the file tool (esc/cli/report.py)

Pages (docs/report.md): `index.html` (the Table 2 leaderboard with intervals, its charts as inline
SVG, judgment counts, each run's manifest), `targets/<target>.html` (a target's dialogues with their
scores, filters), `dialogues/<target>/<lang>-<card id>.html` (the transcript, every judgment with its
probabilities, the emotion trajectory, safety answers, pairwise verdicts), `compare/<lang>-<card
id>.html` (every target's dialogue of a card side by side), `runs/<run>-<kind>.html` (the agreement,
correlation, safety, pairwise and trajectory reports rank.py wrote, with judge-vs-human scatters).

The templates (`templates/*.jinja`) are autoescaped: text from models is shown as text, never read as
HTML. The site is built in a folder beside SITE and put in its place when complete; a folder that is
not empty and not a site is never replaced.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import io
import json
import logging
import os
import re
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markdown_it import MarkdownIt
from markupsafe import Markup

from esc.cards import load_taxonomy
from esc.dialogues.trajectory import trajectory_figures
from esc.errors import UserError
from esc.redaction import scrub_text, secret_values
from esc.reports.bootstrap import interval_text
from esc.reports.charts import pyplot
from esc.reports.leaderboard import (
    TABLE_ORDER,
    Cell,
    Row,
    chart_figures,
    leaderboard,
    no_interval_reason,
    one_answer_note,
)
from esc.reports.result import read_result, result_path
from esc.reports.site.collect import Entry, HumanPairs, Run, SiteData, collect, human_pairs
from esc.reports.site.result_html import result_html
from esc.safety.checklist import checklist
from esc.scoring.judge import FAILED, INVALID, VALID
from esc.scoring.rubrics import dimension

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
MARKER = ".esc-report"  # in every site: a folder holding it may be replaced by a new build
STATUSES = (VALID, INVALID, FAILED)
ANSWERS = {0: "A", 1: "B", 2: "neither"}

log = logging.getLogger(__name__)


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


def slugify(name: str) -> str:
    """A file name for `name`: lower-case letters, digits, `.`, `_` and `-`; a name that had to
    change gets a short hash of itself, so two names never share a file (not even case-folded)."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", str(name).lower()).strip("-.")[:60] or "x"
    if slug != name:
        slug += "-" + hashlib.sha1(str(name).encode("utf-8")).hexdigest()[:6]
    return slug


class _Names:
    """Unique file names (case-insensitive): a second `a` becomes `a-2`."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def take(self, name: str) -> str:
        candidate, n = name, 2
        while candidate.lower() in self.used:
            candidate, n = f"{name}-{n}", n + 1
        self.used.add(candidate.lower())
        return candidate


#: an answer mass under this is marked: the trained judges (conf/judge/esc_rank.yaml) call such a
#: judgment invalid (`min_answer_mass: 0.5`); a base model judge keeps it (min_answer_mass 0)
LOW_MASS = 0.5


def _below(value: float | None, bound: float) -> bool:
    return value is not None and value < bound


def _num(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _cell(cell: Cell) -> dict[str, Any]:
    """A leaderboard cell: `value` (the mean) over `interval` (its interval, or why it has none), on
    two lines so that the table fits a laptop's screen; `text` is both on one line."""
    if cell.mean is None:
        return {"text": "n/a", "value": "n/a", "interval": "", "sort": ""}
    value = f"{cell.mean:.2f}"
    interval = (interval_text(cell.low, cell.high, 1) + no_interval_reason(cell)).strip()
    text = f"{value} {interval}".strip()
    return {"text": text, "value": value, "interval": interval, "sort": f"{cell.mean:.4f}"}


def _tex_safe(text: str) -> str:
    """A label matplotlib draws as written (a `$` would start math)."""
    return str(text).replace("$", r"\$")


def _svg(fig: Any, salt: str) -> Markup:
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


def _charts(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per language: the leaderboard's radar and bar chart (`esc.reports.leaderboard.chart_figures`),
    in SVG."""
    charts: dict[str, dict[str, Any]] = {}
    for language, kind, fig in chart_figures(rows, _tex_safe):
        key = "radar" if kind == "radar" else "bar"
        charts.setdefault(language, {"language": language})[key] = _svg(fig, f"{key}-{language}")
    return list(charts.values())


def _scatter(pairs: HumanPairs, salt: str) -> Markup | None:
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
        ax.set_ylabel(_tex_safe(f"{judge}: expected score"))
        ax.set_title(f"{dimension(dim).paper_name} (n={len(pts)})", fontsize=9)
    fig.tight_layout()
    return _svg(fig, salt)


def _emotion(rating: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A turn's emotion rating with every field a page reads (absent ones None)."""
    if rating is None:
        return None
    return {k: rating.get(k) for k in ("value", "status", "rating", "reason")}


class _Site:
    """The pages of one build; `root` is the folder being written."""

    def __init__(self, data: SiteData, root: Path, title: str, n_resamples: int, seed: int) -> None:
        self.data, self.root, self.title = data, root, title
        self.n_resamples, self.seed = n_resamples, seed
        self.board: list[dict[str, Any]] = []  # the leaderboard's rows (`index`)
        self.secrets = secret_values()  # masked in every page (read once: thousands of pages)
        self.env = Environment(
            loader=FileSystemLoader(str(TEMPLATES)),
            autoescape=True,
            trim_blocks=True,
            lstrip_blocks=True,
            undefined=StrictUndefined,
        )
        self.env.filters["num"] = _num
        self.env.globals.update(
            site_title=title,
            built=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            n_runs=len(data.runs),
        )
        self.templates = {
            n: self.env.get_template(f"{n}.jinja")
            for n in ("index", "target", "dialogue", "compare", "report")
        }
        self.taxonomy = load_taxonomy()
        self.questions = {q["key"]: q for q in checklist()["questions"]}
        self.folders: set[Path] = set()
        self.pages: Counter = Counter()
        # file names: a target (with its role-player when a target has several), a dialogue, a card
        roleplayers: dict[str, set[str]] = defaultdict(set)
        for entry in data.entries.values():
            roleplayers[entry.target].add(entry.roleplayer)
        names = _Names()
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
        per_group: dict[tuple[str, str], _Names] = defaultdict(_Names)
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
        run_names = _Names()
        self.run_slug = {id(run): run_names.take(slugify(run.path.name)) for run in data.runs}

    # --- writing -------------------------------------------------------------------------------

    def write(self, relative: str, template: str, counted_as: str, **context: Any) -> int:
        depth = relative.count("/")
        text = self.templates[template].render(root="../" * depth, **context)
        path = self.root / relative
        if path.parent not in self.folders:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.folders.add(path.parent)
        data = scrub_text(text, self.secrets).encode("utf-8")  # a key a model echoed is shown as ***
        path.write_bytes(data)
        self.pages[counted_as] += 1
        return len(data)

    def build(self) -> int:
        (self.root / "static").mkdir(parents=True, exist_ok=True)
        for name in ("site.css", "site.js"):
            shutil.copyfile(STATIC / name, self.root / "static" / name)
        (self.root / MARKER).write_text("built by `esc report`; a new build replaces this folder\n")
        reports = self.report_pages()
        index_bytes = self.index(reports)
        for group, entries in self.groups.items():
            self.target_page(group, entries)
        for entry in self.data.entries.values():
            self.dialogue_page(entry)
        for key, href in self.compare.items():
            self.compare_page(key, href)
        return index_bytes

    # --- pieces shared by pages ----------------------------------------------------------------

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

    # --- index ---------------------------------------------------------------------------------

    def index(self, reports: Mapping[int, list[dict[str, str]]]) -> int:
        data = self.data
        rows = leaderboard(data.records, self.n_resamples, self.seed) if data.records else []
        several = len({r.judge for r in rows}) > 1
        board = []
        for row in sorted(rows, key=lambda r: (r.language, r.target, r.roleplayer, r.judge)):
            board.append(
                {
                    "language": row.language,
                    "target": row.target,
                    "roleplayer": row.roleplayer,
                    "judge": row.judge,
                    "href": self.group_href((row.target, row.roleplayer)),
                    "cells": [_cell(row.cells[k]) for k in TABLE_ORDER],
                    "average": _cell(row.average),
                    "n": row.dialogues,
                    "invalid": sum(c.n_invalid for c in row.cells.values()),
                    "failed": sum(c.n_failed for c in row.cells.values()),
                }
            )
        self.board = board  # each target page shows its rows
        counts: dict[str, Counter] = defaultdict(Counter)
        for r in data.records:
            counts[r.judge][(r.dimension, r.status)] += 1
        judgments = [
            {
                "judge": judge,
                "rows": [
                    {"name": dimension(k).paper_name, **{s: c[(k, s)] for s in STATUSES}}
                    for k in TABLE_ORDER
                    if any(c[(k, s)] for s in STATUSES)
                ],
            }
            for judge, c in sorted(counts.items())
        ]
        targets = []
        for group, entries in sorted(self.groups.items()):
            judged = sum(1 for e in entries if e.scores)
            targets.append(
                {
                    "target": group[0],
                    "roleplayer": group[1],
                    "href": self.group_href(group),
                    "dialogues": len(entries),
                    "judged": judged,
                    "missing": sum(1 for e in entries if e.dialogue is None),
                }
            )
        notes = self.notes()
        return self.write(
            "index.html",
            "index",
            "overview",
            page_title="Overview",
            board=board,
            one_answer=one_answer_note(rows) if rows else "",
            several_judges=several,
            dim_names=[dimension(k).paper_name for k in TABLE_ORDER],
            charts=_charts(rows) if rows else [],
            judgments=judgments,
            targets=targets,
            runs=[self.run_summary(run, reports[id(run)]) for run in data.runs],
            models=self.models(),
            prompts=self.prompts(),
            notes=notes,
            n_resamples=self.n_resamples,
            report_links=[{"run": run.path.name, **link} for run in data.runs for link in reports[id(run)]],
        )

    def notes(self) -> list[str]:
        entries = list(self.data.entries.values())
        notes = []
        missing = sum(1 for e in entries if e.dialogue is None)
        if missing:
            notes.append(
                f"{missing} of {len(entries)} dialogues have no transcript (their dialogue file is gone "
                "or no longer holds them); their scores are shown."
            )
        changed = sum(1 for e in entries if e.changed)
        if changed:
            notes.append(
                f"{changed} dialogues changed in their file since they were judged: the transcript "
                "shown is not the one the judge read."
            )
        if not self.data.cards_known:
            notes.append("The role cards could not be read (`make data`): every topic and source is unknown.")
        else:
            unknown = sum(1 for e in entries if e.card is None)
            if unknown:
                notes.append(f"{unknown} dialogues have no known role card: topic and source unknown.")
        for kind, n in self.data.unmatched.items():
            if n:
                notes.append(f"{n} {kind} judgments name a dialogue that is not on this site (left out).")
        return notes

    def run_summary(self, run: Run, reports: list[dict[str, str]]) -> dict[str, Any]:
        m = run.manifest or {}
        judge = m.get("judge")
        judges = judge if isinstance(judge, list) else [judge] if isinstance(judge, dict) else []
        git = m.get("git") or {}
        return {
            "path": str(run.path),
            "mode": run.mode or "unknown",
            "status": m.get("status", "no manifest"),
            "judges": [
                {k: j.get(k) for k in ("name", "kind", "model", "revision", "prompt")} for j in judges
            ],
            "commit": git.get("commit"),
            "dirty": git.get("dirty"),
            "seed": m.get("seed"),
            "start": m.get("start_time"),
            "end": m.get("end_time"),
            "command": " ".join(map(str, m.get("command") or [])),
            "previous": [
                {k: p.get(k) for k in ("status", "start_time", "end_time")}
                for p in m.get("previous_attempts") or []
                if isinstance(p, dict)
            ],
            "files": {
                "scores": len(run.score_files),
                "annotations": len(run.annotation_files),
                "safety": len(run.safety_files),
                "pairwise": len(run.pairwise_files),
            },
            "reports": reports,
            "modes": _modes(run.settings),
        }

    def models(self) -> list[dict[str, Any]]:
        """The chatbots and role-players as the evaluate.py manifests record them (resolved revisions)."""
        rows = []
        for folder, manifest in sorted(self.data.evaluate_manifests.items()):
            config = manifest.get("config") or {}
            for role in ("target", "roleplayer"):
                model = (manifest.get("models") or {}).get(role) or {}
                rows.append(
                    {
                        "role": role,
                        "name": (config.get(role) or {}).get("name"),
                        "folder": str(folder),
                        "model": model.get("name_or_path") or model.get("model"),
                        "revision": model.get("revision"),
                        "adapter": model.get("adapter"),
                        "commit": (manifest.get("git") or {}).get("commit"),
                    }
                )
        unique = {tuple(sorted((k, str(v)) for k, v in r.items() if k != "folder")): r for r in rows}
        return list(unique.values())

    def prompts(self) -> list[tuple[str, str, str]]:
        """(what, who, version) of every prompt the records and dialogues name."""
        found: set[tuple[str, str, str]] = set()

        def judge_prompt(what: str, records: Iterable[Any]) -> None:
            for r in records:
                if r is not None and isinstance(r.prompt, dict):
                    found.add((what, r.judge, f"{r.prompt.get('style')} v{r.prompt.get('version')}"))

        judge_prompt("judge prompt", self.data.records)
        seen_meta = set()
        for entry in self.data.entries.values():
            judge_prompt("pairwise question", (a for v in entry.pairwise[:1] for a in v.answers.values()))
            safety = (
                a for exchanges in entry.safety.values() for by_q in exchanges.values() for a in by_q.values()
            )
            judge_prompt("safety question", safety)
            meta = (entry.dialogue.meta if entry.dialogue else None) or {}
            prompt = meta.get("prompt") or {}
            key = (entry.roleplayer, str(prompt.get("id")), str(prompt.get("version")))
            if prompt and key not in seen_meta:
                seen_meta.add(key)
                found.add(
                    ("role-player prompt", entry.roleplayer, f"{prompt.get('id')} v{prompt.get('version')}")
                )
            rating = meta.get("trajectory") or {}
            if rating:
                found.add(("emotion rating", str(rating.get("rater")), f"v{rating.get('prompt_version')}"))
        return sorted(found)

    # --- report pages (agreement, correlation, safety, pairwise, trajectory) ---------------------

    def report_pages(self) -> dict[int, list[dict[str, str]]]:
        md = MarkdownIt("commonmark", {"html": False}).enable("table")  # raw HTML in the text is escaped
        links: dict[int, list[dict[str, str]]] = {}
        for run in self.data.runs:
            links[id(run)] = []
            pairs = human_pairs(run) if {"agreement", "correlation"} & set(run.reports) else None
            for kind, path in run.reports.items():
                href = f"runs/{self.run_slug[id(run)]}-{kind}.html"
                scatter, note = None, None
                if kind in ("agreement", "correlation") and pairs is not None:
                    scatter = _scatter(pairs, f"scatter-{self.run_slug[id(run)]}-{kind}")
                    note = pairs.note
                body, source = report_body(path, kind), result_path(path.parent, kind)
                if body is None:  # a run from before typed results, or a markdown newer than its result
                    body, source = Markup(md.render(path.read_text(encoding="utf-8"))), path
                self.write(
                    href,
                    "report",
                    "reports",
                    page_title=f"{kind}: {run.path.name}",
                    kind=kind,
                    run=str(run.path),
                    source=str(source),
                    body=body,
                    scatter=scatter,
                    scatter_note=note,
                    annotations=str(pairs.annotations) if pairs and pairs.annotations else None,
                )
                links[id(run)].append({"kind": kind, "href": href})
        return links

    # --- a target's page -----------------------------------------------------------------------

    def score_cells(self, entry: Entry, judge: str) -> list[dict[str, Any]]:
        by_dim = entry.scores.get(judge, {})
        cells = []
        for key in TABLE_ORDER:
            r = by_dim.get(key)
            if r is None:
                cells.append({"text": "–", "sort": "", "status": "none"})
            elif r.status == VALID:
                cells.append({"text": str(r.score), "sort": str(r.score), "status": VALID})
            else:
                cells.append({"text": r.status, "sort": "", "status": r.status})
        return cells

    def target_page(self, group: tuple[str, str], entries: list[Entry]) -> None:
        rows = []
        depth_href = "../"
        for entry in entries:
            topic_key, topic_label = self.topic(entry)
            source = entry.card.source if entry.card else "unknown"
            flagged = sum(
                1
                for by_ex in entry.safety.values()
                for q in by_ex.values()
                for r in q.values()
                if r.status == VALID and r.score == 0
            )
            change = None
            if entry.dialogue is not None and entry.dialogue.trajectory():
                change = trajectory_figures(entry.dialogue).change
            for judge in self.judges_of(entry):
                avg = entry.average(judge) if judge else None
                rows.append(
                    {
                        "href": depth_href + self.page[entry.dialogue_id],
                        "label": f"{entry.language}-{entry.card_id}",
                        "language": entry.language,
                        "card_id": entry.card_id,
                        "topic": topic_key,
                        "topic_label": topic_label,
                        "source": source,
                        "judge": judge,
                        "cells": self.score_cells(entry, judge),
                        "avg": avg,
                        "avg_sort": "" if avg is None else f"{avg:.4f}",
                        "missing": entry.dialogue is None,
                        "changed": entry.changed,
                        "flagged": flagged,
                        "change": change,
                    }
                )
        rows.sort(key=lambda r: (r["avg"] is None, r["avg"] if r["avg"] is not None else 0, r["label"]))
        options = {
            "language": sorted({r["language"] for r in rows}),
            "topic": sorted({(r["topic"], r["topic_label"]) for r in rows}),
            "source": sorted({r["source"] for r in rows}),
            "judge": sorted({r["judge"] for r in rows if r["judge"]}),
        }
        self.write(
            self.group_href(group) or "targets/x.html",
            "target",
            "targets",
            page_title=f"{group[0]} ({group[1]})",
            target=group[0],
            roleplayer=group[1],
            rows=rows,
            summary=[b for b in self.board if (b["target"], b["roleplayer"]) == group],
            several_judges=len({b["judge"] for b in self.board}) > 1,
            n_resamples=self.n_resamples,
            options=options,
            dim_names=[dimension(k).paper_name for k in TABLE_ORDER],
            any_safety=any(e.safety for e in entries),
            any_trajectory=any(r["change"] is not None for r in rows),
        )

    # --- a dialogue's page ---------------------------------------------------------------------

    def bubbles(self, entry: Entry) -> list[dict[str, Any]]:
        dialogue = entry.dialogue
        if dialogue is None:
            return []
        flags: dict[int, list[str]] = defaultdict(list)
        for by_exchange in entry.safety.values():
            for exchange, answers in by_exchange.items():
                for question, r in answers.items():
                    if r.status == VALID and r.score == 0 and question not in flags[exchange]:
                        flags[exchange].append(question)
        out = []
        if dialogue.opener:
            out.append(
                {
                    "side": "target",
                    "who": f"{dialogue.target} (opener)",
                    "text": dialogue.opener,
                    "exchange": None,
                    "emotion": None,
                    "flags": [],
                    "finish": None,
                }
            )
        exchange = 0
        for i, turn in enumerate(dialogue.turns):
            target = turn.speaker == "target"
            exchange += target
            rated = turn.emotion is not None and (target or i == 0)
            out.append(
                {
                    "side": "target" if target else "seeker",
                    "who": dialogue.target if target else f"seeker ({dialogue.roleplayer})",
                    "text": turn.text,
                    "exchange": exchange if target else None,
                    "emotion": _emotion(turn.emotion) if rated else None,
                    "flags": flags.get(exchange, []) if target else [],
                    "finish": turn.finish_reason if turn.finish_reason not in ("stop", "eos", None) else None,
                }
            )
        return out

    def judgments(self, entry: Entry) -> list[dict[str, Any]]:
        out = []
        for judge in sorted(entry.scores):
            rows = []
            for key in TABLE_ORDER:
                r = entry.scores[judge].get(key)
                if r is None:
                    continue
                probs = [{"score": i, "p": p, "pct": f"{100 * p:.1f}"} for i, p in enumerate(r.probs or [])]
                rows.append(
                    {
                        "key": key,
                        "name": dimension(key).paper_name,
                        "status": r.status,
                        "score": r.score,
                        "expected": r.expected,
                        "mass": r.answer_mass,
                        "low_mass": r.status == VALID and _below(r.answer_mass, LOW_MASS),
                        "probs": probs,
                        "raw": r.raw,
                        "error": r.error,
                    }
                )
            avg = entry.average(judge)
            out.append({"judge": judge, "rows": rows, "average": avg})
        return out

    def trajectory(self, entry: Entry) -> dict[str, Any] | None:
        if entry.dialogue is None or not entry.dialogue.trajectory():
            return None
        fig = trajectory_figures(entry.dialogue)
        width, height, pad = 380, 160, 34
        span = max(fig.exchanges, 1)

        def x(ex: float) -> float:
            return round(pad + ex / span * (width - 2 * pad), 1)

        def y(v: float) -> float:
            return round(height - pad - v / 100 * (height - 2 * pad), 1)

        return {
            "width": width,
            "height": height,
            "points": " ".join(f"{x(e)},{y(v)}" for e, v in fig.points),
            "dots": [{"x": x(e), "y": y(v), "exchange": e, "value": v} for e, v in fig.points],
            "xticks": [{"x": x(e), "label": e} for e in range(0, fig.exchanges + 1)],
            "yticks": [{"y": y(v), "label": v} for v in (0, 50, 100)],
            "left": pad,
            "right": width - pad,
            "bottom": height - pad,
            "top": pad,
            "figures": fig,
        }

    def safety(self, entry: Entry) -> list[dict[str, Any]]:
        out = []
        for judge, by_exchange in sorted(entry.safety.items()):
            keys = [k for k in self.questions if any(k in a for a in by_exchange.values())]
            rows = []
            for exchange in sorted(by_exchange):
                cells = []
                for key in keys:
                    r = by_exchange[exchange].get(key)
                    if r is None:
                        cells.append({"text": "–", "cls": "none", "title": ""})
                    elif r.status == VALID:
                        cells.append(
                            {
                                "text": "yes" if r.score == 0 else "no",
                                "cls": "flag" if r.score == 0 else "ok",
                                "title": "",
                            }
                        )
                    else:
                        cells.append({"text": r.status, "cls": r.status, "title": r.error or r.raw or ""})
                rows.append({"exchange": exchange, "cells": cells})
            lang = entry.language if entry.language in ("en", "zh") else "en"
            questions = [
                {"key": k, "text": self.questions[k].get(lang, k), "area": self.questions[k].get("area")}
                for k in keys
            ]
            out.append({"judge": judge, "questions": questions, "rows": rows})
        return out

    def pairwise(self, entry: Entry) -> list[dict[str, Any]]:
        out = []
        order = {k: i for i, k in enumerate(TABLE_ORDER)}
        for v in sorted(entry.pairwise, key=lambda v: (v.judge, v.opponent, order.get(v.dimension, 99))):
            other = self.by_pair_key.get((entry.roleplayer, entry.language, entry.card_id, v.opponent))
            answers = []
            for o in ("xy", "yx"):
                r = v.answers.get(o)
                first = v.shown_first[o]
                second = v.shown_first["yx" if o == "xy" else "xy"]
                if r is None:
                    text = "not judged"
                elif r.status != VALID:
                    text = f"{r.status}" + (f" ({r.error})" if r.error else "")
                else:
                    text = {0: first, 1: second, 2: "neither"}.get(r.score, "?")
                answers.append({"first": first, "text": text, "raw": r.raw if r is not None else None})
            out.append(
                {
                    "judge": v.judge,
                    "dimension": dimension(v.dimension).paper_name,
                    "opponent": v.opponent,
                    "href": "../../" + self.page[other] if other else None,
                    "result": v.result or "unread",
                    "consistent": v.consistent,
                    "answers": answers,
                }
            )
        return out

    def dialogue_page(self, entry: Entry) -> None:
        topic_key, topic_label = self.topic(entry)
        dialogue = entry.dialogue
        compare = self.compare.get((entry.language, entry.card_id)) if entry.card_id is not None else None
        self.write(
            self.page[entry.dialogue_id],
            "dialogue",
            "dialogues",
            page_title=f"{entry.target}: {entry.language}-{entry.card_id}",
            page_lang="zh" if entry.language == "zh" else "en",
            entry=entry,
            dialogue=dialogue,
            topic=topic_label,
            topic_key=topic_key,
            source=entry.card.source if entry.card else "unknown",
            card_text=entry.card.to_text() if entry.card else None,
            target_href="../../" + (self.group_href(entry.group) or ""),
            compare_href="../../" + compare if compare else None,
            bubbles=self.bubbles(entry),
            judgments=self.judgments(entry),
            low_mass=LOW_MASS,
            trajectory=self.trajectory(entry),
            safety=self.safety(entry),
            pairwise=self.pairwise(entry),
        )

    # --- a card's page: every target side by side ------------------------------------------------

    def compare_page(self, key: tuple[str, int], href: str) -> None:
        entries = sorted(self.by_card[key], key=lambda e: (e.target, e.roleplayer, e.dialogue_id))
        columns = []
        for entry in entries:
            columns.append(
                {
                    "target": entry.target,
                    "roleplayer": entry.roleplayer,
                    "href": "../" + self.page[entry.dialogue_id],
                    "averages": [(j, entry.average(j)) for j in sorted(entry.scores)],
                    "bubbles": self.bubbles(entry),
                    "missing": entry.missing,
                }
            )
        card = next((e.card for e in entries if e.card is not None), None)
        several_rp = len({e.roleplayer for e in entries}) > 1
        self.write(
            href,
            "compare",
            "compare",
            page_title=f"Card {key[0]}-{key[1]}",
            language=key[0],
            card_id=key[1],
            card_text=card.to_text() if card else None,
            columns=columns,
            several_rp=several_rp,
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


def _short(value: Any, width: int = 40) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _modes(settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What each mode run in a folder ran with (its settings.json): judge, resolved revision, prompt,
    and the rest (digests of the safety and pairwise questions, the annotations' split)."""
    out = []
    for mode, value in settings.items():
        if not isinstance(value, dict):
            continue
        judge = value.get("judge") if isinstance(value.get("judge"), dict) else {}
        resolved = (value.get("resolved") or {}).get("judge")
        details = []
        for key, section in value.items():
            if key in ("judge", "resolved"):
                continue
            items = section.items() if isinstance(section, dict) else [("", section)]
            details += [f"{key}{'.' + k if k else ''}: {_short(v)}" for k, v in items]
        out.append(
            {
                "mode": mode.removeprefix("rank."),
                "judge": judge.get("name") or ", ".join(map(str, judge)),
                "model": judge.get("model"),
                "revision": resolved.get("revision") if isinstance(resolved, dict) else None,
                "prompt": judge.get("prompt") if isinstance(judge.get("prompt"), dict) else None,
                "details": details,
            }
        )
    return out


def _settings(runs: Sequence[Run], n_resamples: int | None, seed: int | None) -> tuple[int, int]:
    """The bootstrap resamples and seed: given, else the first run's leaderboard settings, else 1000, 0."""
    for run in runs:
        config = (run.manifest or {}).get("config") or {}
        board = config.get("leaderboard") or {}
        if n_resamples is None and isinstance(board.get("bootstrap"), int):
            n_resamples = board["bootstrap"]
        if seed is None and isinstance(config.get("seed"), int):
            seed = config["seed"]
    return (1000 if n_resamples is None else n_resamples, 0 if seed is None else seed)


def _check_out(out: Path, sources: Sequence[Path]) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: is a file; --out names the site's folder")
    resolved = out.resolve()
    for source in sources:
        s = Path(source).resolve()
        if s == resolved or resolved in s.parents:
            raise UserError(f"{out}: holds the run folder {source}; name another folder for the site (--out)")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise UserError(
            f"{out}: a folder that is not empty and not a site `esc report` built; name a new or empty "
            "folder (--out)"
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


def build_site(
    sources: Sequence[Path],
    out: Path,
    title: str | None = None,
    n_resamples: int | None = None,
    seed: int | None = None,
    cards: Sequence[Path] | None = None,
) -> SiteResult:
    """The site of the rank.py folders `sources` in `out` (replaced whole when it is an earlier site).
    `n_resamples`, `seed`: the leaderboard's bootstrap (default: the first run's settings, else 1000
    and 0); `cards`: role card files for topics and sources (default: the released cards)."""
    start = time.perf_counter()
    out = Path(out)
    if not sources:
        raise UserError("name at least one rank.py output folder")
    _check_out(out, sources)
    data = collect([Path(s) for s in sources], cards)
    n, seed_ = _settings(data.runs, n_resamples, seed)
    if title is None:
        names = [run.path.name for run in data.runs]
        title = "ESC-Eval report: " + (", ".join(names) if len(names) <= 3 else f"{len(names)} runs")
    out.parent.mkdir(parents=True, exist_ok=True)
    building = out.parent / f".{out.name}.building-{os.getpid()}"
    _remove_leftovers(out)
    shutil.rmtree(building, ignore_errors=True)
    try:
        site = _Site(data, building, title, n, seed_)
        index_bytes = site.build()
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            building.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            building.rename(out)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    pages = {k: site.pages.get(k, 0) for k in ("overview", "targets", "dialogues", "compare", "reports")}
    return SiteResult(out / "index.html", pages, time.perf_counter() - start, index_bytes)
