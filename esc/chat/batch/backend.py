"""A chat backend whose requests go through its provider's batch API (half the price, answers within
24 h): `BatchedBackend`, and `with_batches`, which a judge's ``batch: true`` calls.

`submit` sends every request no batch covers yet as new batches (recorded in the run folder's
ledger, `esc.chat.batch.ledger`, before and after the provider is asked); `generate` submits what
is not covered, polls the batches that hold its requests until they end (or `wait_s` passes),
saves their replies and returns them. A run killed at any point and run again polls the same
batches: nothing is submitted twice. A request whose line failed (an error, an expired batch, a
malformed line) is an error reply (a failed judgment, never a score), and a rerun submits it again.

One run at a time holds the ledger (`hold`, from `check_ready`: the ledger folder's ``.lock``, as
`esc.rundir` locks a run folder); a second run on the same `batch_folder` is refused in one line.
A run that starts with batches in its ledger not yet ended says which it polls (`_resume`) and
polls each once: one the provider does not know (deleted, another key or project) is recorded as
lost, with a warning naming it and the ledger, and its requests are submitted again. A server
unreachable while polling is polled again, with growing pauses, until `wait_s` ends (then the
requests still out are failed judgments that say so: a rerun collects them).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from esc.chat.backends.anthropic_api import AnthropicBackend
from esc.chat.backends.openai_compat import OpenAIBackend
from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, WrappedBackend
from esc.chat.batch.anthropic_batches import AnthropicBatches
from esc.chat.batch.api import BatchAPI, BatchNotFound, BatchUnreachable, Polled
from esc.chat.batch.ledger import BatchEntry, BatchLedger, utc
from esc.chat.batch.openai_batches import OpenAIBatches
from esc.chat.cache import request_key
from esc.chat.settings import BackendSettings, BatchPrice, Price
from esc.rundir import OWNER_FILE, acquire_folder

log = logging.getLogger(__name__)

#: requests per batch: OpenAI takes up to 50,000 lines (200 MB), Anthropic 100,000 (256 MB)
MAX_REQUESTS = 10_000
#: the longest pause between two polls of a server that could not be reached (unless poll_s is longer)
MAX_BACKOFF_S = 600.0


def batch_problem(backend: BackendSettings) -> str | None:
    """Why a backend node cannot send its requests as batches (a judge's ``batch: true`` refuses it
    before any work), or None: OpenAI's Batch API takes one server, Anthropic's Message Batches."""
    if backend.kind == "anthropic":
        return None
    if backend.kind == "openai":
        urls = backend.base_url  # type: ignore[attr-defined]  # the openai node's
        several = isinstance(urls, list) and len(urls) > 1
        return "a batch goes to one server: give backend.base_url one URL" if several else None
    return (
        f"backend.kind {backend.kind} has no batch API: batches need backend.kind openai (OpenAI) or "
        "anthropic"
    )


def batch_api(backend: ChatBackend) -> BatchAPI:
    """The batch API of `backend`'s provider (one `batch_problem` accepts)."""
    if isinstance(backend, AnthropicBackend):
        return AnthropicBatches(backend)
    if isinstance(backend, OpenAIBackend) and type(backend).kind == "openai" and not backend.several:
        return OpenAIBatches(backend)
    raise TypeError(f"{backend!r} has no batch API (its settings should have said so: batch_problem)")


def batch_price(price: Price | None) -> Price | None:
    """The price of a batch request: ``batch_prompt`` / ``batch_completion`` where the price gives
    them (the provider's batch price, half the listed one at OpenAI and Anthropic), a `BatchPrice`;
    else the price as given (an upper bound), and a warning."""
    if price is None:
        return None
    if price.batch_prompt is not None and price.batch_completion is not None:
        named = {"model": price.model} if "model" in price.model_fields_set else {}
        return BatchPrice(**named, prompt=price.batch_prompt, completion=price.batch_completion)
    log.warning(
        "batch: the price gives no batch_prompt / batch_completion, so the estimate and max_cost use the "
        "per-request price (an upper bound)"
    )
    return price


