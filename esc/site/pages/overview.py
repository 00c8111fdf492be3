"""`index.html`: the Table 2 leaderboard with intervals and its charts (inline SVG), judgment counts,
the targets, and each run's manifest, models, prompts and reports."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from esc.scoring.judge import FAILED, INVALID, VALID
from esc.scoring.rubrics import dimension
from esc.site.collect import Run
from esc.site.pages import page
from esc.site.site import Site, svg, tex_safe
from esc.tasks.score.leaderboard import TABLE_ORDER, Row, chart_figures, one_answer_note

STATUSES = (VALID, INVALID, FAILED)


@page("overview", order=10)
def overview(site: Site) -> None:
    """`index.html`: the Table 2 leaderboard with intervals, its charts, judgment counts, each run."""
    data = site.data
    rows, board = site.leaderboard_rows, site.board
    several = len({r.judge for r in rows}) > 1
    reports = {id(run): [{"kind": kind, "href": site.report_href(run, kind)} for kind in run.reports]
               for run in data.runs}  # fmt: skip
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
    for group, entries in sorted(site.groups.items()):
        judged = sum(1 for e in entries if e.scores)
        targets.append(
            {
                "target": group[0],
                "roleplayer": group[1],
                "href": site.group_href(group),
                "dialogues": len(entries),
                "judged": judged,
                "missing": sum(1 for e in entries if e.dialogue is None),
            }
        )
    notes = notes_of(site)
    site.write(
        "index.html",
        "index",
        "overview",
        page_title="Overview",
        board=board,
        one_answer=one_answer_note(rows) if rows else "",
        several_judges=several,
        dim_names=[dimension(k).paper_name for k in TABLE_ORDER],
        charts=charts(rows) if rows else [],
        judgments=judgments,
        targets=targets,
        runs=[run_summary(run, reports[id(run)]) for run in data.runs],
        models=models(site),
        prompts=prompts(site),
        notes=notes,
        n_resamples=site.n_resamples,
        report_links=[{"run": run.path.name, **link} for run in data.runs for link in reports[id(run)]],
    )


def notes_of(site: Site) -> list[str]:
    entries = list(site.data.entries.values())
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
    if not site.data.cards_known:
        notes.append("The role cards could not be read (`make data`): every topic and source is unknown.")
    else:
        unknown = sum(1 for e in entries if e.card is None)
        if unknown:
            notes.append(f"{unknown} dialogues have no known role card: topic and source unknown.")
    for kind, n in site.data.unmatched.items():
        if n:
            notes.append(f"{n} {kind} judgments name a dialogue that is not on this site (left out).")
    return notes


def run_summary(run: Run, reports: list[dict[str, str]]) -> dict[str, Any]:
    m = run.manifest or {}
    judge = m.get("judge")
    judges = judge if isinstance(judge, list) else [judge] if isinstance(judge, dict) else []
    git = m.get("git") or {}
    return {
        "path": str(run.path),
        "mode": run.mode or "unknown",
        "status": m.get("status", "no manifest"),
        "judges": [{k: j.get(k) for k in ("name", "kind", "model", "revision", "prompt")} for j in judges],
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
        "modes": modes_of(run.settings),
    }


def models(site: Site) -> list[dict[str, Any]]:
    """The chatbots and role-players as the evaluate.py manifests record them (resolved revisions)."""
    rows = []
    for folder, manifest in sorted(site.data.evaluate_manifests.items()):
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


def prompts(site: Site) -> list[tuple[str, str, str]]:
    """(what, who, version) of every prompt the records and dialogues name."""
    found: set[tuple[str, str, str]] = set()

    def judge_prompt(what: str, records: Iterable[Any]) -> None:
        for r in records:
            if r is not None and isinstance(r.prompt, dict):
                found.add((what, r.judge, f"{r.prompt.get('style')} v{r.prompt.get('version')}"))

    judge_prompt("judge prompt", site.data.records)
    seen_meta = set()
    for entry in site.data.entries.values():
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


def charts(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per language: the leaderboard's radar and bar chart (`esc.tasks.score.leaderboard.chart_figures`),
    in SVG."""
    charts: dict[str, dict[str, Any]] = {}
    for language, kind, fig in chart_figures(rows, tex_safe):
        key = "radar" if kind == "radar" else "bar"
        charts.setdefault(language, {"language": language})[key] = svg(fig, f"{key}-{language}")
    return list(charts.values())


def _short(value: Any, width: int = 40) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def modes_of(settings: Mapping[str, Any]) -> list[dict[str, Any]]:
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
