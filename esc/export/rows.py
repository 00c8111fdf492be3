"""One row per dialogue, read from the run logs of rank.py folders (`OUT/run.json`) and the dialogue
files they name: what was played (card, target, role-player, language, every turn, the seeker's
emotion trajectory), every judgment of it in every run, and the runs' identities (judges with
their prompts' versions and checksums, git commit, seed).

Why from the run log: it is the one typed record of a run every view reads (the site, a notebook),
so the dataset says what the report says. Secrets are masked in every string (`esc.secrets`), as in
every file the toolkit writes, even where a model echoed a key into its reply.

A row is one dialogue of one file: `(source_file, dialogue_id)` is its key. Two runs of one target
and role-player (the same cards played twice with other settings) have files of one name, so their
dialogues share ids: they stay two rows, each with its own run's judgments beside its own
transcript. A run named twice (another spelling, a link) is read once. A dialogue whose file changed
since it was judged says so (`changed`), by the check the site's pages make
(`esc.reports.run_folder.changed_since_judged`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from esc.dialogues.record import Dialogue
from esc.dialogues.store import named_file, played_by_source
from esc.errors import UserError
from esc.reports.run_folder import changed_since_judged, check_latest_run
from esc.reports.runlog import RUN_LOG, Judgment, RunLog, read_run_log
from esc.secrets.redaction import redact, scrub_strings


def read_runs(folders: Sequence[Path]) -> tuple[list[tuple[Path, RunLog]], list[str]]:
    """Each folder's run log, each folder once (by its resolved path), and a warning for each whose
    latest run did not write its log; a folder without one is a UserError naming it (and why)."""
    runs: list[tuple[Path, RunLog]] = []
    warnings, seen = [], set()
    for folder in map(Path, folders):
        if not folder.is_dir():
            raise UserError(f"{folder}: no such run folder (name rank.py output folders)")
        if folder.resolve() in seen:
            continue
        seen.add(folder.resolve())
        warning = check_latest_run(folder)  # a run going, killed or stopped before its log: said so
        if not (folder / RUN_LOG).is_file():
            raise UserError(
                f"{folder}: no {RUN_LOG}: not a rank.py folder, or one written before run logs "
                f"(`esc runs upgrade {folder}` gives it one)"
            )
        runs.append((folder, read_run_log(folder)))
        warnings += [warning] if warning else []
    return runs, warnings


def short_names(paths: Iterable[Path]) -> dict[Path, str]:
    """Each path's shortest tail (`name`, `parent/name`, ...) that no other path of `paths` ends with:
    its name where that is unique (two runs both called `r1`: `a/r1` and `b/r1`)."""
    parts = {p: Path(p).resolve().parts for p in paths}
    names = {}
    for path, own in parts.items():
        others = [o for o in parts.values() if o != own]
        n = next((n for n in range(1, len(own)) if all(o[-n:] != own[-n:] for o in others)), len(own) - 1)
        names[path] = "/".join(own[-max(n, 1) :])
    return names


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
    names = short_names(folder for folder, _ in runs)
    return [
        redact(
            {
                "run": names[folder],
                "task": log.task,
                "judges": log.header.judges,
                "git": None if log.header.git is None else log.header.git.model_dump(exclude_unset=True),
                "seed": log.header.seed,
                "written": log.header.written,
                "packages": log.header.packages,
            }
        )
        for folder, log in runs
    ]


def _sources(log: RunLog) -> list[str]:
    """The dialogue files a run names: those its judgments read, then those its header lists (a
    task that asks about replies or pairs names no file in its judgments)."""
    found = dict.fromkeys(j.source for j in log.judgments if j.source)
    for source in log.header.sources:
        if source.endswith(".jsonl"):
            found.setdefault(source)
    return list(found)


def _held(sources: Sequence[str], played: dict[str, dict[int, Dialogue]]) -> dict[str, list[str]]:
    """Dialogue id (file stem/card, as judgments name it) -> the files of one run that hold it."""
    held: dict[str, list[str]] = {}
    for source in sources:
        for card_id in played.get(source, {}):
            found = held.setdefault(f"{Path(source).stem}/{card_id}", [])
            if all(_file(other) != _file(source) for other in found):
                found.append(source)
    return held


def _source_of(j: Judgment, dialogue_id: str, held: dict[str, list[str]], folder: Path) -> str | None:
    """The file of the dialogue `dialogue_id` that `j` is about: the one it names, else the run's one
    file that holds that id; two (files of one name, read by one run) are refused: the judgment could
    be about either."""
    if j.source and len(j.dialogues) == 1:
        return j.source
    found = held.get(dialogue_id, [])
    if len(found) > 1:
        raise UserError(
            f"{folder}: {found[0]} and {found[1]} both hold dialogue {dialogue_id!r} (files of one name read "
            f"by one run), and a {j.task} judgment names no file: it could be shown beside the wrong "
            "transcript; export runs that read one of them each"
        )
    return found[0] if found else None


def _file(source: str) -> str:
    return str(named_file(source).resolve())


def dialogue_rows(runs: Sequence[tuple[Path, RunLog]]) -> list[dict[str, Any]]:
    """One row per dialogue any run judged, in first-seen order (see the module docstring); a
    dialogue whose file is gone keeps its judgments, with an empty transcript and `missing` saying so."""
    names = short_names(folder for folder, _ in runs)
    sources = {folder: _sources(log) for folder, log in runs}
    played = played_by_source({s for found in sources.values() for s in found})
    files = short_names({Path(_file(s)) for found in sources.values() for s in found})
    rows: dict[tuple[str | None, str], dict[str, Any]] = {}
    shown: dict[tuple[str | None, str], Dialogue | None] = {}  # the dialogue each row shows
    for folder, log in runs:
        run, held = names[folder], _held(sources[folder], played)
        for j in log.judgments:
            for dialogue_id in dict.fromkeys(j.dialogues):
                source = _source_of(j, dialogue_id, held, folder)
                key = (_file(source) if source else None, dialogue_id)
                if key not in rows:
                    card_id = j.card_id if j.card_id is not None else _card_of(dialogue_id)
                    shown[key] = played.get(source or "", {}).get(card_id) if card_id is not None else None
                    label = files[Path(key[0])] if key[0] else None
                    rows[key] = _row(dialogue_id, card_id, source, label, shown[key], j)
                row = rows[key]
                if run not in row["runs"]:
                    row["runs"].append(run)
                row["judgments"].append(_judgment(j, run))
                row["changed"] = row["changed"] or changed_since_judged(j, dialogue_id, shown[key])
    return [scrub_strings(row) for row in rows.values()]


def _row(
    dialogue_id: str, card_id: int | None, source: str | None, label: str | None, dialogue: Dialogue | None,
    j: Judgment,
) -> dict[str, Any]:  # fmt: skip
    return {
        "dialogue_id": dialogue_id,
        "card_id": card_id,
        "language": dialogue.language if dialogue else j.language,
        "target": dialogue.target if dialogue else j.target,
        "roleplayer": dialogue.roleplayer if dialogue else j.roleplayer,
        "source_file": label,
        "status": dialogue.status if dialogue else None,
        "turns": len(dialogue.turns) if dialogue else None,
        "transcript": _transcript(dialogue) if dialogue else [],
        "trajectory": _trajectory(dialogue) if dialogue else [],
        "meta": json.dumps(dialogue.meta, ensure_ascii=False, sort_keys=True) if dialogue else "{}",
        "missing": None if dialogue else f"the dialogue file {source or '(none named)'} does not hold it",
        "changed": False,
        "runs": [],
        "judgments": [],
    }


def _card_of(dialogue_id: str) -> int | None:
    tail = dialogue_id.rpartition("/")[2]
    return int(tail) if tail.isdigit() else None
