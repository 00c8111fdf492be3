"""A request cache on disk: the same request to the same model is answered once, ever.

Reruns and resumed runs replay identical requests (same backend identity, messages and generation
settings) for free. The store is one SQLite file (stdlib ``sqlite3``) in WAL mode with a busy
timeout, so several processes -- SLURM array shards, say -- can read and write it at once: readers
never block, writers queue for the lock. Only successful replies are stored; errors are retried
on the next run.

WAL needs shared memory between the processes, so it works on one machine's local disk (and on
node-local storage of a cluster node); on a network filesystem (NFS, Lustre) give each node its
own cache file or set ``journal_mode: delete``, which locks the whole file per write.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply
from esc.errors import ConfigError

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (
    key TEXT PRIMARY KEY,
    reply TEXT NOT NULL,
    created REAL NOT NULL
)
"""
STORED_FIELDS = ("text", "finish_reason", "prompt_tokens", "completion_tokens")
JOURNAL_MODES = ("wal", "delete", "truncate", "persist")


def request_key(
    identity: Mapping[str, Any], messages: Sequence[Message], settings: GenerationSettings
) -> str:
    """sha256 of the canonical JSON of (backend identity, messages, generation settings)."""
    blob = json.dumps(
        {
            "identity": identity,
            "messages": [dict(m) for m in messages],
            "settings": settings.to_dict(),
        },
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class RequestCache:
    """Replies by request key in one SQLite file, shared safely by threads and processes."""

    def __init__(
        self, path: str | os.PathLike[str], journal_mode: str = "wal", timeout_s: float = 60.0
    ) -> None:
        if journal_mode.lower() not in JOURNAL_MODES:
            raise ConfigError("cache.journal_mode", f"{journal_mode!r} is not one of {list(JOURNAL_MODES)}")
        self.path = Path(path)
        self.journal_mode = journal_mode.lower()
        self.timeout_s = float(timeout_s)
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
        conn.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
        mode = conn.execute(f"PRAGMA journal_mode = {self.journal_mode}").fetchone()[0]
        if str(mode).lower() != self.journal_mode.lower():
            log.warning(
                "request cache %s: journal_mode %s unavailable, using %s", self.path, self.journal_mode, mode
            )
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(SCHEMA)
        self._conn, self._pid = conn, os.getpid()
        return conn

    def get_many(self, keys: Iterable[str]) -> dict[str, Reply]:
        """The cached replies among `keys` (marked ``cached=True``, latency 0)."""
        keys = list(dict.fromkeys(keys))
        found: dict[str, Reply] = {}
        with self._lock:
            conn = self._connection()
            for start in range(0, len(keys), 500):  # stay under SQLite's host-parameter limit
                part = keys[start : start + 500]
                marks = ",".join("?" * len(part))
                rows = conn.execute(f"SELECT key, reply FROM replies WHERE key IN ({marks})", part)
                for key, blob in rows:
                    data = json.loads(blob)
                    found[key] = Reply(**{f: data.get(f) for f in STORED_FIELDS}, latency_s=0.0, cached=True)
        return found

    def put_many(self, items: Iterable[tuple[str, Reply]]) -> int:
        """Store the successful replies among `items`; errors are never stored. Returns how many."""
        rows = [
            (key, json.dumps({f: getattr(reply, f) for f in STORED_FIELDS}, ensure_ascii=False), time.time())
            for key, reply in items
            if reply.ok
        ]
        if not rows:
            return 0
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT OR REPLACE INTO replies (key, reply, created) VALUES (?, ?, ?)", rows
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return len(rows)

    def __len__(self) -> int:
        with self._lock:
            return int(self._connection().execute("SELECT COUNT(*) FROM replies").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = self._pid = None


class CachedBackend(ChatBackend):
    """`inner` behind a `RequestCache`: hits come from disk, only the misses reach the model."""

    def __init__(self, inner: ChatBackend, cache: RequestCache) -> None:
        self.inner = inner
        self.cache = cache

    def __repr__(self) -> str:
        return f"CachedBackend({self.inner!r}, {self.cache!r})"

    @property
    def context_window(self) -> int | None:  # type: ignore[override]
        return self.inner.context_window

    @property
    def price(self) -> dict[str, float] | None:  # type: ignore[override]
        return self.inner.price

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()

    def check_ready(self) -> None:
        self.inner.check_ready()

    def count_tokens(self, messages: Sequence[Message]) -> int | None:
        return self.inner.count_tokens(messages)

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        if not batch:
            return []
        identity = self.inner.identity()
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


def with_cache(backend: ChatBackend, cfg_cache: Mapping[str, Any] | None, key: str = "cache") -> ChatBackend:
    """`backend` behind the request cache that ``cfg_cache`` (``enabled``, ``path``) describes."""
    cfg = dict(cfg_cache or {})
    if not cfg.get("enabled", False):
        return backend
    if not cfg.get("path"):
        raise ConfigError(f"{key}.path", "is empty: name the cache file, or set enabled=false")
    return CachedBackend(backend, RequestCache(cfg["path"], journal_mode=str(cfg.get("journal_mode", "wal"))))
