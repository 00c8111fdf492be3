"""The run folder's record of its batches: what was submitted, under which id, and what came back.

A batch API answers hours later, so a run that submits must be able to die and come back without
paying twice. The ledger is one append-only JSONL file, ``<folder>/batches.jsonl``, of events:

- ``submitting``: written (and flushed to disk) before the provider is asked to create a batch, with
  a token the provider keeps as the batch's metadata where it can (OpenAI): a run killed between
  the provider's answer and the next line finds its batch again by that token;
- ``lost``: a ``submitting`` whose batch could not be found again (by its ``token``), or a submitted
  batch the provider does not know (by its ``batch_id``: deleted, or made with another key or
  project; its results were never collected): its requests are submitted anew;
- ``submitted``: the batch id and the request keys it holds (`esc.chat.cache.request_key`, which
  are also the batch lines' ``custom_id``);
- ``ended``: the batch's last status and counts, written after its results are saved beside the
  ledger in ``<folder>/results/<batch id>.jsonl``: one ``{"custom_id", "reply"}`` line per request
  (a failed line is an error reply, kept so that a rerun knows to submit it again).

A request is *covered* when the newest batch holding it has not ended (poll it) or any ended batch
holds a successful reply for it (use that): only uncovered requests are submitted. Replies are
written as the backend made them, secrets already masked (`esc.secrets.redaction`), and the file
passes the secret filter again on its way to disk.

One run at a time holds a ledger (`esc.chat.batch.backend.BatchedBackend.hold`: the folder's
``.lock``, the run folder's mechanism, `esc.rundir.acquire_folder`): two runs sharing a
``batch_folder`` at once would both submit what neither had recorded yet.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.chat.base import Reply
from esc.secrets.redaction import scrub

LEDGER = "batches.jsonl"
RESULTS = "results"


@dataclasses.dataclass
class BatchEntry:
    """One batch as the ledger knows it."""

    batch_id: str
    provider: str
    keys: tuple[str, ...]
    submitted_at: float
    ended: bool = False
    status: str | None = None  # the provider's last status (completed, expired, failed, ended...)


def _now() -> float:
    return round(time.time(), 3)


def utc(at: float | None) -> str:
    """An epoch time as people read it: ``2026-01-01 12:00:00 UTC`` ("an unknown time" for none)."""
    if not at:
        return "an unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(at)))


class BatchLedger:
    """`<folder>/batches.jsonl` and `<folder>/results/`: see the module docstring."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LEDGER
        self.batches: dict[str, BatchEntry] = {}
        self.unconfirmed: dict[str, dict[str, Any]] = {}  # token -> submitting event without its id
        self._by_key: dict[str, list[str]] = {}  # request key -> batch ids, oldest first
        self._results: dict[str, dict[str, Reply]] = {}  # batch id -> custom_id -> reply
        self._read()

    def __repr__(self) -> str:
        return f"BatchLedger({str(self.folder)!r})"

    # --- reading ----------------------------------------------------------------------------------

    def _read(self) -> None:
        if not self.path.is_file():
            return
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                event = json.loads(line)
                self._apply(event)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):  # a line cut short by a kill
                continue

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("event")
        if kind == "submitting":
            self.unconfirmed[event["token"]] = dict(event)
        elif kind == "submitted":
            self.unconfirmed.pop(event.get("token"), None)
            entry = BatchEntry(event["batch_id"], event["provider"], tuple(event["keys"]), float(event["at"]))
            self.batches[entry.batch_id] = entry
            for key in entry.keys:
                self._by_key.setdefault(key, []).append(entry.batch_id)
        elif kind == "lost":
            self.unconfirmed.pop(event.get("token"), None)
            gone = self.batches.pop(event.get("batch_id"), None)
            for key in gone.keys if gone is not None else ():
                self._by_key[key] = [b for b in self._by_key.get(key, []) if b != gone.batch_id]
        elif kind == "ended" and event.get("batch_id") in self.batches:
            entry = self.batches[event["batch_id"]]
            entry.ended, entry.status = True, event.get("status")

    def results(self, batch_id: str) -> dict[str, Reply]:
        """The saved replies of an ended batch, by custom_id ({} before it ended)."""
        if batch_id not in self._results:
            path = self.folder / RESULTS / f"{batch_id}.jsonl"
            found: dict[str, Reply] = {}
            if path.is_file():
                for line in path.read_text(encoding="utf-8").splitlines():
                    try:
                        row = json.loads(line)
                        found[row["custom_id"]] = Reply.from_dict(row["reply"])
                    except (json.JSONDecodeError, KeyError, TypeError, ValueError):  # not a line we wrote
                        continue  # its request has no saved reply: a failed judgment, submitted again
            if not self.batches.get(batch_id, BatchEntry("", "", (), 0)).ended:
                return found
            self._results[batch_id] = found
        return self._results[batch_id]

    def reply(self, key: str) -> Reply | None:
        """The newest successful reply an ended batch holds for `key`; else the newest failed one;
        None when no ended batch holds it."""
        failed = None
        for batch_id in reversed(self._by_key.get(key, [])):
            entry = self.batches[batch_id]
            if not entry.ended:
                continue
            reply = self.results(batch_id).get(key)
            if reply is not None and reply.ok:
                return reply
            failed = failed or reply or missing_reply(entry)
        return failed

    def newest(self, key: str) -> str | None:
        """The id of the newest batch holding `key`."""
        ids = self._by_key.get(key)
        return ids[-1] if ids else None

    def live(self, key: str) -> str | None:
        """The batch id that will answer `key`: the newest batch holding it, when it has not ended."""
        ids = self._by_key.get(key, [])
        if ids and not self.batches[ids[-1]].ended:
            return ids[-1]
        return None

    def covered(self, key: str) -> bool:
        """Whether `key` needs no new batch: a batch not yet ended holds it, or one answered it."""
        if self.live(key) is not None:
            return True
        reply = self.reply(key)
        return reply is not None and reply.ok

    # --- writing ----------------------------------------------------------------------------------

    def _append(self, event: Mapping[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        line = scrub(json.dumps(dict(event), ensure_ascii=False)) + "\n"
        with self.path.open("a+b") as f:
            end = f.seek(0, os.SEEK_END)
            if end:
                f.seek(end - 1)
                if f.read(1) != b"\n":  # a line a killed run cut short stays alone, skipped when read
                    line = "\n" + line
            f.write(line.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())  # a batch id lost to a crash is a batch paid twice
        self._apply(event)

    def submitting(self, token: str, provider: str, keys: Sequence[str]) -> None:
        self._append(
            {
                "event": "submitting",
                "token": token,
                "provider": provider,
                "requests": len(keys),
                "keys": list(keys),
                "at": _now(),
            }
        )

    def lost(self, token: str) -> None:
        """A submission whose batch cannot be found again (see `BatchedBackend._recover`)."""
        self._append({"event": "lost", "token": token, "at": _now()})

    def lost_batch(self, batch_id: str, why: str) -> None:
        """A submitted batch the provider does not know: forgotten, its requests no longer covered
        (see `BatchedBackend._lose`)."""
        self._append({"event": "lost", "batch_id": batch_id, "why": why, "at": _now()})

    def submitted(self, token: str, provider: str, batch_id: str, keys: Sequence[str]) -> None:
        self._append(
            {
                "event": "submitted",
                "token": token,
                "provider": provider,
                "batch_id": batch_id,
                "keys": list(keys),
                "at": _now(),
            }
        )

    def ended(
        self, batch_id: str, status: str, counts: Mapping[str, int], replies: Iterable[tuple[str, Reply]]
    ) -> None:
        """Save an ended batch's replies, then mark it ended (a run killed between the two polls the
        batch again and saves them again)."""
        folder = self.folder / RESULTS
        folder.mkdir(parents=True, exist_ok=True)
        rows = [{"custom_id": key, "reply": reply.to_dict()} for key, reply in replies]
        text = "".join(scrub(json.dumps(row, ensure_ascii=False)) + "\n" for row in rows)
        path = folder / f"{batch_id}.jsonl"
        partial = path.with_suffix(".jsonl.partial")
        with partial.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # on disk before the ledger says the batch ended
        os.replace(partial, path)
        self._results.pop(batch_id, None)
        self._append(
            {"event": "ended", "batch_id": batch_id, "status": status, "counts": dict(counts), "at": _now()}
        )


def missing_reply(entry: BatchEntry) -> Reply:
    """The reply of a request an ended batch gave no line for (a failed batch has none)."""
    return Reply(
        text="",
        finish_reason="error",
        error=f"batch {entry.batch_id} ended {entry.status} without a result for this request",
    )
