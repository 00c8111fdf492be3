"""A request cache on disk: the same request to the same model is answered once, ever.

Reruns and resumed runs replay identical requests for free. The key is the sha256 of the backend's
*cache identity* (kind, code version, renderer package versions, the resolved model revision --
a hub commit or a content hash, `esc.models.revision` -- adapter hash, decoding overrides...), the
messages and the generation settings, so a backend fix (a bumped ``CODE_VERSION``), a new
transformers, a retrained adapter or a new model snapshot misses instead of replaying old replies.
Only successful replies are stored, with their token counts, log-probabilities and the served model
name and ``system_fingerprint`` an API reported; errors are retried on the next run.

The store is one SQLite file (stdlib ``sqlite3``) with a busy timeout. ``journal_mode: auto`` (the
default) picks WAL on a local disk -- several processes of one machine read and write at once --
and ``delete`` when the file is on a network filesystem (NFS, Lustre, GPFS, CIFS, Ceph, BeeGFS...,
read from ``/proc/mounts``), where WAL's shared memory does not work across nodes. The cache never
stops a run: a lock timeout or any other SQLite error is a cache miss (logged once as a warning;
after `MAX_FAILURES` failures in a row the cache is off for the rest of the run).

On a cluster, give each job its own file on node-local disk and merge them afterwards:
``esc cache merge SRC... --into DST`` (existing entries of DST are kept).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Self

from filelock import FileLock, Timeout
from pydantic import Field, model_validator

from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, WrappedBackend
from esc.config_rules import Section, Settings, relation
from esc.errors import DataError, UserError
from esc.models.revision import adapter_hash
from esc.secrets.redaction import scrub

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    reply TEXT NOT NULL,
    created REAL NOT NULL
)
"""
KEY_FORMAT = 2  # bump when the key's recipe changes (2: cache identities with code versions)
STORED_FIELDS = (
    "text", "finish_reason", "prompt_tokens", "completion_tokens", "logprobs", "model", "system_fingerprint",
)  # fmt: skip
JOURNAL_MODES = ("auto", "wal", "delete", "truncate", "persist")
#: filesystems where SQLite's WAL mode is unsafe (no shared memory across machines)
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "smbfs", "ceph", "fuse.ceph", "cephfs",
    "glusterfs", "fuse.glusterfs", "beegfs", "fuse.beegfs", "panfs", "afs", "fuse.sshfs", "sshfs",
    "fuse.s3fs", "fuse.gcsfuse", "fuse.juicefs", "wekafs", "vastfs",
})  # fmt: skip
MAX_FAILURES = 5  # SQLite errors in a row before the cache is switched off for the run


