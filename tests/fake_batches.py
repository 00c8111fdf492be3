"""The fake server's Anthropic Messages endpoint and both batch APIs (`tests.fake_openai_server`).

- OpenAI's Batch API: ``POST /v1/files`` (a multipart upload, purpose ``batch``), ``POST /v1/batches``,
  ``GET /v1/batches`` (list, newest first), ``GET /v1/batches/{id}``, ``GET /v1/files/{id}/content``.
- Anthropic: ``POST /v1/messages``, ``POST /v1/messages/batches``, ``GET /v1/messages/batches/{id}``,
  ``GET /v1/messages/batches/{id}/results``.

A batch stays in progress for `FakeOpenAIServer.batch_polls_to_end` reads of it (a test that must kill
a run between submit and download sets it high, then to 0), then every line is answered the way the
single endpoint would answer it, faults included (``server.inject(["500"], match=...)`` fails the
lines whose last message matches). `FakeOpenAIServer.batch_outcome` picks how it ends:

- ``completed``: every line run;
- ``expired``: the first half run, the rest expired (OpenAI: ``batch_expired`` lines in the error file,
  status ``expired``; Anthropic: ``expired`` results);
- ``failed``: OpenAI: status ``failed`` with a validation error and no files; Anthropic, whose batches
  do not fail as a whole: every line ``errored``.

`FakeOpenAIServer.batch_drop_polls` closes the next reads of a batch without an answer (a server
unreachable while a run polls); `FakeOpenAIServer.batch_malformed` ({text: kind}) writes the result
line of each request whose last message holds `text` malformed: ``no_custom_id`` (the line without
it), ``cut`` (half a line: not JSON) or ``not_a_result`` (its ``response`` / ``result`` a string).
"""

from __future__ import annotations

import dataclasses
import email.parser
import email.policy
import itertools
import json
import threading
import time
from typing import Any

OUTCOMES = ("completed", "expired", "failed")
FINISH_TO_STOP = {"stop": "end_turn", "length": "max_tokens", "content_filter": "refusal"}
_ids = itertools.count(1)


@dataclasses.dataclass
class FakeBatch:
    id: str
    provider: str  # openai | anthropic
    lines: list[tuple[str, dict[str, Any]]]  # (custom_id, body or params)
    created_at: int
    metadata: dict[str, Any]
    input_file_id: str | None = None
    polls: int = 0
    ended: bool = False
    outcome: str = "completed"
    results: list[Any] = dataclasses.field(default_factory=list)  # OpenAI: output lines (a str: a raw line)
    errors: list[Any] = dataclasses.field(default_factory=list)  # OpenAI: error lines
    output_file_id: str | None = None
    error_file_id: str | None = None


def anthropic_to_chat(params: dict[str, Any]) -> dict[str, Any]:
    """A Messages API request as the chat completions body the backend answers."""
    system = params.get("system")
    if isinstance(system, list):
        system = "".join(b.get("text", "") for b in system)
    messages = [{"role": "system", "content": system}] if system else []
    for m in params.get("messages") or []:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(b.get("text", "") for b in content)
        messages.append({"role": m.get("role"), "content": content})
    body: dict[str, Any] = {
        "model": params.get("model"),
        "messages": messages,
        "max_tokens": params.get("max_tokens"),
        "temperature": params.get("temperature", 1.0),
    }
    if params.get("top_p") is not None:
        body["top_p"] = params["top_p"]
    if params.get("stop_sequences"):
        body["stop"] = params["stop_sequences"]
    return body


def chat_to_anthropic(payload: dict[str, Any]) -> dict[str, Any]:
    """A chat completion as the Messages API answer."""
    choices = payload.get("choices") or [{}]
    message = choices[0].get("message") or {}
    text = message.get("content")
    usage = payload.get("usage") or {}
    return {
        "id": f"msg_fake_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": payload.get("model"),
        "content": [] if not text else [{"type": "text", "text": text}],
        "stop_reason": FINISH_TO_STOP.get(choices[0].get("finish_reason"), "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.get("prompt_tokens", 0),
            "output_tokens": usage.get("completion_tokens", 0),
        },
    }


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_error",
    }.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _raw(row: Any) -> str:
    """A result row as its line: a dict as JSON, a str (a malformed line) as it is."""
    return row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)


