"""The request cache you can trust (esc/chat/cache.py) and resolved model revisions (esc/models/revision.py).

Offline and fast: no model is loaded here (the hf and openai backends are covered in
tests/test_chat_backends.py); a counting backend stands in for a model.
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from esc.chat import cache as cache_mod
from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply
from esc.chat.cache import (
    CachedBackend,
    CacheSettings,
    RequestCache,
    choose_journal_mode,
    filesystem_type,
    merge_caches,
    request_key,
    with_cache,
)
from esc.chat.settings import Price
from esc.chat.usage import Usage
from esc.cli import main as esc_main
from esc.config_rules import load_section
from esc.errors import ConfigError
from esc.models import revision as rev
from esc.models.loading import ModelSettings
from tests.helpers import conf_node

SETTINGS = GenerationSettings(max_new_tokens=8)
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Counting(ChatBackend):
    """Replies "<text> #<n>", n counting the requests that reached the 'model'."""

    CODE_VERSION = 1

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        replies = []
        for messages in batch:
            self.calls += 1
            replies.append(
                Reply(
                    f"{messages[-1]['content']} #{self.calls}",
                    "stop",
                    prompt_tokens=10,
                    completion_tokens=2,
                    model="served-2024-06-01",
                    system_fingerprint="fp_1",
                    logprobs=[{"token": "3", "top": {"3": -0.1, "2": -2.5}}],
                )
            )
        return replies

    def identity(self) -> dict[str, Any]:
        return {"kind": "counting", "code_version": self.code_version()}


class CountingFixed(Counting):
    """The same backend after an output-changing fix: its own CODE_VERSION."""

    CODE_VERSION = 2


def ask(text: str) -> list[Message]:
    return [{"role": "user", "content": text}]


# --- failures degrade to misses ----------------------------------------------------------------


def test_a_held_lock_is_a_miss_logged_once_and_the_run_goes_on(tmp_path: Path, caplog) -> None:
    path = tmp_path / "c.sqlite"
    cache = RequestCache(path, journal_mode="delete", timeout_s=0.05)
    backend = CachedBackend(Counting(), cache)
    assert backend.generate([ask("a")], SETTINGS)[0].text == "a #1"
    assert backend.generate([ask("a")], SETTINGS)[0].cached  # the cache works

    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the file: reads and writes time out
    caplog.set_level(logging.WARNING, logger="esc.chat.cache")
    try:
        blocked = backend.generate([ask("a"), ask("b")], SETTINGS)
        again = backend.generate([ask("c")], SETTINGS)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [r.text for r in blocked] == ["a #2", "b #3"] and not any(r.cached for r in blocked)
    assert again[0].text == "c #4"
    assert cache.failures == 4 and not cache.disabled  # 2 lookups + 2 writes, each a miss / skip
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "database is locked" in warnings[0].getMessage()
    assert "treated as a cache miss" in warnings[0].getMessage()

    # the lock is gone: lookups and writes work again
    assert backend.generate([ask("a")], SETTINGS)[0].cached
    assert backend.generate([ask("d")], SETTINGS)[0].text == "d #5"
    assert backend.generate([ask("d")], SETTINGS)[0].cached


def test_repeated_failures_switch_the_cache_off(tmp_path: Path, caplog) -> None:
    path = tmp_path / "c.sqlite"
    path.write_bytes(b"this is not a database, " * 100)  # a corrupt file
    cache = RequestCache(path, journal_mode="delete", timeout_s=0.05)
    backend = CachedBackend(Counting(), cache)
    caplog.set_level(logging.WARNING, logger="esc.chat.cache")
    for i in range(4):
        assert backend.generate([ask(f"q{i}")], SETTINGS)[0].ok
    assert cache.disabled and cache.failures == cache_mod.MAX_FAILURES
    assert backend.generate([ask("later")], SETTINGS)[0].ok  # no more SQLite calls, no errors
    assert cache.failures == cache_mod.MAX_FAILURES
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 2 and "off for the rest of this run" in messages[1]


# --- journal mode and location -----------------------------------------------------------------


def test_journal_mode_auto_follows_the_filesystem(tmp_path: Path) -> None:
    tmp_path = tmp_path.resolve()
    shared, local = tmp_path / "lustre mnt", tmp_path / "scratch"
    shared.mkdir()
    local.mkdir()
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "/dev/vda / ext4 rw 0 0\n"
        f"server:/export {str(shared).replace(' ', chr(92) + '040')} nfs4 rw 0 0\n"
        f"tmpfs {local} tmpfs rw 0 0\n"
    )
    assert filesystem_type(shared / "sub" / "requests.sqlite", mounts) == "nfs4"  # not created yet
    assert filesystem_type(local / "requests.sqlite", mounts) == "tmpfs"
    assert choose_journal_mode(shared / "requests.sqlite", "auto", mounts) == "delete"
    assert choose_journal_mode(local / "requests.sqlite", "auto", mounts) == "wal"
    assert choose_journal_mode(shared / "requests.sqlite", "wal", mounts) == "wal"  # explicit wins
    assert choose_journal_mode(local, "auto", tmp_path / "no-proc-mounts") == "wal"


def test_with_cache_reads_the_config_and_rejects_unknown_keys(tmp_path: Path) -> None:
    inner = Counting()
    node = {"enabled": True, "path": str(tmp_path / "x.sqlite"), "journal_mode": "delete", "timeout_s": 2}
    cached = with_cache(inner, load_section("cache", CacheSettings, node))
    assert isinstance(cached, CachedBackend)
    assert cached.cache.journal_mode == "delete" and cached.cache.timeout_s == 2
    cached.generate([ask("a")], SETTINGS)
    conn = sqlite3.connect(tmp_path / "x.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
    with pytest.raises(ConfigError, match="cache.*journal_mod"):
        load_section("cache", CacheSettings, {"enabled": True, "path": "x", "journal_mod": "wal"})


# --- keys and stored fields --------------------------------------------------------------------


def test_a_code_version_bump_misses_old_replies(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    old = CachedBackend(Counting(), RequestCache(path, "auto", 30.0))
    assert not old.generate([ask("a")], SETTINGS)[0].cached
    assert old.generate([ask("a")], SETTINGS)[0].cached
    fixed = CachedBackend(CountingFixed(), RequestCache(path, "auto", 30.0))
    assert fixed.inner.code_version() == {"Counting": 1, "CountingFixed": 2}
    reply = fixed.generate([ask("a")], SETTINGS)[0]
    assert not reply.cached and fixed.inner.calls == 1
    keys = {request_key(b.cache_identity(), ask("a"), SETTINGS) for b in (Counting(), CountingFixed())}
    assert len(keys) == 2


def test_cached_replies_keep_served_model_fingerprint_and_logprobs(tmp_path: Path) -> None:
    backend = CachedBackend(Counting(), RequestCache(tmp_path / "c.sqlite", "auto", 30.0))
    fresh = backend.generate([ask("a")], SETTINGS)[0]
    hit = backend.generate([ask("a")], SETTINGS)[0]
    assert hit.cached and not fresh.cached
    for field in ("text", "prompt_tokens", "completion_tokens", "model", "system_fingerprint", "logprobs"):
        assert getattr(hit, field) == getattr(fresh, field), field
    assert hit.model == "served-2024-06-01" and hit.system_fingerprint == "fp_1"


def test_cost_counts_only_replies_not_served_from_the_cache(tmp_path: Path) -> None:
    backend = CachedBackend(Counting(), RequestCache(tmp_path / "c.sqlite", "auto", 30.0))
    usage = Usage()
    for reply in backend.generate([ask("a"), ask("b")], SETTINGS) + backend.generate([ask("a")], SETTINGS):
        usage.add(reply)
    usage.add(Reply("", "error", error="boom"))
    report = usage.report(Price(prompt=1.0, completion=10.0))
    assert (report["requests"], report["cached"], report["errors"]) == (4, 1, 1)
    assert (report["prompt_tokens"], report["completion_tokens"]) == (20, 4)
    assert (report["cached_prompt_tokens"], report["cached_completion_tokens"]) == (10, 2)
    assert report["cost_usd"] == pytest.approx(20 / 1000 * 1.0 + 4 / 1000 * 10.0)
    assert report["served"] == [
        {"model": "served-2024-06-01", "system_fingerprint": "fp_1", "replies": 3, "cached": 1}
    ]
    assert Usage().report(None)["cost_usd"] is None
    json.dumps(report)  # goes into the manifest


# --- merging per-job caches --------------------------------------------------------------------


def _filled(path: Path, texts: list[str]) -> RequestCache:
    cache = RequestCache(path, "auto", 30.0)
    cache.put_many((request_key({"k": 1}, ask(t), SETTINGS), Reply(t, "stop")) for t in texts)
    cache.close()
    return cache


def test_merge_joins_per_job_caches(tmp_path: Path, capsys) -> None:
    _filled(tmp_path / "job1.sqlite", ["a", "b"])
    _filled(tmp_path / "job2.sqlite", ["b", "c", "d"])
    _filled(tmp_path / "all.sqlite", ["d"])
    report = merge_caches([tmp_path / "job1.sqlite", tmp_path / "job2.sqlite"], tmp_path / "all.sqlite")
    assert [(s["entries"], s["added"], s["present"]) for s in report["sources"]] == [(2, 2, 0), (3, 1, 2)]
    assert report["entries"] == 4
    merged = RequestCache(tmp_path / "all.sqlite", "auto", 30.0)
    keys = [request_key({"k": 1}, ask(t), SETTINGS) for t in "abcd"]
    assert [merged.get_many([k])[k].text for k in keys] == list("abcd")
    merged.close()

    # the command line, into a new file
    esc_main(["cache", "merge", str(tmp_path / "job1.sqlite"), "--into", str(tmp_path / "new" / "m.sqlite")])
    assert "2 entries, 2 added, 0 already there" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        esc_main(["cache", "merge", str(tmp_path / "missing.sqlite"), "--into", str(tmp_path / "m.sqlite")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'missing.sqlite'}: no such cache file"
    (tmp_path / "junk.sqlite").write_bytes(b"x" * 2048)
    with pytest.raises(SystemExit):
        esc_main(["cache", "merge", str(tmp_path / "junk.sqlite"), "--into", str(tmp_path / "m.sqlite")])
    assert "not a request cache" in capsys.readouterr().err


# --- resolved revisions ------------------------------------------------------------------------


def _model_dir(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "llama"}')
    (root / "tokenizer.json").write_text('{"version": "1.0"}')
    (root / "model.safetensors").write_bytes(
        b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(range(256)) * 64
    )
    (root / "README.md").write_text("notes")
    return root


def test_directory_hash_follows_content_not_location(tmp_path: Path, monkeypatch) -> None:
    model = _model_dir(tmp_path / "model")
    first = rev.directory_hash(model)
    assert first.startswith("sha256:") and len(first) == 7 + 64
    shutil.copytree(model, tmp_path / "copy")
    assert rev.directory_hash(tmp_path / "copy") == first  # a copy elsewhere: the same model
    (model / "README.md").write_text("other notes")
    assert rev.directory_hash(model) == first  # not a model file
    (model / "tokenizer.json").write_text('{"version": "1.1"}')
    assert rev.directory_hash(model) != first  # a new tokenizer is another model

    # large weights are sampled, and a change in a sample changes the hash
    monkeypatch.setattr(rev, "FULL_HASH_LIMIT", 1024)
    monkeypatch.setattr(rev, "SAMPLE_BYTES", 64)
    weights = tmp_path / "copy" / "model.safetensors"
    sampled = rev.file_fingerprint(weights)
    assert sampled.startswith("sampled-")
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert rev.file_fingerprint(weights) != sampled


def test_provenance_conversion_time_is_not_part_of_the_hash(tmp_path: Path) -> None:
    model = _model_dir(tmp_path / "m")
    info = {"format": 1, "wheel_sha256": "ab" * 32, "converted_at": "2024-01-01T00:00:00"}
    (model / "provenance.json").write_text(json.dumps(info))
    first = rev.directory_hash(model)
    (model / "provenance.json").write_text(json.dumps({**info, "converted_at": "2025-02-02T00:00:00"}))
    assert rev.directory_hash(model) == first
    (model / "provenance.json").write_text(json.dumps({**info, "format": 2}))
    assert rev.directory_hash(model) != first


def _named(name_or_path: str, revision: str | None = None) -> ModelSettings:
    """conf/model/tiny.yaml's node naming a hub id or a local directory instead of the tiny model."""
    return ModelSettings.of(
        conf_node("model", {"tiny": None, "name_or_path": name_or_path, "revision": revision})
    )


