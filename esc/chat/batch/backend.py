"""A chat backend whose requests go through its provider's batch API (half the price, answers within
24 h): `BatchedBackend`, and `with_batches`, which a judge's ``batch: true`` calls.

`submit` sends every request no batch covers yet as new batches (recorded in the run folder's
ledger, `esc.chat.batch.ledger`, before and after the provider is asked); `generate` submits what
is not covered, polls the batches that hold its requests until they end (or `wait_s` passes),
saves their replies and returns them. A run killed at any point and run again polls the same
batches: nothing is submitted twice. A request whose line failed (an error, an expired batch) is
an error reply (a failed judgment, never a score), and a rerun submits it again.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from esc.chat.backends.anthropic_api import AnthropicBackend
from esc.chat.backends.openai_compat import OpenAIBackend
from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, WrappedBackend
from esc.chat.batch.anthropic_batches import AnthropicBatches
from esc.chat.batch.api import BatchAPI, Polled
from esc.chat.batch.ledger import BatchLedger
from esc.chat.batch.openai_batches import OpenAIBatches
from esc.chat.cache import request_key
from esc.errors import ConfigError

log = logging.getLogger(__name__)

#: requests per batch: OpenAI takes up to 50,000 lines (200 MB), Anthropic 100,000 (256 MB)
MAX_REQUESTS = 10_000


def batch_api(backend: ChatBackend, key: str) -> BatchAPI:
    """The batch API of `backend`'s provider; a ConfigError naming `key` for a backend without one."""
    if isinstance(backend, AnthropicBackend):
        return AnthropicBatches(backend)
    if isinstance(backend, OpenAIBackend) and type(backend).kind == "openai":
        if backend.several:
            raise ConfigError(key, "a batch goes to one server: give backend.base_url one URL")
        return OpenAIBatches(backend)
    raise ConfigError(
        key, f"{backend!r} has no batch API: batches need backend.kind openai (OpenAI) or anthropic"
    )


def batch_price(price: dict[str, Any] | None) -> dict[str, Any] | None:
    """The price of a batch request: ``batch_prompt`` / ``batch_completion`` where the price gives
    them (the provider's batch price, half the listed one at OpenAI and Anthropic), marked
    ``batch: true``; else the price as given (an upper bound), and a warning."""
    if not price:
        return price
    if "batch_prompt" in price and "batch_completion" in price:
        batched = {k: v for k, v in price.items() if not k.startswith("batch_")}
        return {
            **batched,
            "prompt": price["batch_prompt"],
            "completion": price["batch_completion"],
            "batch": True,
        }
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
        poll_s: float = 30.0,
        wait_s: float = 86_400.0,
        max_requests: int = MAX_REQUESTS,
        key: str = "judge.batch",
    ) -> None:
        super().__init__(inner)
        self.api = batch_api(inner, key)
        self.ledger = BatchLedger(folder)
        self.poll_s, self.wait_s, self.max_requests = float(poll_s), float(wait_s), int(max_requests)
        self._price = batch_price(inner.price)
        self.submitted = 0  # batches this backend created in this process
        self.collected: set[str] = set()  # batches whose replies this process read when they ended
        self.deadline: float | None = None  # `wait_s` counts from the first wait of the run

    def __repr__(self) -> str:
        return f"BatchedBackend({self.inner!r}, {str(self.ledger.folder)!r})"

    @property
    def price(self) -> dict[str, Any] | None:  # type: ignore[override]
        """The batch price (`batch_price`): what the estimate, `max_cost` and the usage use."""
        return self._price

    def check_ready(self) -> None:
        self.inner.check_ready()
        self._recover()

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
                log.warning(
                    "a run was killed while submitting a batch of %d requests at %s: %s keeps no token "
                    "to find it by, so if its batch list shows one created then, cancel it; its "
                    "requests are submitted again",
                    event.get("requests"), event.get("at"), self.api.provider,
                )  # fmt: skip
                self.ledger.lost(token)

    def submit(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> None:
        """New batches for the requests no batch covers (`BatchLedger.covered`), `max_requests` each.
        A request whose line failed in a batch this process collected is not submitted again in the
        same run (its judgment is failed; the next run retries it)."""
        todo: dict[str, Sequence[Message]] = {}
        for messages, key in zip(batch, self._keys(batch, settings), strict=True):
            if key in todo or self.ledger.covered(key) or self.ledger.newest(key) in self.collected:
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
        in all (one deadline, from the first wait: not `wait_s` per call)."""
        waiting = {b for b in batch_ids if not self.ledger.batches[b].ended}
        start = time.monotonic()
        if self.deadline is None:
            self.deadline = start + self.wait_s
        while waiting:
            for batch_id in sorted(waiting):
                polled = self.api.poll(batch_id)
                if polled.ended:
                    self._collect(batch_id, polled)
                    waiting.discard(batch_id)
                else:
                    log.info(
                        "%s batch %s: %s, %d of %d done (waited %.0f s)", self.api.provider, batch_id,
                        polled.status, polled.done, polled.total, time.monotonic() - start,
                    )  # fmt: skip
            left = self.deadline - time.monotonic()
            if not waiting or left <= 0:
                return
            time.sleep(min(self.poll_s, left))

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        if not batch:
            return []
        self.submit(batch, settings)
        keys = self._keys(batch, settings)
        self.wait({b for b in map(self.ledger.live, keys) if b is not None})
        return [self._reply(key) for key in keys]

    def _reply(self, key: str) -> Reply:
        reply = self.ledger.reply(key)
        if reply is not None and (reply.ok or self.ledger.live(key) is None):
            return reply
        batch_id = self.ledger.live(key)
        return Reply(
            text="",
            finish_reason="error",
            error=(
                f"batch {batch_id} has not ended within this run's {self.wait_s:g} s (batch_wait_s): "
                "rerun to collect it; it is not submitted again"
            ),
        )


def with_batches(
    backend: ChatBackend, folder: str | Path | None, poll_s: float, wait_s: float, key: str
) -> BatchedBackend:
    """`backend` behind its provider's batch API, its ledger in `folder` (a ConfigError naming `key`
    without one)."""
    if not folder:
        raise ConfigError(f"{key}_folder", "is empty: name the folder the batch ledger goes in")
    if not math.isfinite(float(poll_s)) or float(poll_s) <= 0:  # nan would poll in a tight loop forever
        raise ConfigError(f"{key}_poll_s", f"must be a positive number, got {poll_s}")
    if not math.isfinite(float(wait_s)) or float(wait_s) < 0:  # nan would never end the wait
        raise ConfigError(f"{key}_wait_s", f"must be a number of seconds, 0 or more, got {wait_s}")
    return BatchedBackend(backend, folder, poll_s, wait_s, key=key)