def multipart(raw: bytes, content_type: str) -> dict[str, tuple[str | None, bytes]]:
    """A multipart/form-data body as {field: (file name, bytes)}."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + raw)
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        fields[str(name)] = (part.get_filename(), part.get_payload(decode=True) or b"")
    return fields


class FakeBatches:
    """The batch state of one fake server; `state` answers a line (`FakeOpenAIServer.answer_line`)."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, FakeBatch] = {}
        self.lock = threading.Lock()

    @property
    def created(self) -> list[FakeBatch]:
        return list(self.batches.values())

    # --- OpenAI -----------------------------------------------------------------------------------

    def upload(self, raw: bytes, content_type: str) -> tuple[int, dict[str, Any]]:
        fields = multipart(raw, content_type)
        if "file" not in fields or fields.get("purpose", (None, b""))[1] != b"batch":
            return 400, {
                "error": {"message": "a file with purpose batch is required", "type": "invalid_request_error"}
            }
        file_id = f"file-fake{next(_ids)}"
        name, data = fields["file"]
        with self.lock:
            self.files[file_id] = data
        return 200, {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": name or "batch.jsonl",
            "purpose": "batch",
            "status": "processed",
        }

    def create_openai(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        data = self.files.get(str(body.get("input_file_id")))
        if data is None:
            return 404, {"error": {"message": "no such file", "type": "invalid_request_error"}}
        lines = []
        for line in data.decode("utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                lines.append((row["custom_id"], row["body"]))
        if len({cid for cid, _ in lines}) != len(lines):
            return 400, {"error": {"message": "duplicate custom_id", "type": "invalid_request_error"}}
        batch = FakeBatch(
            f"batch_fake{next(_ids)}",
            "openai",
            lines,
            int(time.time()),
            dict(body.get("metadata") or {}),
            input_file_id=str(body["input_file_id"]),
            outcome=self.state.batch_outcome,
        )
        with self.lock:
            self.batches[batch.id] = batch
        return 200, self.openai_view(batch)

    def get_openai(self, batch_id: str) -> tuple[int, dict[str, Any]]:
        batch = self.batches.get(batch_id)
        if batch is None or batch.provider != "openai":
            return 404, {"error": {"message": f"no batch {batch_id}", "type": "invalid_request_error"}}
        self._advance(batch)
        return 200, self.openai_view(batch)

    def list_openai(self) -> tuple[int, dict[str, Any]]:
        found = [self.openai_view(b) for b in reversed(self.created) if b.provider == "openai"]
        return 200, {
            "object": "list",
            "data": found,
            "has_more": False,
            "first_id": found[0]["id"] if found else None,
            "last_id": found[-1]["id"] if found else None,
        }

    def openai_view(self, batch: FakeBatch) -> dict[str, Any]:
        n = len(batch.lines)
        if not batch.ended:
            status, done, failed = ("validating" if batch.polls == 0 else "in_progress"), 0, 0
        elif batch.outcome == "failed":
            status, done, failed = "failed", 0, 0
        else:
            status = "expired" if batch.outcome == "expired" else "completed"
            done, failed = len(batch.results), len(batch.errors)
        errors = None
        if batch.ended and batch.outcome == "failed":
            errors = {
                "object": "list",
                "data": [
                    {
                        "code": "invalid_request",
                        "message": "injected: the batch failed validation",
                        "line": None,
                        "param": None,
                    }
                ],
            }
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "errors": errors,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": batch.created_at,
            "metadata": batch.metadata,
            "request_counts": {"total": n, "completed": done, "failed": failed},
        }

    # --- Anthropic --------------------------------------------------------------------------------

    def create_anthropic(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        requests = body.get("requests") or []
        lines = [(r["custom_id"], r["params"]) for r in requests]
        if not lines or len({cid for cid, _ in lines}) != len(lines):
            return 400, anthropic_error(400, "requests must be a non-empty list with unique custom_id")
        batch = FakeBatch(
            f"msgbatch_fake{next(_ids)}",
            "anthropic",
            lines,
            int(time.time()),
            {},
            outcome=self.state.batch_outcome,
        )
        with self.lock:
            self.batches[batch.id] = batch
        return 200, self.anthropic_view(batch)

    def get_anthropic(self, batch_id: str) -> tuple[int, dict[str, Any]]:
        batch = self.batches.get(batch_id)
        if batch is None or batch.provider != "anthropic":
            return 404, anthropic_error(404, f"no batch {batch_id}")
        self._advance(batch)
        return 200, self.anthropic_view(batch)

    def anthropic_results(self, batch_id: str) -> tuple[int, bytes]:
        batch = self.batches.get(batch_id)
        if batch is None or not batch.ended:
            return 404, json.dumps(anthropic_error(404, "the batch has not ended")).encode()
        return 200, "".join(_raw(r) + "\n" for r in batch.results).encode()

    def anthropic_view(self, batch: FakeBatch) -> dict[str, Any]:
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        if batch.ended:
            for row in batch.results:
                result = row.get("result") if isinstance(row, dict) else None
                kind = result.get("type") if isinstance(result, dict) else None
                counts[kind if kind in counts else "succeeded"] += 1  # a malformed line: counted as run
        else:
            counts["processing"] = len(batch.lines)
        stamp = "2026-11-29T00:00:00Z"
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": "ended" if batch.ended else "in_progress",
            "request_counts": counts,
            "created_at": stamp,
            "expires_at": stamp,
            "ended_at": stamp if batch.ended else None,
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": f"{self.state.root}/v1/messages/batches/{batch.id}/results"
            if batch.ended
            else None,
        }

    # --- running a batch ----------------------------------------------------------------------------

    def _advance(self, batch: FakeBatch) -> None:
        with self.lock:
            batch.polls += 1
            if batch.ended or batch.polls <= self.state.batch_polls_to_end:
                return
        self._run(batch)

    def _run(self, batch: FakeBatch) -> None:
        half = (len(batch.lines) + 1) // 2
        for k, (cid, body) in enumerate(batch.lines):
            if batch.outcome == "failed" and batch.provider == "openai":
                break  # failed validation: nothing runs
            if batch.outcome == "expired" and k >= half:
                self._expired(batch, cid)
                continue
            if batch.outcome == "failed":
                batch.results.append(
                    {
                        "custom_id": cid,
                        "result": {
                            "type": "errored",
                            "error": anthropic_error(500, "injected: the request failed"),
                        },
                    }
                )
                continue
            chat = anthropic_to_chat(body) if batch.provider == "anthropic" else body
            status, payload = self.state.answer_line(chat)
            self._line(batch, cid, status, payload)
        self._malform(batch)
        with self.lock:
            if batch.provider == "openai":
                if batch.results:
                    batch.output_file_id = self._file(batch.results)
                if batch.errors:
                    batch.error_file_id = self._file(batch.errors)
            batch.ended = True

    def _file(self, rows: list[Any]) -> str:
        file_id = f"file-fake{next(_ids)}"
        self.files[file_id] = "".join(_raw(r) + "\n" for r in rows).encode()
        return file_id

    def _malform(self, batch: FakeBatch) -> None:
        """The result lines `FakeOpenAIServer.batch_malformed` names, written as a broken server might."""
        kinds = dict(self.state.batch_malformed)
        if not kinds:
            return
        last = {}
        for cid, body in batch.lines:
            chat = anthropic_to_chat(body) if batch.provider == "anthropic" else body
            messages = chat.get("messages") or [{}]
            last[cid] = str(messages[-1].get("content", ""))
        field = "response" if batch.provider == "openai" else "result"
        for rows in (batch.results, batch.errors):
            for i, row in enumerate(rows):
                text = last.get(row.get("custom_id"), "")
                kind = next((k for match, k in kinds.items() if match in text), None)
                if kind == "no_custom_id":
                    rows[i] = {k: v for k, v in row.items() if k != "custom_id"}
                elif kind == "cut":
                    line = json.dumps(row, ensure_ascii=False)
                    rows[i] = line[: len(line) // 2]
                elif kind == "not_a_result":
                    rows[i] = {"custom_id": row["custom_id"], field: "garbage"}
                elif kind is not None:
                    raise ValueError(f"unknown malformed line kind {kind!r}")

    def _line(self, batch: FakeBatch, cid: str, status: int, payload: dict[str, Any]) -> None:
        if batch.provider == "openai":
            row = {
                "id": f"batch_req_{next(_ids)}",
                "custom_id": cid,
                "error": None,
                "response": {"status_code": status, "request_id": f"req_{next(_ids)}", "body": payload},
            }
            (batch.results if status == 200 else batch.errors).append(row)
        elif status == 200:
            batch.results.append(
                {"custom_id": cid, "result": {"type": "succeeded", "message": chat_to_anthropic(payload)}}
            )
        else:
            message = (payload.get("error") or {}).get("message", "error")
            batch.results.append(
                {"custom_id": cid, "result": {"type": "errored", "error": anthropic_error(status, message)}}
            )

    def _expired(self, batch: FakeBatch, cid: str) -> None:
        if batch.provider == "openai":
            batch.errors.append(
                {
                    "id": f"batch_req_{next(_ids)}",
                    "custom_id": cid,
                    "response": None,
                    "error": {
                        "code": "batch_expired",
                        "message": "This request could not be executed before the completion window expired.",
                    },
                }
            )
        else:
            batch.results.append({"custom_id": cid, "result": {"type": "expired"}})