def test_hub_models_resolve_to_the_commit(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    snapshot = hub / "models--org--chat" / "snapshots" / COMMIT
    _model_dir(snapshot)
    (hub / "models--org--chat" / "refs").mkdir()
    (hub / "models--org--chat" / "refs" / "main").write_text(COMMIT)

    by_id = rev.resolve_revision(_named("org/chat"), hub_cache=hub)
    assert (by_id.revision, by_id.source, by_id.configured) == (COMMIT, "hub-cache", None)
    by_dir = rev.resolve_revision(_named(str(snapshot), "main"))
    assert (by_dir.revision, by_dir.source, by_dir.configured) == (COMMIT, "snapshot", "main")
    assert rev.resolve_revision(_named("org/chat", "v2"), hub_cache=hub).revision is None
    pinned = rev.resolve_revision(_named("org/other", COMMIT), hub_cache=hub)
    assert (pinned.revision, pinned.source) == (COMMIT, "commit")
    missing = rev.resolve_revision(_named("org/not-downloaded"), hub_cache=hub)
    assert (missing.revision, missing.source) == (None, "unresolved") and not missing.resolved
    local = rev.resolve_revision(_named(str(_model_dir(tmp_path / "mine"))))
    assert local.source == "content" and local.revision == rev.directory_hash(tmp_path / "mine")
    assert set(local.to_dict()) == {"revision", "revision_source", "configured_revision"}


def test_adapter_hash_covers_config_and_weights(tmp_path: Path) -> None:
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 16}')
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    first = rev.adapter_hash(adapter)
    (adapter / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 32}')
    second = rev.adapter_hash(adapter)
    (adapter / "adapter_model.safetensors").write_bytes(b"retrained")
    assert len({first, second, rev.adapter_hash(adapter)}) == 3
