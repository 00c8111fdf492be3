"""A rank.py folder as its readers find it (`esc report`, `esc export`), issue 62.

Whether its run log is its latest run's: rank.py writes `OUT/run.json` when a run ends, so a run
still going, one killed (kill -9, a lost node: its manifest still says `running` and no process
holds the folder) or one that stopped (`interrupted`, `failed`) leaves the log of an earlier run, or
none; a reader says which instead of reading an old log without a word, or sending the user to
`esc runs upgrade`, which is for folders written before run logs.

Whether a dialogue changed since it was judged: a judgment of a whole dialogue keeps the hash of
the lines its judge read (`content_sha`); a dialogue file rewritten since shows other lines than
the ones judged. The one check, for the site's pages and the export's rows alike.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from pathlib import Path
from typing import Any

from esc.dialogues.record import Dialogue
from esc.errors import UserError
from esc.reports.runlog import RUN_LOG, Judgment
from esc.rundir import MANIFEST_FILE, OWNER_FILE
from esc.runinfo import read_manifest
from esc.scoring.judge import ScoreItem

FINISHED = ("completed", "completed_with_failures")


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _holder(folder: Path) -> str | None:
    """Who holds the folder (`esc.rundir`'s lock owner: `pid P on HOST since T`), None when no live
    process does. Another host's process cannot be asked: it is taken as alive."""
    owner = _json(folder / OWNER_FILE)
    pid, host = owner.get("pid"), owner.get("host")
    if not isinstance(pid, int) or not host:
        return None
    if host == socket.gethostname():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:  # another user's process
            pass
    return f"pid {pid} on {host} since {owner.get('since')}"


def _started_after(log: Path, started: Any) -> bool:
    """Whether the run that started at `started` (ISO time) began after `log` was written."""
    try:
        start = dt.datetime.fromisoformat(str(started))
    except ValueError:
        return True  # no time to compare: the run did not finish, its log cannot be its own
    if start.tzinfo is None:
        start = start.replace(tzinfo=dt.timezone.utc)
    return log.stat().st_mtime < start.timestamp()


def check_latest_run(folder: Path) -> str | None:
    """None when `folder`'s run log is its latest run's (or nothing tells otherwise: no manifest, or
    one without a status; a manifest that does not read is the DataError of `read_manifest`);
    a warning when its latest run is going, was killed or stopped, so that the log read is an
    earlier run's; a UserError when it has no run log for that reason. A folder with no log and a
    finished run (written before run logs) is left to `read_run_log`, which says how to give it one."""
    folder = Path(folder)
    if not (folder / MANIFEST_FILE).is_file():
        return None
    manifest = read_manifest(folder / MANIFEST_FILE)
    status, started = manifest.status, manifest.start_time
    if status is None or status in FINISHED:
        return None
    holder = _holder(folder) if status == "running" else None
    if holder:
        state = f"is still going ({holder})"
    elif status == "running":
        state = "was killed (its manifest still says running, and no process holds the folder)"
    else:
        state = f"ended {status}"
    log = folder / RUN_LOG
    if not log.is_file():
        if holder:
            raise UserError(
                f"{folder}: its run is still going ({holder}): no run log yet; read it when it ends"
            )
        raise UserError(
            f"{folder}: its run (started {started}) {state} before it wrote its run log; rerun rank.py on "
            "the folder (it resumes), then read it"
        )
    if not _started_after(log, started):
        return None  # the log was written by this run, which ended before its manifest said so
    return f"{folder}: its latest run (started {started}) {state}: this reads the run log of an earlier run"


def whole(judgment: Judgment) -> bool:
    """Whether a judgment is about one dialogue as a whole (not one of its replies, not a pair)."""
    return len(judgment.dialogues) == 1 and judgment.turn is None


def judged_sha(dialogue_id: str, dialogue: Dialogue) -> str:
    """The hash a judgment of the whole dialogue keeps of the lines it read (`ScoreItem.content_sha`:
    the lines only; the question asked is not part of it)."""
    return ScoreItem(dialogue_id, "", dialogue.language, tuple(dialogue.lines())).content_sha


def changed_since_judged(judgment: Judgment, dialogue_id: str, dialogue: Dialogue | None) -> bool:
    """Whether `dialogue` (as its file holds it now) is not the dialogue `judgment` was made on: a
    judgment of the whole dialogue, read from a named file, whose hash of the lines differs."""
    if dialogue is None or not judgment.source or not whole(judgment) or judgment.content_sha is None:
        return False
    return judgment.content_sha != judged_sha(dialogue_id, dialogue)
