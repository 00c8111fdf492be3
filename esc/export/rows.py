"""One row per dialogue, read from the run logs of rank.py folders (`OUT/run.json`) and the dialogue
files their judgments name: what was played (card, target, role-player, language, every turn, the
seeker's emotion trajectory), every judgment of it in every run, and the runs' identities (judges with
their prompts' versions and checksums, git commit, seed).

Why from the run log: it is the one typed record of a run every view reads (the site, a notebook),
so the dataset says what the report says. Secrets are masked in every string (`esc.secrets`), as in
every file the toolkit writes, even where a model echoed a key into its reply.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from esc.dialogues.record import Dialogue
from esc.dialogues.store import played_by_source
from esc.errors import UserError
from esc.reports.runlog import RUN_LOG, Judgment, RunLog, read_run_log
from esc.secrets.redaction import redact, scrub_strings


def read_runs(folders: Sequence[Path]) -> list[tuple[Path, RunLog]]:
    """Each folder's run log; a folder without one is a UserError naming it (and what to do)."""
    runs = []
    for folder in folders:
        if not (Path(folder) / RUN_LOG).is_file():
            raise UserError(
                f"{folder}: no {RUN_LOG}: not a rank.py folder, or one written before run logs "
                f"(`esc runs upgrade {folder}` gives it one)"
            )
        runs.append((Path(folder), read_run_log(Path(folder))))
    return runs


def _judgment(j: Judgment, run: str) -> dict[str, Any]:
    return {
        "run": run,
        "task": j.task,
        "judge": j.judge,
        "key": j.key,
        "status": j.status,
        "score": None if j.score is None else float(j.score),
        "answer": j.answer,
        "expected": j.expected,
        "turn": j.turn,
    }


def _transcript(d: Dialogue) -> list[dict[str, str]]:
    return [{"speaker": "supporter", "text": d.opener}] * bool(d.opener) + [
        {"speaker": "seeker" if t.speaker == "roleplayer" else "supporter", "text": t.text} for t in d.turns
    ]


def _trajectory(d: Dialogue) -> list[float | None]:
    """The seeker's emotion (0-100) after each rated turn (evaluate.py trajectory.enabled); [] without."""
    return [None if (r or {}).get("value") is None else float(r["value"]) for _, r in d.trajectory()]


def identities(runs: Sequence[tuple[Path, RunLog]]) -> list[dict[str, Any]]:
    """What made each run, masked: task, judges (with their prompts), git commit, seed, packages."""
    return [
        redact(
            {
                "run": folder.name,
                "task": log.task,
                "judges": log.header.get("judges") or [],
                "git": log.header.get("git"),
                "seed": log.header.get("seed"),
                "written": log.header.get("written"),
                "packages": log.header.get("packages"),
            }
        )
        for folder, log in runs
    ]


def dialogue_rows(runs: Sequence[tuple[Path, RunLog]]) -> list[dict[str, Any]]:
    """One row per dialogue any run judged (or lists in its sources), in first-seen order; a dialogue
    whose file is gone keeps its judgments, with an empty transcript and `missing` saying so."""
    rows: dict[str, dict[str, Any]] = {}
    sources: dict[str, str] = {}  # dialogue id -> its file
    for _, log in runs:
        for j in log.judgments:
            for dialogue_id in j.dialogues:
                if j.source:
                    sources.setdefault(dialogue_id, j.source)
    played = played_by_source(set(sources.values()))
    for folder, log in runs:
        run = folder.name
        for j in log.judgments:
            for dialogue_id in j.dialogues:
                row = rows.get(dialogue_id)
                if row is None:
                    row = rows[dialogue_id] = _row(dialogue_id, sources.get(dialogue_id), played, j)
                if run not in row["runs"]:
                    row["runs"].append(run)
                row["judgments"].append(_judgment(j, run))
    return [scrub_strings(row) for row in rows.values()]


def _row(
    dialogue_id: str, source: str | None, played: dict[str, dict[int, Dialogue]], j: Judgment
) -> dict[str, Any]:
    card_id = j.card_id if j.card_id is not None else _card_of(dialogue_id)
    dialogue = played.get(source or "", {}).get(card_id) if card_id is not None else None
    return {
        "dialogue_id": dialogue_id,
        "card_id": card_id,
        "language": dialogue.language if dialogue else j.language,
        "target": dialogue.target if dialogue else j.target,
        "roleplayer": dialogue.roleplayer if dialogue else j.roleplayer,
        "source_file": Path(source).name if source else None,
        "status": dialogue.status if dialogue else None,
        "turns": len(dialogue.turns) if dialogue else None,
        "transcript": _transcript(dialogue) if dialogue else [],
        "trajectory": _trajectory(dialogue) if dialogue else [],
        "meta": json.dumps(dialogue.meta, ensure_ascii=False, sort_keys=True) if dialogue else "{}",
        "missing": None if dialogue else f"the dialogue file {source or '(none named)'} does not hold it",
        "runs": [],
        "judgments": [],
    }


def _card_of(dialogue_id: str) -> int | None:
    tail = dialogue_id.rpartition("/")[2]
    return int(tail) if tail.isdigit() else None
