"""One output folder: one run at a time, and one set of output-shaping settings for all its runs.

Rerunning a command into the same folder resumes it; that is only safe when the rerun would produce
the same kind of outputs. So each folder records, in `OUT/settings.json`, a fingerprint of what shapes
its outputs (prompts and their versions, model identities and revisions, generation settings, turns,
context policy, judge, rubric version, training recipe...), one entry per kind of job. A rerun whose
settings differ stops with one line naming the first difference, before any work.

A second process on the same folder stops at once (`OUT/.lock`, an OS-level lock that dies with its
process, so a killed run leaves no stale lock behind).
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from filelock import FileLock, Timeout

from esc.errors import ConfigError, UserError
from esc.jsonl import atomic_write_text
from esc.runinfo import now

log = logging.getLogger(__name__)

SETTINGS_FILE = "settings.json"
LOCK_FILE = ".lock"
OWNER_FILE = ".lock.owner"
NEW_FOLDER_HINT = "start a new folder (hydra.run.dir=NEW_DIR), or rerun with the folder's settings to resume"


def flatten(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, leaf value) pairs in the mapping's own order; lists are leaves."""
    if isinstance(obj, Mapping) and obj:
        for key, value in obj.items():
            yield from flatten(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, obj


def first_difference(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, Any, Any] | None:
    """The first (key, old value, new value) that differs, in the recorded order; None if equal."""
    old_flat, new_flat = dict(flatten(old)), dict(flatten(new))
    for key in [*old_flat, *(k for k in new_flat if k not in old_flat)]:
        if old_flat.get(key, "<absent>") != new_flat.get(key, "<absent>"):
            return key, old_flat.get(key, "<absent>"), new_flat.get(key, "<absent>")
    return None


def _plain(obj: Any) -> Any:
    """JSON round trip: tuples become lists, so recorded and fresh settings compare equal."""
    return json.loads(json.dumps(obj, sort_keys=False, default=str))


def read_settings(folder: Path) -> dict[str, Any]:
    path = Path(folder) / SETTINGS_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not a settings record ({err}); {NEW_FOLDER_HINT}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a settings record (expected an object); {NEW_FOLDER_HINT}")
    return data


def check_same_settings(
    recorded: Mapping[str, Any], settings: Mapping[str, Any], where: str, hint: str = NEW_FOLDER_HINT
) -> None:
    """UserError naming the first difference between two fingerprints."""
    diff = first_difference(_plain(recorded), _plain(settings))
    if diff is not None:
        key, old, new = diff
        raise UserError(
            f"{where} was written with {key}={json.dumps(old, default=str)}, this run has "
            f"{key}={json.dumps(new, default=str)}: {hint}"
        )


class RunFolder:
    """Lock `folder` for this process and check (or record) the settings fingerprint of `kind`.

    `kind` names the job (`evaluate`, `rank.score`, `train`...): one folder may hold the outputs of
    several kinds (a rank.py folder scored, then its leaderboard rebuilt), each with its own entry.
    `settings=None` locks without a fingerprint (jobs whose outputs are rewritten whole each run).
    Use as a context manager; `lock=False` only checks (ranks other than zero of a training job).
    """

    def __init__(
        self, folder: str | os.PathLike[str], kind: str, settings: Mapping[str, Any] | None, lock: bool = True
    ) -> None:
        self.folder = Path(folder)
        self.kind = kind
        self.settings = _plain(dict(settings)) if settings is not None else None
        self.lock = lock
        self._lock: FileLock | None = None

    def __enter__(self) -> RunFolder:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if self.lock:
                self._acquire()
            self._check_or_record()
        except PermissionError as err:
            self.release()
            raise UserError(f"{self.folder}: cannot write the run folder ({err.strerror})") from None
        except BaseException:
            self.release()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def _acquire(self) -> None:
        lock = FileLock(self.folder / LOCK_FILE, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            owner = self._owner()
            raise UserError(
                f"{self.folder} is in use by another run ({owner}); wait for it to end, or use another "
                "folder (hydra.run.dir=NEW_DIR)"
            ) from None
        self._lock = lock
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": now(), "kind": self.kind}
        atomic_write_text(self.folder / OWNER_FILE, json.dumps(info) + "\n")

    def _owner(self) -> str:
        try:
            info = json.loads((self.folder / OWNER_FILE).read_text(encoding="utf-8"))
            kind, pid, host, since = (info.get(k) for k in ("kind", "pid", "host", "since"))
            return f"{kind}: pid {pid} on {host} since {since}"
        except (OSError, ValueError):
            return "owner unknown"

    def _check_or_record(self) -> None:
        if self.settings is None:
            return
        recorded = read_settings(self.folder)
        if self.kind in recorded:
            before = {k: v for k, v in recorded[self.kind].items() if k in self.settings}
            check_same_settings(before, self.settings, str(self.folder))
            return
        self._write({**recorded, self.kind: self.settings})

    def check_resolved(self, resolved: Mapping[str, Any]) -> None:
        """Second phase, once the models are loaded: what only loading can tell (the commit a hub
        model resolved to, the hash of a model built on first use), under the kind's `resolved`
        entry. Checked against the record, or recorded on the first run."""
        if self.settings is None:
            return
        resolved = _plain(dict(resolved))
        recorded = read_settings(self.folder)
        entry = recorded.get(self.kind, {})
        if "resolved" in entry:
            check_same_settings({"resolved": entry["resolved"]}, {"resolved": resolved}, str(self.folder))
        else:
            self._write({**recorded, self.kind: {**entry, "resolved": resolved}})

    def _write(self, recorded: Mapping[str, Any]) -> None:
        if self.lock:  # only the lock holder writes; other ranks of a training job only check
            text = json.dumps(recorded, indent=2, ensure_ascii=False, default=str) + "\n"
            atomic_write_text(self.folder / SETTINGS_FILE, text)

    def release(self) -> None:
        if self._lock is not None:
            (self.folder / OWNER_FILE).unlink(missing_ok=True)
            self._lock.release()
            self._lock = None


#: identity fields that are not settings: they change with a package upgrade or a code fix (the
#: request cache keys on them, the manifest records them)
NOT_SETTINGS = frozenset({"code_version", "packages"})
#: a revision resolved from what is on disk is only known for sure once the model is loaded (a hub
#: model not downloaded yet has none): phase two (`RunFolder.check_resolved`) checks it
RESOLVED = frozenset({"revision", "revision_source"})


def model_settings(identity: Any) -> Any:
    """A backend's or judge's identity without the fields that are not settings (at any depth):
    code and package versions, and resolved revisions (a configured revision label stays)."""
    if isinstance(identity, Mapping):
        drop = NOT_SETTINGS | (RESOLVED if "revision_source" in identity else frozenset())
        return {k: model_settings(v) for k, v in identity.items() if k not in drop}
    if isinstance(identity, list | tuple):
        return [model_settings(v) for v in identity]
    return identity


def resolved_revision(identity: Mapping[str, Any]) -> dict[str, Any]:
    return {"revision": identity.get("revision"), "revision_source": identity.get("revision_source")}


def refuse_unswept_sweep() -> None:
    """An experiment that is a sweep (`hydra.sweeper.params`) must run with `-m`, or with every swept
    key given on the command line (one cell of the grid); otherwise it would silently run defaults."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return
    hydra_cfg = HydraConfig.get()
    params = dict(hydra_cfg.sweeper.get("params") or {}) if "sweeper" in hydra_cfg else {}
    if hydra_cfg.mode != RunMode.RUN or not params:
        return
    given = {str(o).lstrip("+~").split("=", 1)[0] for o in hydra_cfg.overrides.task}
    missing = [key for key in params if key not in given]
    if missing:
        key = missing[0]
        raise ConfigError(
            f"hydra.sweeper.params.{key}",
            f"this experiment sweeps {key} over {params[key]}: add -m to run the sweep, or pick one "
            f"cell with {key}=VALUE",
        )
