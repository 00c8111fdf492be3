"""`esc runs upgrade`: a rank.py folder written before run logs gets its OUT/run.json, once.

The log is built as `run_mode` builds it (`esc.tasks.run_log.build_run_log`), from the folder's
manifest, settings, stores and reports, so an upgraded folder reads like one written today.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from esc.errors import DataError, UserError
from esc.jsonl import read_json
from esc.reports.runlog import FORMAT, RUN_LOG, RunLog, read_run_log, write_run_log
from esc.rundir import LOCK_FILE, OWNER_FILE, folder_lock
from esc.tasks.run_log import MANIFEST, build_run_log
from esc.tasks.task import modes


def upgrade_run_folder(folder: Path, new: Path | None = None, force: bool = False) -> tuple[Path, RunLog]:
    """Give a rank.py folder written before run logs its OUT/run.json, built as `run_mode` builds it
    (`esc.tasks.run_log`), from its manifest, settings, stores and reports; in place (only run.json
    is added), or into a copy `new`. A UserError (one line) for what it cannot convert: not a rank.py
    folder, a mode this version does not know, a store or report that does not read, a folder that
    already has a current run log, a run.json it cannot read (without `force`). Returns the log's
    path and the log. The folder is locked while it is read (a run still writing it is refused)."""
    folder = Path(folder)
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise UserError(f"{folder}: not a rank.py run folder (no {MANIFEST})")
    with folder_lock(folder, "runs.upgrade"):
        return _upgrade(folder, new, force)


def _upgrade(folder: Path, new: Path | None, force: bool) -> tuple[Path, RunLog]:
    manifest_path = folder / MANIFEST
    manifest = read_json(manifest_path)
    config = manifest.get("config") if isinstance(manifest, dict) else None
    if not isinstance(config, dict) or "mode" not in config:
        raise DataError(manifest_path, None, "not the manifest of a rank.py run (its config names no `mode`)")
    mode = modes().get(config["mode"]) if isinstance(config["mode"], str) else None
    if mode is None:
        raise DataError(
            manifest_path, None, f"mode {config['mode']!r} is none this version knows ({', '.join(modes())})"
        )
    if (folder / RUN_LOG).is_file():
        try:
            read_run_log(folder / RUN_LOG)
        except UserError:
            if not force:  # not a log this version reads: whoever made it, it is not overwritten silently
                raise UserError(
                    f"{folder / RUN_LOG}: not a run log this version reads ({FORMAT}); move it aside, or "
                    "pass --force to replace it"
                ) from None
        else:
            raise UserError(f"{folder / RUN_LOG}: the folder already has a run log ({FORMAT}); nothing to do")
    if new is not None and Path(new).exists():
        raise UserError(f"{new}: --out exists; name a new folder")
    if new is not None and Path(new).resolve().is_relative_to(folder.resolve()):
        raise UserError(f"{new}: --out is inside {folder}; name a folder outside it")
    # every refusal comes before anything is written
    log = build_run_log(mode, folder, "esc runs upgrade", modes())
    if not log.reports:
        names = ", ".join(f"{kind}.result.json" for kind in mode.reports)
        raise UserError(
            f"{folder}: no report of its mode={mode.name} ({names}): its run did not finish; rerun it"
        )
    if new is not None:
        shutil.copytree(
            folder, new, symlinks=True, ignore=shutil.ignore_patterns(RUN_LOG, LOCK_FILE, OWNER_FILE)
        )
        folder = new
    return write_run_log(folder, log), log
