"""OpenAI's Batch API for the `openai` backend: upload a JSONL file of chat completions requests,
create a batch over it (24 h window), poll it, download its output and error files.

Each output line's body is read exactly as a single request's answer is (`OpenAIBackend._reply`,
with `empty_answer` first), so a batch gives the same replies as per-request calls; an error line
(an HTTP error of its own, or ``batch_expired``) and a request a failed batch never ran are error
replies; so is a malformed line (`esc.chat.batch.api.result_lines`). The token of the submission
goes into the batch's ``metadata`` (``esc_submission``) so that a run killed between creating the
batch and recording its id finds it again (`find`). A batch the server does not know (HTTP 404) is
`BatchNotFound`; no connection, a timeout, HTTP 5xx or 429 (the SDK's retries spent) is
`BatchUnreachable`.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import openai
from openai.types.chat import ChatCompletion

from esc.chat.backends._common import one_line
from esc.chat.backends.openai_compat import OpenAIBackend, empty_answer
from esc.chat.base import GenerationSettings, Message, Reply
from esc.chat.batch.api import BatchNotFound, BatchUnreachable, Polled, malformed, result_lines
from esc.secrets.redaction import scrub_text, secret_values

T = TypeVar("T")
#: the SDK's errors that say "ask again later"
TRANSIENT = (openai.APIConnectionError, openai.InternalServerError, openai.RateLimitError)

ENDPOINT = "/v1/chat/completions"
ENDED = {"completed", "expired", "failed", "cancelled"}
TOKEN_KEY = "esc_submission"


def _error(text: str) -> Reply:
    return Reply(text="", finish_reason="error", error=text)


class OpenAIBatches:
    provider = "openai"
    keeps_token = True

    def __init__(self, backend: OpenAIBackend) -> None:
        if backend.several:
            raise ValueError("a batch goes to one server: base_url must be one URL")
        self.backend = backend

    def _client(self) -> Any:
        self.backend._ensure_client()
        return self.backend._client

    def _secrets(self) -> list[str]:
        return [*self.backend._secrets, *secret_values()]

    def request(self, messages: Sequence[Message], settings: GenerationSettings) -> dict[str, Any]:
        body = self.backend._request(messages, settings)
        extra = body.pop("extra_body", None) or {}
        return {**body, **extra}  # in a batch file the extra fields are the body's own

    def create(self, lines: Sequence[tuple[str, dict[str, Any]]], token: str) -> str:
        data = "".join(
            json.dumps(
                {"custom_id": cid, "method": "POST", "url": ENDPOINT, "body": body}, ensure_ascii=False
            )
            + "\n"
            for cid, body in lines
        ).encode("utf-8")
        client = self._client()
        run = self.backend._run
        upload = run(client.files.create(file=("batch.jsonl", io.BytesIO(data)), purpose="batch"))
        once = client.with_options(max_retries=0)  # a retried create could make a second batch
        try:
            batch = run(
                once.batches.create(
                    input_file_id=upload.id,
                    endpoint=ENDPOINT,
                    completion_window="24h",
                    metadata={TOKEN_KEY: token},
                )
            )
        except Exception:  # the answer was lost, not necessarily the batch: look for it by its token
            found = self.find(token, time.time() - 600)
            if found is None:
                raise
            return found
        return str(batch.id)

    def find(self, token: str, since: float) -> str | None:
        """Newest first, down to the batches created before `since` (epoch seconds)."""

        async def search() -> str | None:
            async for batch in self._client().batches.list(limit=100):
                if (batch.metadata or {}).get(TOKEN_KEY) == token:
                    return str(batch.id)
                if batch.created_at < since:
                    return None
            return None

        return self.backend._run(search())

    def _asking(self, call: Callable[[], T]) -> T:
        """`call()`, the SDK's not-found and transient errors as `BatchNotFound` / `BatchUnreachable`."""
        try:
            return call()
        except openai.NotFoundError as err:
            raise BatchNotFound(one_line(err, self._secrets(), 300)) from None
        except TRANSIENT as err:
            raise BatchUnreachable(one_line(err, self._secrets(), 300)) from None

    def poll(self, batch_id: str) -> Polled:
        batch = self._asking(lambda: self.backend._run(self._client().batches.retrieve(batch_id)))
        counts = batch.request_counts
        detail = ""
        if batch.errors is not None and batch.errors.data:
            detail = "; ".join(f"{e.code}: {e.message}" for e in batch.errors.data)
        return Polled(
            str(batch.status),
            batch.status in ENDED,
            done=(counts.completed + counts.failed) if counts else 0,
            total=counts.total if counts else 0,
            failed=counts.failed if counts else 0,
            detail=scrub_text(detail, self._secrets()),
        )

    def results(self, batch_id: str) -> dict[str, Reply]:
        client, run = self._client(), self.backend._run
        batch = self._asking(lambda: run(client.batches.retrieve(batch_id)))
        replies: dict[str, Reply] = {}
        for which, file_id in (("output file", batch.output_file_id), ("error file", batch.error_file_id)):
            if not file_id:
                continue
            content = self._asking(lambda f=file_id: run(client.files.content(f)))
            for custom_id, row in result_lines(content.text, batch_id, which):
                if row is None:
                    replies[custom_id] = malformed(batch_id, "not JSON")
                    continue
                try:
                    replies[custom_id] = self._line(row, batch_id)
                except (AttributeError, KeyError, TypeError, ValueError) as err:  # a shape no line has
                    replies[custom_id] = malformed(batch_id, type(err).__name__)
        return replies  # a failed batch has no files: the caller says why its requests never ran

    def _line(self, row: dict[str, Any], batch_id: str) -> Reply:
        """One output or error line as the reply a single request would have given."""
        response, error = row.get("response"), row.get("error")
        if response is not None and not isinstance(response, dict):
            return malformed(batch_id, f"its response is a {type(response).__name__}, not an object")
        response = response or {}
        status = response.get("status_code")
        body = response.get("body")
        if error or status != 200 or not isinstance(body, dict):
            if isinstance(error, dict):
                why = f"{error.get('code')}: {error.get('message')}"
            elif error:
                why = str(error)
            else:
                detail = body.get("error") if isinstance(body, dict) else body
                message = detail.get("message") if isinstance(detail, dict) else detail
                why = f"HTTP {status}: {message}"
            return _error(scrub_text(f"batch {batch_id}: {why}", self._secrets()))
        try:
            completion = ChatCompletion.model_validate(body)
        except Exception as err:  # pydantic's ValidationError: the line is not a chat completion
            return _error(f"batch {batch_id}: the line is not a chat completion ({type(err).__name__})")
        problem = empty_answer(completion)
        if problem is not None:
            return _error(scrub_text(f"batch {batch_id}: {problem}", self._secrets()))
        wants = bool(body.get("choices") and body["choices"][0].get("logprobs"))
        return self.backend._reply(completion, wants, 0.0)
