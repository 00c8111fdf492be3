"""`index.html`: each run's headline results (the first table of each report, with its words and its
chart), the judgment counts per task, the targets, and each run's header, models and prompts."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from esc.runinfo import GitInfo, Manifest
from esc.scoring.judge import FAILED, INVALID, VALID
from esc.scoring.rubrics import label
from esc.site.collect import Run
from esc.site.pages import page
from esc.site.result_html import anchor_of, lead, result_html
from esc.site.site import Site

STATUSES = (VALID, INVALID, FAILED)
JUDGE_FIELDS = ("name", "kind", "model", "revision", "prompt")  # a judge identity's, where its kind has them


@page("overview", order=10)
def overview(site: Site) -> None:
    """`index.html`: the headline results of every report, judgment counts, targets, each run."""
    data = site.data
    results = [
        {"run": run.path.name, "task": run.task, "kind": kind, "href": site.report_href(run, kind),
         "body": result_html(lead(report), top=4, metrics=run.log.metrics(),
                             anchor=anchor_of(site.report_href(run, kind)))}
        for run in data.runs
        for kind, report in run.reports.items()
    ]  # fmt: skip
    counts: dict[tuple[str, str], Counter] = defaultdict(Counter)
    keys: dict[tuple[str, str], dict[str, None]] = defaultdict(dict)
    for run in data.runs:
        for j in run.log.judgments:
            counts[(j.task, j.judge)][(j.key, j.status)] += 1
            keys[(j.task, j.judge)].setdefault(j.key)
    judgments = [
        {
            "task": task,
            "judge": judge,
            "rows": [
                {"key": k, "label": label(k), **{s: c[(k, s)] for s in STATUSES}} for k in keys[(task, judge)]
            ],
        }
        for (task, judge), c in counts.items()
    ]
    targets = [
        {
            "target": group[0],
            "roleplayer": group[1],
            "href": site.group_href(group),
            "dialogues": len(entries),
            "judged": sum(1 for e in entries if e.judgments),
            "missing": sum(1 for e in entries if e.dialogue is None),
        }
        for group, entries in sorted(site.groups.items())
    ]
    site.write(
        "index.html",
        "index",
        "overview",
        page_title="Overview",
        results=results,
        judgments=judgments,
        targets=targets,
        runs=[run_summary(site, run) for run in data.runs],
        models=models(site),
        prompts=prompts(site),
        notes=notes_of(site),
    )


def notes_of(site: Site) -> list[str]:
    entries = list(site.data.entries.values())
    notes = []
    missing = sum(1 for e in entries if e.dialogue is None)
    if missing:
        notes.append(
            f"{missing} of {len(entries)} dialogues have no transcript (their dialogue file is gone "
            "or no longer holds them); their judgments are shown."
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
    for task, n in site.data.unmatched.items():
        notes.append(
            f"{n} judgments of task {task} are about dialogues in no dialogue file the runs name (not on "
            "the dialogue pages; counted below, and in its report)."
        )
    return notes


def run_summary(site: Site, run: Run) -> dict[str, Any]:
    """A run as its log's header records it, with its manifest's status, command and times."""
    header, m = run.log.header, run.manifest or Manifest(status="no manifest")
    git = header.git or GitInfo()
    return {
        "path": str(run.path),
        "task": run.task,
        "status": m.status,
        "written": header.written,
        "written_by": header.written_by,
        "judges": [{k: j.get(k) for k in JUDGE_FIELDS} for j in header.judges],
        "commit": git.commit,
        "dirty": git.dirty,
        "seed": header.seed,
        "start": m.start_time,
        "end": m.end_time,
        "command": " ".join(m.command),
        "previous": [p.model_dump(include={"status", "start_time", "end_time"}) for p in m.previous_attempts],
        "judgments": Counter(j.task for j in run.log.judgments),
        "figures": len(run.log.results),
        "reports": [{"kind": kind, "href": site.report_href(run, kind)} for kind in run.reports],
    }


def models(site: Site) -> list[dict[str, Any]]:
    """The chatbots and role-players as the evaluate.py manifests record them (resolved revisions)."""
    rows = []
    for folder, manifest in sorted(site.data.evaluate_manifests.items()):
        config = manifest.config or {}
        for role in ("target", "roleplayer"):
            model = manifest.models.get(role) or {}  # a chat backend's identity: its kind's fields
            rows.append(
                {
                    "role": role,
                    "name": (config.get(role) or {}).get("name"),
                    "folder": str(folder),
                    "model": model.get("name_or_path") or model.get("model"),
                    "revision": model.get("revision"),
                    "adapter": model.get("adapter"),
                    "commit": (manifest.git or GitInfo()).commit,
                }
            )
    unique = {tuple(sorted((k, str(v)) for k, v in r.items() if k != "folder")): r for r in rows}
    return list(unique.values())


def prompts(site: Site) -> list[tuple[str, str, str]]:
    """(what, who, version) of every prompt the runs' judges and the dialogues name."""
    found: set[tuple[str, str, str]] = set()
    for run in site.data.runs:
        for judge in run.log.header.judges:
            prompt = judge.get("prompt")
            if isinstance(prompt, dict):
                who = f"{judge.get('name')} ({run.task})"
                found.add(("judge prompt", who, f"{prompt.get('style')} v{prompt.get('version')}"))
    for entry in site.data.entries.values():
        meta = (entry.dialogue.meta if entry.dialogue else None) or {}
        prompt = meta.get("prompt") or {}
        if prompt:
            found.add(
                ("role-player prompt", entry.roleplayer, f"{prompt.get('id')} v{prompt.get('version')}")
            )
        for key, value in meta.items():  # what else evaluate.py prompted (the seeker's emotion rating)
            if isinstance(value, dict) and "prompt_version" in value:
                found.add((f"{key} prompt", str(value.get("rater")), f"v{value['prompt_version']}"))
    return sorted(found)
