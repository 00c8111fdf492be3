"""Anthropic's Message Batches for the `anthropic` backend: create a batch of Messages API requests,
poll it until ``processing_status`` is ``ended``, stream its results.

A ``succeeded`` line's message is read as a single request's answer is
(`AnthropicBackend.reply`); an ``errored``, ``canceled`` or ``expired`` line is an error reply that
says which. Message Batches keep no metadata, so a batch created by a run killed before it recorded
the id cannot be found again (`find` is None; the ledger warns).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from esc.chat.backends.anthropic_api import AnthropicBackend
from esc.chat.base import GenerationSettings, Message, Reply
from esc.chat.batch.api import Polled
from esc.secrets.redaction import scrub_text


class AnthropicBatches:
    provider = "anthropic"

    def __init__(self, backend: AnthropicBackend) -> None:
        self.backend = backend

    def request(self, messages: Sequence[Message], settings: GenerationSettings) -> dict[str, Any]:
        return self.backend.request(messages, settings)

    def create(self, lines: Sequence[tuple[str, dict[str, Any]]], token: str) -> str:
        client = self.backend.ensure_client().with_options(max_retries=0)  # a retry could make a second batch
        batch = client.messages.batches.create(
            requests=[{"custom_id": cid, "params": params} for cid, params in lines]
        )
        return str(batch.id)

    def find(self, token: str, since: float) -> str | None:
        return None

    def poll(self, batch_id: str) -> Polled:
        batch = self.backend.ensure_client().messages.batches.retrieve(batch_id)
        c = batch.request_counts
        failed = c.errored + c.canceled + c.expired
        done = c.succeeded + failed
        return Polled(
            str(batch.processing_status),
            batch.processing_status == "ended",
            done=done,
            total=done + c.processing,
            failed=failed,
        )

    def results(self, batch_id: str) -> dict[str, Reply]:
        replies: dict[str, Reply] = {}
        for row in self.backend.ensure_client().messages.batches.results(batch_id):
            result = row.result
            if result.type == "succeeded":
                reply = self.backend.reply(result.message)
                if not reply.ok:
                    reply.error = f"batch {batch_id}: {reply.error}"
            else:
                why = result.type
                error = getattr(getattr(result, "error", None), "error", None)
                if error is not None:
                    why = f"{result.type}: {getattr(error, 'type', '')}: {getattr(error, 'message', '')}"
                reply = Reply(
                    text="",
                    finish_reason="error",
                    error=scrub_text(f"batch {batch_id}: {why}", self.backend.secrets()),
                )
            replies[row.custom_id] = reply
        return replies
