"""Anthropic's Message Batches for the `anthropic` backend: create a batch of Messages API requests,
poll it until ``processing_status`` is ``ended``, stream its results.

A ``succeeded`` line's message is read as a single request's answer is
(`AnthropicBackend.reply`); an ``errored``, ``canceled`` or ``expired`` line is an error reply that
says which; so is a malformed line (the results are read as text, line by line:
`esc.chat.batch.api.result_lines`). Message Batches keep no metadata, so a batch created by a run
killed before it recorded the id cannot be found again (`find` is None; the ledger warns). A batch
the server does not know (HTTP 404) is `BatchNotFound`; no connection, a timeout, HTTP 5xx, 529 or
429 (the SDK's retries spent) is `BatchUnreachable`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anthropic
from anthropic.types.messages import MessageBatchIndividualResponse

from esc.chat.backends._common import one_line
from esc.chat.backends.anthropic_api import AnthropicBackend
from esc.chat.base import GenerationSettings, Message, Reply
from esc.chat.batch.api import BatchNotFound, BatchUnreachable, Polled, malformed, result_lines
from esc.secrets.redaction import scrub_text

T = TypeVar("T")
#: the SDK's errors that say "ask again later"
TRANSIENT = (anthropic.APIConnectionError, anthropic.InternalServerError, anthropic.RateLimitError)


class AnthropicBatches:
    provider = "anthropic"
    keeps_token = False

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

    def _asking(self, call: Callable[[], T]) -> T:
        """`call()`, the SDK's not-found and transient errors as `BatchNotFound` / `BatchUnreachable`."""
        try:
            return call()
        except anthropic.NotFoundError as err:
            raise BatchNotFound(one_line(err, self.backend.secrets(), 300)) from None
        except TRANSIENT as err:
            raise BatchUnreachable(one_line(err, self.backend.secrets(), 300)) from None

    def poll(self, batch_id: str) -> Polled:
        batches = self.backend.ensure_client().messages.batches
        batch = self._asking(lambda: batches.retrieve(batch_id))
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

    def _text(self, batch_id: str) -> str:
        """The results file as text (the SDK's decoder stops at the first line it cannot parse)."""
        decoder = self.backend.ensure_client().messages.batches.results(batch_id)
        try:
            return decoder.http_response.read().decode("utf-8", "replace")
        finally:
            decoder.close()

    def results(self, batch_id: str) -> dict[str, Reply]:
        replies: dict[str, Reply] = {}
        text = self._asking(lambda: self._text(batch_id))
        for custom_id, row in result_lines(text, batch_id, "results"):
            if row is None:
                replies[custom_id] = malformed(batch_id, "not JSON")
                continue
            try:
                replies[custom_id] = self._line(
                    MessageBatchIndividualResponse.model_construct(**row), batch_id
                )
            except (AttributeError, KeyError, TypeError, ValueError) as err:  # a shape no line has
                replies[custom_id] = malformed(batch_id, type(err).__name__)
        return replies

    def _line(self, row: MessageBatchIndividualResponse, batch_id: str) -> Reply:
        """One result line as the reply a single request would have given."""
        result = row.result
        if result.type == "succeeded":
            reply = self.backend.reply(result.message)
            if not reply.ok:
                reply.error = f"batch {batch_id}: {reply.error}"
            return reply
        why = result.type
        error = getattr(getattr(result, "error", None), "error", None)
        if error is not None:
            why = f"{result.type}: {getattr(error, 'type', '')}: {getattr(error, 'message', '')}"
        return Reply(
            text="",
            finish_reason="error",
            error=scrub_text(f"batch {batch_id}: {why}", self.backend.secrets()),
        )