def request_key(
    identity: Mapping[str, Any], messages: Sequence[Message], settings: GenerationSettings
) -> str:
    """sha256 of the canonical JSON of (key format, backend identity, messages, generation settings)."""
    blob = json.dumps(
        {
            "format": KEY_FORMAT,
            "identity": identity,
            "messages": [dict(m) for m in messages],
            "settings": _settings_key(settings),
        },
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _settings_key(settings: GenerationSettings) -> dict[str, Any]:
    """The settings as the key sees them: a per-request adapter by its content, not its folder, so
    an adapter retrained into the same folder is not answered from the old one's replies."""
    data = settings.to_dict()
    if settings.adapter:
        folder = Path(settings.adapter).resolve()
        stamp = tuple(
            (f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in sorted(folder.glob("adapter_*"))
        )
        data["adapter"] = _adapter_digest(str(folder), stamp)
    return data


@functools.lru_cache(maxsize=64)
def _adapter_digest(folder: str, stamp: tuple[tuple[str, int, int], ...]) -> str:
    """`adapter_hash`, computed once per folder state (`stamp`: its files' names, times and sizes)."""

    return "sha256:" + adapter_hash(folder)


# --- where the file lives -----------------------------------------------------------------------


def _unescape_mount(field: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes (``\040``)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def filesystem_type(
    path: str | os.PathLike[str], mounts: str | os.PathLike[str] = "/proc/mounts"
) -> str | None:
    """The type of the filesystem holding `path` (the longest matching mount point), or None."""
    try:
        lines = Path(mounts).read_text().splitlines()
    except OSError:  # not Linux
        return None
    target = Path(path).absolute()
    while not target.exists() and target.parent != target:  # the file may not exist yet
        target = target.parent
    target = target.resolve()
    best, best_type = -1, None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = Path(_unescape_mount(fields[1]))
        if (target == mount or mount in target.parents) and len(mount.parts) > best:
            best, best_type = len(mount.parts), fields[2]
    return best_type


def choose_journal_mode(
    path: str | os.PathLike[str], journal_mode: str, mounts: str | os.PathLike[str] = "/proc/mounts"
) -> str:
    """`journal_mode` (one of `JOURNAL_MODES`), or for ``auto``: ``delete`` on a network
    filesystem, else ``wal``."""
    if journal_mode != "auto":
        return journal_mode
    fstype = filesystem_type(path, mounts)
    if fstype in NETWORK_FILESYSTEMS:
        log.info("request cache %s is on %s: journal_mode delete (WAL needs a local disk)", path, fstype)
        return "delete"
    return "wal"


# --- the store ----------------------------------------------------------------------------------


class RequestCache:
    """Replies by request key in one SQLite file, shared by threads and processes.

    Every SQLite error (a lock held longer than `timeout_s`, a full disk, a corrupt file) turns the
    operation into a miss or a skipped write: the run goes on, the cache only saves work.
    `journal_mode` and `timeout_s` are a validated `cache:` node's (`CacheSettings`, `with_cache`),
    or what the code that opens one gives (`merge_caches`).
    """

    def __init__(self, path: str | os.PathLike[str], journal_mode: str, timeout_s: float) -> None:
        self.path = Path(path)
        self.journal_mode = choose_journal_mode(self.path, journal_mode)
        self.timeout_s = timeout_s
        self.failures = 0  # SQLite errors so far (each one a miss or a skipped write)
        self.disabled = False
        self._in_a_row = 0
        self._warned = False
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RequestCache({str(self.path)!r})"

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        # first use, or a forked child: a connection must never cross a fork
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, timeout=self.timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
            # Switching the journal mode and creating the table need the whole file, and SQLite may
            # answer "database is locked" at once, without waiting, to connections doing it at the
            # same time: one process or thread at a time sets the file up (a lock file beside it).
            with FileLock(f"{self.path}.setup.lock", timeout=self.timeout_s):
                mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
                if str(mode).lower() != self.journal_mode:
                    mode = conn.execute(f"PRAGMA journal_mode = {self.journal_mode}").fetchone()[0]
                if str(mode).lower() != self.journal_mode:
                    log.warning(
                        "request cache %s: journal_mode %s unavailable, using %s",
                        self.path,
                        self.journal_mode,
                        mode,
                    )
                conn.execute(SCHEMA)
            conn.execute("PRAGMA synchronous = NORMAL")
        except Timeout as err:
            conn.close()
            raise sqlite3.OperationalError(f"cache setup lock busy for {self.timeout_s:g} s") from err
        except BaseException:
            conn.close()
            raise
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _failed(self, operation: str, err: Exception) -> None:
        """Count a SQLite error; warn the first time, switch the cache off after MAX_FAILURES in a row."""
        self.failures += 1
        self._in_a_row += 1
        conn = self._conn if self._pid == os.getpid() else None
        if conn is not None and conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        if not self._warned:
            self._warned = True
            log.warning(
                "request cache %s: %s failed (%s: %s); treated as a cache miss, the run goes on",
                self.path, operation, type(err).__name__, err,
            )  # fmt: skip
        else:
            log.debug("request cache %s: %s failed: %s", self.path, operation, err)
        if self._in_a_row >= MAX_FAILURES and not self.disabled:
            self.disabled = True
            log.warning(
                "request cache %s: %d errors in a row; the cache is off for the rest of this run",
                self.path, self._in_a_row,
            )  # fmt: skip

    def get_many(self, keys: Iterable[str]) -> dict[str, Reply]:
        """The cached replies among `keys` (marked ``cached=True``, latency 0); {} on any SQLite error."""
        keys = list(dict.fromkeys(keys))
        found: dict[str, Reply] = {}
        if self.disabled or not keys:
            return found
        with self._lock:
            try:
                conn = self._connection()
                for start in range(0, len(keys), 500):  # stay under SQLite's host-parameter limit
                    part = keys[start : start + 500]
                    marks = ",".join("?" * len(part))
                    rows = conn.execute(f"SELECT key, reply FROM replies WHERE key IN ({marks})", part)
                    for key, blob in rows:
                        data = json.loads(blob)
                        found[key] = Reply(
                            **{f: data.get(f) for f in STORED_FIELDS}, latency_s=0.0, cached=True
                        )
            except (sqlite3.DatabaseError, OSError) as err:
                self._failed("a lookup", err)
                return {}
            self._in_a_row = 0
        return found

    def put_many(self, items: Iterable[tuple[str, Reply]]) -> int:
        """Store the successful replies among `items` (errors never); how many were stored (0 when
        SQLite fails)."""
        now = time.time()
        rows = [  # secrets masked: a key a model echoed never reaches the cache file
            (key, scrub(json.dumps({f: getattr(reply, f) for f in STORED_FIELDS}, ensure_ascii=False)), now)
            for key, reply in items
            if reply.ok
        ]
        if not rows or self.disabled:
            return 0
        with self._lock:
            try:
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(
                    "INSERT OR REPLACE INTO replies (key, reply, created) VALUES (?, ?, ?)", rows
                )
                conn.execute("COMMIT")
            except (sqlite3.DatabaseError, OSError) as err:
                self._failed("a write", err)
                return 0
            self._in_a_row = 0
        return len(rows)

    def __len__(self) -> int:
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM replies").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = self._pid = None


class CachedBackend(WrappedBackend):
    """`inner` behind a `RequestCache`: hits come from disk, only the misses reach the model."""

    def __init__(self, inner: ChatBackend, cache: RequestCache) -> None:
        super().__init__(inner)
        self.cache = cache

    def __repr__(self) -> str:
        return f"CachedBackend({self.inner!r}, {self.cache!r})"

    def submit(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> None:
        """Only the requests the cache does not hold go on to `inner.submit`."""
        if not batch:
            return
        identity = self.inner.cache_identity()
        keys = [request_key(identity, messages, settings) for messages in batch]
        hits = self.cache.get_many(keys)
        self.inner.submit([m for m, key in zip(batch, keys, strict=True) if key not in hits], settings)

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        if not batch:
            return []
        identity = self.inner.cache_identity()
        keys = [request_key(identity, messages, settings) for messages in batch]
        hits = self.cache.get_many(keys)
        misses = [i for i, key in enumerate(keys) if key not in hits]
        replies: list[Reply | None] = [hits.get(key) for key in keys]
        if misses:
            fresh = self.inner.generate([batch[i] for i in misses], settings)
            if len(fresh) != len(misses):
                raise RuntimeError(f"{self.inner!r} returned {len(fresh)} replies for {len(misses)} requests")
            for i, reply in zip(misses, fresh, strict=True):
                replies[i] = reply
            self.cache.put_many((keys[i], reply) for i, reply in zip(misses, fresh, strict=True))
        log.debug("request cache: %d hits, %d misses", len(batch) - len(misses), len(misses))
        return [reply for reply in replies if reply is not None]

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            self.cache.close()


def with_cache(backend: ChatBackend, settings: CacheSettings | None) -> ChatBackend:
    """`backend` behind the request cache that a validated `cache:` node describes; None (a primary
    config of one's own without a `cache:` node) or `enabled: false`: no cache."""
    if settings is None or not settings.enabled:
        return backend
    cache = RequestCache(str(settings.path), journal_mode=settings.journal_mode, timeout_s=settings.timeout_s)
    return CachedBackend(backend, cache)


# --- merging per-job caches ---------------------------------------------------------------------


def merge_caches(sources: Sequence[str | os.PathLike[str]], into: str | os.PathLike[str]) -> dict[str, Any]:
    """Copy every entry of the `sources` cache files into `into` (created if missing); entries `into`
    already has are kept. Returns per source the entries read, added and already present."""
    target = Path(into).absolute()
    paths = [Path(s) for s in sources]
    for path in paths:
        if not path.is_file():
            raise UserError(f"{path}: no such cache file")
        if path.absolute() == target:
            raise UserError(f"{path}: a source cannot be the target of the merge")
    place = target
    while not place.exists() and place != place.parent:
        place = place.parent  # the file, or the nearest folder it would be made in
    if not os.access(place, os.W_OK):
        why = "cannot be written (permission or a read-only disk)"
        raise UserError(f"{place}: {why}; choose another --into DST")
    dest = RequestCache(target, journal_mode="auto", timeout_s=60.0)
    report: dict[str, Any] = {"into": str(target), "sources": []}
    try:
        conn = dest._connection()
        for path in paths:
            src = sqlite3.connect(path, timeout=60.0)
            before, read = conn.total_changes, 0
            try:
                try:
                    cursor = src.execute("SELECT key, reply, created FROM replies")
                except sqlite3.DatabaseError as err:
                    raise DataError(path, None, f"not a request cache ({err})") from None
                conn.execute("BEGIN IMMEDIATE")
                while rows := cursor.fetchmany(10_000):
                    read += len(rows)
                    conn.executemany(
                        "INSERT OR IGNORE INTO replies (key, reply, created) VALUES (?, ?, ?)", rows
                    )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            finally:
                src.close()
            added = conn.total_changes - before
            report["sources"].append(
                {"path": str(path), "entries": read, "added": added, "present": read - added}
            )
        report["entries"] = int(conn.execute("SELECT COUNT(*) FROM replies").fetchone()[0])
    except sqlite3.DatabaseError as err:
        raise UserError(
            f"{target}: merging failed ({type(err).__name__}: {err}); if it cannot be written, choose "
            "another --into DST"
        ) from None
    finally:
        dest.close()
    return report


class CacheSettings(Settings):
    """The `cache:` node of evaluate.py, rank.py and card construction (conf/cache/)."""

    enabled: bool
    path: str | None
    journal_mode: Literal[JOURNAL_MODES] = Field(description="auto picks per filesystem")  # type: ignore[valid-type]
    timeout_s: float = Field(gt=0, description="seconds to wait for the cache's lock")

    @model_validator(mode="after")
    def _named(self) -> Self:
        if self.enabled and not self.path:
            raise relation("path", "is empty: name the cache file, or set enabled=false")
        return self


#: the `cache:` node (a primary config of one's own may leave it out: no cache)
CACHE_CONFIG = Section("cache", CacheSettings, optional=True)
