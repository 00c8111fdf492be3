"""One output folder: one run at a time, and one set of output-shaping settings for all its runs.

Rerunning a command into the same folder resumes it; that is only safe when the rerun would produce
the same kind of outputs. So each folder records, in `OUT/settings.json`, a fingerprint of what shapes
its outputs (prompts and their versions, model identities and revisions, generation settings, turns,
context policy, judge, rubric version, training recipe...), one entry per kind of job. A rerun whose
settings differ stops with one line naming the first difference, before any work.

A second process on the same folder stops at once (`OUT/.lock`, an OS-level lock that dies with its
process, so a killed run leaves no stale lock behind). While a run holds its folder, SIGTERM (a
`timeout`, `scancel`, a scheduler's time limit) stops it as Ctrl-C does (`Terminated`): the manifest
records the stop and the lock's owner file goes, instead of both lying about a run that is gone.

A refused or failed start leaves the folder as it was, and a folder the run made (Hydra makes
`hydra.run.dir` before the job starts) is removed again when the start is refused
(`RemoveRefusedRunFolder`, `remove_created_folders`). Nothing of a run reaches the folder before it
is accepted (locked, settings checked): Hydra's record of the job (`.hydra/`, `esc.masking`) is
written then, and its log file (`FolderLogHandler`) opened then. A start that fails after that but
before any work (no output file changed: a value only the Trainer checks, a model that does not load,
rank.py's `max_cost`, checked once the mode has planned its score files) puts the folder's records
back -- settings, manifest, `.hydra/`, logs -- so it pins no settings, and removes what it made empty
(a `scores/` folder, the lock file of a folder that had none, a folder `RunFolder` made itself).

A settings difference is named by the config key a user sets, when the job says how its fingerprint's
keys map to them (`config_keys`: evaluate.py keeps a side's backend identity under `target.model`,
which the user sets as `target.backend`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from filelock import FileLock, Timeout
from hydra.experimental.callback import Callback

from esc.errors import ConfigError, UserError
from esc.jsonl import atomic_write_bytes, atomic_write_text
from esc.masking import HYDRA_SUBDIR, save_hydra_files
from esc.runinfo import now

log = logging.getLogger(__name__)

SETTINGS_FILE = "settings.json"
LOCK_FILE = ".lock"
OWNER_FILE = ".lock.owner"
MANIFEST_FILE = "manifest.json"
NEW_FOLDER_HINT = "start a new folder (hydra.run.dir=NEW_DIR), or rerun with the folder's settings to resume"


class _NotSet:
    """The value of a key one fingerprint has and the other has not."""

    def __repr__(self) -> str:
        return "NOT_SET"


NOT_SET: Any = _NotSet()


def first_difference(
    old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = ""
) -> tuple[str, Any, Any] | None:
    """The first (dotted key, old value, new value) that differs, in the recorded order (keys only
    the new one has after the recorded ones); None if equal. The values are those at the deepest
    key both have: a leaf on one side and a mapping on the other (`extra_body: null` recorded,
    `extra_body: {top_k: 1}` now) are shown whole; `NOT_SET` where one side lacks the key."""
    for key in [*old, *(k for k in new if k not in old)]:
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in old or key not in new:
            return dotted, old.get(key, NOT_SET), new.get(key, NOT_SET)
        before, now = old[key], new[key]
        if isinstance(before, Mapping) and isinstance(now, Mapping):
            found = first_difference(before, now, dotted)
            if found is not None:
                return found
        elif before != now:
            return dotted, before, now
    return None


def config_key(key: str, config_keys: Mapping[str, str] | None) -> str:
    """The config key a user sets for the fingerprint key `key`: the longest prefix of `key` (whole
    dotted parts) that `config_keys` maps, replaced (``target.model`` -> ``target.backend``: the
    fingerprint keeps a side's backend identity under `model`); `key` itself when none does."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        mapped = (config_keys or {}).get(".".join(parts[:n]))
        if mapped is not None:
            return ".".join([mapped, *parts[n:]])
    return key


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
    recorded: Mapping[str, Any], settings: Mapping[str, Any], where: str, hint: str = NEW_FOLDER_HINT,
    config_keys: Mapping[str, str] | None = None,
) -> None:  # fmt: skip
    """UserError naming the first difference between two fingerprints, by the config key the user
    sets (`config_key`; the fingerprint's own key after it, in settings.json, where they differ)."""
    diff = first_difference(_plain(recorded), _plain(settings))
    if diff is None:
        return
    key, old, new = diff
    name = config_key(key, config_keys)
    stored = f" ({SETTINGS_FILE}: {key})" if name != key else ""
    raise UserError(
        f"{where} was written with {_setting(name, old)}, this run has {_setting(name, new)}{stored}: {hint}"
    )