class BatchedBackend(WrappedBackend):
    """`inner`'s requests through its provider's batch API (see the module docstring).

    Args:
        inner: an `openai` (one server) or `anthropic` backend.
        folder: where the ledger and the saved replies go (the run folder's ``batches/``).
        poll_s: seconds between polls.
        wait_s: how long `generate` waits for its batches; past it, their requests are error
            replies that say to rerun (which polls the same batches).
        key: the config key errors name.
    """

    def __init__(
        self,
        inner: ChatBackend,
        folder: str | Path,
        poll_s: float,
        wait_s: float,
        max_requests: int = MAX_REQUESTS,
        key: str = "judge.batch",
    ) -> None:
        super().__init__(inner)
        self.api = batch_api(inner)
        self.ledger = BatchLedger(folder)
        self.poll_s, self.wait_s, self.max_requests = float(poll_s), float(wait_s), int(max_requests)
        self._price = batch_price(inner.price)
        self.submitted = 0  # batches this backend created in this process
        self.collected: set[str] = set()  # batches whose replies this process read when they ended
        self.deadline: float | None = None  # `wait_s` counts from the first wait of the run
        self.key = key
        self.unreachable: dict[str, str] = {}  # batch id -> why its last poll could not reach the server
        self.abandoned: dict[str, str] = {}  # request key -> the batch lost while this run waited for it
        self._held: Any = None  # the ledger folder's lock (`hold`)

    def __repr__(self) -> str:
        return f"BatchedBackend({self.inner!r}, {str(self.ledger.folder)!r})"

    @property
    def price(self) -> Price | None:  # type: ignore[override]
        """The batch price (`batch_price`): what the estimate, `max_cost` and the usage use."""
        return self._price

    def check_ready(self) -> None:
        self.inner.check_ready()
        self.hold()
        self._recover()
        self._resume()

    def hold(self) -> None:
        """Hold the ledger for this run (its folder's lock; a UserError naming the run holding it),
        and read it again: another run may have written it since this backend was built."""
        if self._held is None:
            folder = self.ledger.folder
            folder.mkdir(parents=True, exist_ok=True)
            self._held = acquire_folder(folder, "batch judging", f"({self.key}_folder=ANOTHER_FOLDER)")
            self.ledger = BatchLedger(folder)

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._held is not None:
                (self.ledger.folder / OWNER_FILE).unlink(missing_ok=True)
                self._held.release()
                self._held = None

    # --- submitting -----------------------------------------------------------------------------

    def _keys(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[str]:
        identity = self.inner.cache_identity()
        return [request_key(identity, messages, settings) for messages in batch]

    def _recover(self) -> None:
        """Submissions a killed run made without recording their batch id: found by their token
        where the provider keeps it (OpenAI), else named in a warning (the ledger forgets them)."""
        for token, event in list(self.ledger.unconfirmed.items()):
            if event.get("provider") != self.api.provider:
                continue  # another judge's submission (a jury sharing the folder): its backend looks
            keys = event.get("keys") or []
            found = self.api.find(token, float(event.get("at") or 0) - 60)
            if found:
                log.info("batch %s (submitted by a run that was killed) found again by its token", found)
                self.ledger.submitted(token, self.api.provider, found, keys)
            else:
                why = (
                    f"no {self.api.provider} batch created since then holds its token, so it was most "
                    "likely never created"
                    if self.api.keeps_token
                    else f"{self.api.provider} batches keep no token to find it by, so if its batch list "
                    "shows one created then, cancel it"
                )
                log.warning(
                    "a run was killed while submitting a batch of %d requests at %s (ledger %s): %s; its "
                    "requests are submitted again",
                    event.get("requests"), utc(event.get("at")), self.ledger.path, why,
                )  # fmt: skip
                self.ledger.lost(token)

    def _resume(self) -> None:
        """The batches of the ledger not yet ended (an earlier run submitted them): said, and polled
        once now, so that one the provider does not know is found before anything is submitted (its
        requests go out again with the rest) and one that ended is collected."""
        live = [e for e in self.ledger.batches.values() if not e.ended and e.provider == self.api.provider]
        for entry in sorted(live, key=lambda e: e.submitted_at):
            log.info(
                "polling %s batch %s from ledger %s, submitted at %s (%d requests)", self.api.provider,
                entry.batch_id, self.ledger.path, utc(entry.submitted_at), len(entry.keys),
            )  # fmt: skip
            try:
                polled = self.api.poll(entry.batch_id)
                if polled.ended:
                    self._collect(entry.batch_id, polled)
            except BatchNotFound as err:
                self._lose(entry, str(err), in_run=False)
            except BatchUnreachable as err:
                log.warning(
                    "could not poll %s batch %s (%s); it is polled again when judging reaches it",
                    self.api.provider, entry.batch_id, err,
                )  # fmt: skip

    def _lose(self, entry: BatchEntry, why: str, in_run: bool) -> None:
        """Forget a batch the provider does not know (recorded in the ledger as lost). Its requests
        are submitted again: now (`in_run` False: found before judging), or by the next run (found
        while this one waited for it: they are failed judgments here)."""
        self.ledger.lost_batch(entry.batch_id, why)
        if in_run:
            self.abandoned.update(dict.fromkeys(entry.keys, entry.batch_id))
            then = "its requests are failed judgments in this run, and the next run submits them again"
        else:
            then = "its requests are submitted again"
        log.warning(
            "%s batch %s of ledger %s (submitted at %s, %d requests) is not known to %s: deleted, or made "
            "with another key or project (%s); it is recorded as lost and %s", self.api.provider,
            entry.batch_id, self.ledger.path, utc(entry.submitted_at), len(entry.keys), self.api.provider,
            why, then,
        )  # fmt: skip

    def submit(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> None:
        """New batches for the requests no batch covers (`BatchLedger.covered`), `max_requests` each.
        A request whose line failed in a batch this process collected, or whose batch was lost while
        this process waited for it, is not submitted again in the same run (its judgment is failed;
        the next run retries it)."""
        self.hold()
        todo: dict[str, Sequence[Message]] = {}
        for messages, key in zip(batch, self._keys(batch, settings), strict=True):
            done_here = key in self.abandoned or self.ledger.newest(key) in self.collected
            if key in todo or done_here or self.ledger.covered(key):
                continue
            todo[key] = messages
        keys = list(todo)
        for start in range(0, len(keys), self.max_requests):
            part = keys[start : start + self.max_requests]
            token = uuid.uuid4().hex
            lines = [(key, self.api.request(todo[key], settings)) for key in part]
            self.ledger.submitting(token, self.api.provider, part)
            batch_id = self.api.create(lines, token)
            self.ledger.submitted(token, self.api.provider, batch_id, part)
            self.submitted += 1
            log.info("%s batch %s submitted: %d requests", self.api.provider, batch_id, len(part))

    # --- collecting -----------------------------------------------------------------------------

    def _collect(self, batch_id: str, polled: Polled) -> None:
        replies = self.api.results(batch_id)
        entry = self.ledger.batches[batch_id]
        why = f" ({polled.detail})" if polled.detail else ""
        for key in entry.keys:  # a request the batch gave no line for: a failed batch never ran it
            replies.setdefault(
                key,
                Reply(
                    text="",
                    finish_reason="error",
                    error=f"batch {batch_id} ended {polled.status}{why} without a result for this request",
                ),
            )
        self.ledger.ended(batch_id, polled.status, polled.counts(), [(k, replies[k]) for k in entry.keys])
        self.collected.add(batch_id)
        failed = sum(not replies[k].ok for k in entry.keys)
        log.info(
            "%s batch %s ended (%s): %d replies, %d failed", self.api.provider, batch_id, polled.status,
            len(entry.keys) - failed, failed,
        )  # fmt: skip

    def wait(self, batch_ids: set[str]) -> None:
        """Poll `batch_ids` until each has ended (its replies saved) or the run has waited `wait_s`
        in all (one deadline, from the first wait: not `wait_s` per call). A poll that cannot reach
        the server is a warning and another poll after a longer pause (doubling from `poll_s`, at
        most `MAX_BACKOFF_S`); a batch the provider does not know is lost (`_lose`)."""
        self.hold()
        waiting = {b for b in batch_ids if b in self.ledger.batches and not self.ledger.batches[b].ended}
        start = time.monotonic()
        if self.deadline is None:
            self.deadline = start + self.wait_s
        failures = 0  # polls in a row that could not reach the server
        while waiting:
            reached = True
            for batch_id in sorted(waiting):
                try:
                    polled = self.api.poll(batch_id)
                    if polled.ended:
                        self._collect(batch_id, polled)
                except BatchNotFound as err:
                    self._lose(self.ledger.batches[batch_id], str(err), in_run=True)
                    waiting.discard(batch_id)
                    continue
                except BatchUnreachable as err:
                    self.unreachable[batch_id] = str(err)
                    reached = False
                    then = (
                        f"polling it again, with growing pauses, until this run has waited {self.wait_s:g} s "
                        "(batch_wait_s)"
                        if time.monotonic() < self.deadline
                        else f"this run has waited its {self.wait_s:g} s (batch_wait_s): a rerun polls it"
                    )
                    log.warning("could not poll %s batch %s (%s); %s", self.api.provider, batch_id, err, then)
                    continue
                self.unreachable.pop(batch_id, None)
                if polled.ended:
                    waiting.discard(batch_id)
                else:
                    log.info(
                        "%s batch %s: %s, %d of %d done (waited %.0f s)", self.api.provider, batch_id,
                        polled.status, polled.done, polled.total, time.monotonic() - start,
                    )  # fmt: skip
            left = self.deadline - time.monotonic()
            if not waiting or left <= 0:
                return
            failures = 0 if reached else failures + 1
            pause = min(self.poll_s * 2 ** min(failures, 20), max(self.poll_s, MAX_BACKOFF_S))
            time.sleep(min(pause, left))

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        if not batch:
            return []
        self.submit(batch, settings)
        keys = self._keys(batch, settings)
        self.wait({b for b in map(self.ledger.live, keys) if b is not None})
        return [self._reply(key) for key in keys]

    def _reply(self, key: str) -> Reply:
        reply = self.ledger.reply(key)
        live = self.ledger.live(key)
        if reply is not None and (reply.ok or live is None):
            return reply
        if live is None:  # its batch was lost while this run waited for it
            lost = self.abandoned.get(key, "")
            why = (
                f"batch {lost} is not known to the provider (deleted, or another key or project)"
                if lost
                else "no batch holds this request"
            )
            return Reply(text="", finish_reason="error", error=f"{why}: rerun to submit it again")
        if live in self.unreachable:
            error = (
                f"batch {live} could not be reached within this run's {self.wait_s:g} s (batch_wait_s; "
                f"last poll: {self.unreachable[live]}): rerun to collect it; it is not submitted again"
            )
        else:
            error = (
                f"batch {live} has not ended within this run's {self.wait_s:g} s (batch_wait_s): "
                "rerun to collect it; it is not submitted again"
            )
        return Reply(text="", finish_reason="error", error=error)


def with_batches(
    backend: ChatBackend, folder: str | Path, poll_s: float, wait_s: float, key: str
) -> BatchedBackend:
    """`backend` behind its provider's batch API, its ledger in `folder`; the timings as the judge's
    settings validated them (`batch_poll_s` > 0, `batch_wait_s` >= 0, finite)."""
    return BatchedBackend(backend, folder, poll_s, wait_s, key=key)