def _setting(key: str, value: Any) -> str:
    return f"{key} not set" if value is NOT_SET else f"{key}={json.dumps(value, default=str)}"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt, so that every path that ends an
    interrupted run cleanly (the manifest's status, the lock, one `error:` line) ends this one too."""

    exit_code = 128 + signal.SIGTERM  # the shell's convention, as 130 for Ctrl-C


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While the block runs, SIGTERM raises `Terminated` in the main thread; the first one only: later
    ones (SLURM and `srun` may signal more than once before their SIGKILL) are ignored, so they cannot
    cut short the cleanup the first one started. A handler someone else installed (submitit's, which
    bypasses SIGTERM on purpose) is left alone, as is a process that is not in its main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield
        return

    def stop(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class RunFolder:
    """Lock `folder` for this process and check (or record) the settings fingerprint of `kind`.

    `kind` names the job (`evaluate`, `rank.score`, `train`...): one folder may hold the outputs of
    several kinds (a rank.py folder scored, then its leaderboard rebuilt), each with its own entry.
    `settings=None` locks without a fingerprint (jobs whose outputs are rewritten whole each run).
    Use as a context manager; `lock=False` only checks (ranks other than zero of a training job).
    `config_keys`: fingerprint key prefixes -> the config keys a user sets (`config_key`), for the
    error that names a difference.

    A start refused or failed before any work (an exception out of the block, no output changed)
    leaves the folder as it was (`FolderState.restore_if_no_work`): its records put back, the empty
    files and folders it made removed, the lock file too when the folder had none, and the folder
    itself (and its parents) when this made it.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        kind: str,
        settings: Mapping[str, Any] | None,
        lock: bool = True,
        config_keys: Mapping[str, str] | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.kind = kind
        self.settings = _plain(dict(settings)) if settings is not None else None
        self.lock = lock
        self.config_keys = dict(config_keys or {})
        self._lock: FileLock | None = None
        self._before: FolderState | None = None
        self._made: list[Path] = []  # the folders `__enter__` made, deepest first
        self._new_lock = False  # the lock file is this run's: the folder had none
        self._restored = False  # a start stopped before any work, its folder put back
        self._signals = contextlib.ExitStack()

    def __enter__(self) -> RunFolder:
        self._signals.enter_context(sigterm_interrupts())
        try:
            self._made = missing_folders(self.folder)
            self.folder.mkdir(parents=True, exist_ok=True)
            if self.lock:
                self._new_lock = not (self.folder / LOCK_FILE).exists()
                self._acquire()
                self._before = FolderState.read(self.folder)
            self._check_or_record()
            self._accept()
        except PermissionError as err:
            self._undo()
            self.release()
            raise UserError(
                f"{self.folder}: cannot write the run folder ({err.strerror}); choose a writable folder "
                "(hydra.run.dir=NEW_DIR)"
            ) from None
        except BaseException:
            self._undo()
            self.release()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is not None:
                self._undo()
        finally:
            self.release()

    def _accept(self) -> None:
        """The run may go on: now Hydra's record of it (written by the lock holder only) and its log
        reach the folder."""
        if self.lock:
            save_hydra_files(self.folder)
        open_folder_logs(self.folder)

    def _undo(self) -> None:
        """A start that failed before any work: put the folder's records back as they were."""
        if self._before is None:
            return
        try:
            restored = self._before.restore_if_no_work(self.folder)
            if restored is not None:
                hold_folder_logs(self.folder)
                self._restored = True
            if restored:
                log.info("%s: stopped before any work; its records are put back as they were", self.folder)
        except OSError as err:  # a full disk, say: the error that stopped the run says more
            log.warning("%s: could not put the folder's records back (%s)", self.folder, err)
        self._before = None

    def _acquire(self) -> None:
        self._lock = acquire_folder(self.folder, self.kind, "(hydra.run.dir=NEW_DIR)")

    def _check_or_record(self) -> None:
        if self.settings is None:
            return
        recorded = read_settings(self.folder)
        if self.kind in recorded:
            # every recorded setting but the second phase's (`check_resolved`): a setting this run
            # leaves out (trajectory.enabled=false on a rated folder) is a difference too
            before = {k: v for k, v in recorded[self.kind].items() if k in self.settings or k != "resolved"}
            check_same_settings(before, self.settings, str(self.folder), config_keys=self.config_keys)
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
            check_same_settings(
                {"resolved": entry["resolved"]}, {"resolved": resolved}, str(self.folder),
                config_keys=self.config_keys,
            )  # fmt: skip
        else:
            self._write({**recorded, self.kind: {**entry, "resolved": resolved}})

    def _write(self, recorded: Mapping[str, Any]) -> None:
        if self.lock:  # only the lock holder writes; other ranks of a training job only check
            text = json.dumps(recorded, indent=2, ensure_ascii=False, default=str) + "\n"
            atomic_write_text(self.folder / SETTINGS_FILE, text)

    def release(self) -> None:
        try:
            if self._lock is not None:
                (self.folder / OWNER_FILE).unlink(missing_ok=True)
                if self._restored and self._new_lock:  # the folder had none: it goes, unlinked while
                    # held, so a run starting now makes its own (one that opened this one in the same
                    # instant would lock a file no later run sees: tolerated, on a folder just begun)
                    (self.folder / LOCK_FILE).unlink(missing_ok=True)
                self._lock.release()
                self._lock = None
            if self._restored:
                remove_empty_folders(self._made)
        finally:
            self._restored = False
            self._signals.close()  # SIGTERM ends the process again, as before the run


def missing_folders(folder: Path) -> list[Path]:
    """`folder` and its parents that do not exist yet, deepest first: what a `mkdir(parents=True)`
    of it makes."""
    missing, folder = [], Path(folder).absolute()
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def remove_empty_folders(folders: Iterable[Path]) -> None:
    """Remove each of `folders` (deepest first) while it is empty; stop at the first that is not."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (another run's lock, a file someone put there), or gone
            break


def acquire_folder(folder: Path, kind: str, elsewhere: str = "") -> FileLock:
    """The folder's lock, held by this process (its owner recorded: kind, pid, host, since); a
    UserError naming the other owner when another process holds it. `elsewhere`: how to name
    another folder, for the error."""
    lock = FileLock(Path(folder) / LOCK_FILE, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise UserError(
            f"{folder} is in use by another run ({_owner(Path(folder))}); wait for it to end, or use "
            f"another folder {elsewhere}".rstrip()
        ) from None
    info = {"pid": os.getpid(), "host": socket.gethostname(), "since": now(), "kind": kind}
    atomic_write_text(Path(folder) / OWNER_FILE, json.dumps(info) + "\n")
    return lock


@contextlib.contextmanager
def folder_lock(folder: Path, kind: str) -> Iterator[None]:
    """Hold the folder's lock (`acquire_folder`) for a job that changes a folder no run may be
    writing (`esc runs upgrade` in place), released after."""
    lock = acquire_folder(folder, kind)
    try:
        yield
    finally:
        (Path(folder) / OWNER_FILE).unlink(missing_ok=True)
        lock.release()


def _owner(folder: Path) -> str:
    try:
        info = json.loads((folder / OWNER_FILE).read_text(encoding="utf-8"))
        kind, pid, host, since = (info.get(k) for k in ("kind", "pid", "host", "since"))
        return f"{kind}: pid {pid} on {host} since {since}"
    except (OSError, ValueError):
        return "owner unknown"


def _is_lock(rel: Path) -> bool:
    return rel.as_posix() in (LOCK_FILE, OWNER_FILE)


def _is_temp(rel: Path) -> bool:
    return rel.name.startswith(".") and rel.name.endswith(".tmp")  # a file being replaced (esc.jsonl)


def _is_record(rel: Path) -> bool:
    """The folder's records of its attempts, rewritten by each: settings, manifest, Hydra's `.hydra/`."""
    return rel.as_posix() in (SETTINGS_FILE, MANIFEST_FILE) or rel.parts[0] == HYDRA_SUBDIR


def _is_log(rel: Path) -> bool:
    return len(rel.parts) == 1 and rel.suffix == ".log"


@dataclasses.dataclass(frozen=True)
class FolderState:
    """A run folder before an attempt: its records (settings, manifest, `.hydra/`) by content, its
    logs by size, every other file (the outputs) by size and modification time, and its folders."""

    records: dict[Path, bytes]
    logs: dict[Path, int]
    outputs: dict[Path, tuple[int, int]]
    folders: frozenset[Path] = frozenset()

    @classmethod
    def read(cls, folder: Path) -> FolderState:
        records, logs, outputs = {}, {}, {}
        found = sorted(folder.rglob("*"))
        folders = frozenset(p.relative_to(folder) for p in found if p.is_dir())
        for path in (p for p in found if p.is_file()):
            rel = path.relative_to(folder)
            if _is_lock(rel) or _is_temp(rel):
                continue
            if _is_record(rel):
                records[rel] = path.read_bytes()
            elif _is_log(rel):
                logs[rel] = path.stat().st_size
            else:
                stat = path.stat()
                outputs[rel] = (stat.st_size, stat.st_mtime_ns)
        return cls(records, logs, outputs, folders)

    def restore_if_no_work(self, folder: Path) -> int | None:
        """When no output changed since (files created empty aside), put the records and logs back
        as they were and remove those empty files, and the folders made since that are empty then
        (a mode's `scores/`); the number of files and folders put back. None when an output changed:
        the attempt keeps its records, as its outputs were made with the settings recorded."""
        now = FolderState.read(folder)
        new_empty = [rel for rel, (size, _) in now.outputs.items() if rel not in self.outputs and not size]
        if {k: v for k, v in now.outputs.items() if k not in new_empty} != self.outputs:
            return None
        changed = 0
        for rel in [*new_empty, *(r for r in now.records if r not in self.records)]:
            (folder / rel).unlink(missing_ok=True)
            changed += 1
        for rel, data in self.records.items():
            if now.records.get(rel) != data:
                atomic_write_bytes(folder / rel, data)
                changed += 1
        for rel, size in now.logs.items():
            if rel not in self.logs:
                (folder / rel).unlink(missing_ok=True)
                changed += 1
            elif size > self.logs[rel]:
                os.truncate(folder / rel, self.logs[rel])
                changed += 1
        hydra_dir = folder / HYDRA_SUBDIR
        if not any(rel.parts[0] == HYDRA_SUBDIR for rel in self.records) and hydra_dir.is_dir():
            with contextlib.suppress(OSError):  # not empty: files of another kind stay
                hydra_dir.rmdir()
        made = [rel for rel in now.folders if rel not in self.folders and rel.parts[0] != HYDRA_SUBDIR]
        for rel in sorted(made, key=lambda r: len(r.parts), reverse=True):  # deepest first
            with contextlib.suppress(OSError):  # not empty: a file the attempt did not make stays
                (folder / rel).rmdir()
                changed += 1
        return changed


class FolderLogHandler(logging.FileHandler):
    """Hydra's job log (`OUT/<job>.log`, conf/hydra/job_logging/esc.yaml), written only once a `RunFolder`
    has accepted the run: until then the records are held, so that a refused start (a folder in use,
    other settings) or a bad value adds no line to the folder's log; they are written first when the
    folder is accepted. A start that never gets there drops them (the console showed them)."""

    #: a job that logs more than this without a RunFolder (none of ours) gets its file anyway
    HOLD_AT_MOST = 10_000

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = None) -> None:
        super().__init__(filename, mode, encoding, delay=True)
        self._held: list[logging.LogRecord] | None = []
        with _FOLDER_LOGS_LOCK:
            _FOLDER_LOGS.add(self)

    def emit(self, record: logging.LogRecord) -> None:
        if self._held is None:
            super().emit(record)
            return
        self._held.append(record)
        if len(self._held) > self.HOLD_AT_MOST:
            self.open_log()

    def in_folder(self, folder: Path) -> bool:
        return Path(os.path.realpath(self.baseFilename)).parent == Path(os.path.realpath(folder))

    def open_log(self) -> None:
        """Write the records held, and every later one as it comes (the file exists from now on)."""
        self.acquire()
        try:
            if self.stream is None:
                self.stream = self._open()
            held, self._held = self._held, None
            for record in held or []:
                super().emit(record)
        finally:
            self.release()

    def hold(self) -> None:
        """Hold (and in the end drop) the records again: the run stopped before any work."""
        self.acquire()
        try:
            if self.stream is not None:
                self.stream.close()
                self.stream = None  # type: ignore[assignment]
            self._held = []
        finally:
            self.release()


_FOLDER_LOGS: weakref.WeakSet[FolderLogHandler] = weakref.WeakSet()
_FOLDER_LOGS_LOCK = threading.Lock()


def _folder_logs(folder: Path) -> list[FolderLogHandler]:
    with _FOLDER_LOGS_LOCK:
        return [h for h in _FOLDER_LOGS if h.in_folder(folder)]


def open_folder_logs(folder: Path) -> None:
    """The run in `folder` is accepted: its log handlers write."""
    for handler in _folder_logs(folder):
        handler.open_log()


def hold_folder_logs(folder: Path) -> None:
    for handler in _folder_logs(folder):
        handler.hold()


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


#: the folders Hydra is about to make for this process's run (`hydra.run.dir` and any missing parents),
#: deepest first
_CREATED: list[Path] = []


class RemoveRefusedRunFolder(Callback):
    """Hydra callback (conf/hydra/default.yaml): note which folders the run's `hydra.run.dir` will
    create, so that a start refused with one `error:` line leaves none of them behind
    (`remove_created_folders`, called by `esc.lifecycle.run_hydra`)."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        # `now` is cached: the folder Hydra makes
        _CREATED[:] = missing_folders(Path(str(config.hydra.run.dir)))


def remove_created_folders() -> list[Path]:
    """Remove the folders this run made (`RemoveRefusedRunFolder`) that hold nothing but an empty log
    or this process's lock; the folders removed. A folder with anything else in it stays."""
    removed = []
    for folder in _CREATED:
        try:
            leftovers = list(folder.iterdir())
        except OSError:
            break
        if any(not _disposable(p) for p in leftovers):
            break
        try:
            for path in leftovers:
                path.unlink()
            folder.rmdir()
        except OSError:
            break
        removed.append(folder)
    _CREATED.clear()
    return removed


def _disposable(path: Path) -> bool:
    """A file a refused start may leave: the folder's lock, or an empty log."""
    if path.name in (LOCK_FILE, OWNER_FILE):
        return path.is_file()
    return path.suffix == ".log" and path.is_file() and path.stat().st_size == 0
