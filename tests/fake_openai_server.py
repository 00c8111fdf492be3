"""A small OpenAI-compatible chat completions server with fault injection, for offline tests.

It serves a chat backend (by default the embedded tiny model through ``HFBackend``) at
``POST /v1/chat/completions`` and lists it at ``GET /v1/models``. Faults make the next requests
fail the way real APIs do, to exercise client retries:

* ``"429"``, ``"500"``, ``"503"``, any HTTP status: an OpenAI-style JSON error with that status
  (and ``retry-after-ms``, so SDK retries wait only briefly); ``"401"`` echoes the bearer token in
  its message, as a careless server might, to check that clients mask it;
* ``"timeout"``: the reply comes only after ``timeout_sleep_s`` (longer than the client waits);
* ``"drop"``: the connection is closed without a response;
* answers without text, with HTTP 200: ``"null_content"`` (``"content": null``), ``"empty_content"``
  (``""``), ``"no_choices"`` (``"choices": []``), ``"html"`` (an HTML page, as a proxy sends);
* ``"echo_key"``: a normal reply whose text repeats the bearer token (a model that echoes its key).

Queue faults with ``server.inject(["429", "500", "timeout"])`` (optionally only for requests whose
last message contains ``match``), send a header ``X-Fault: 500`` with one request, or give every
other request one (``fault_every="echo_key"``).
``server.requests`` counts the chat requests received and ``server.received`` keeps their bodies
and Authorization headers; ``server.model_requests`` counts ``GET /v1/models``.

Like a real server it can check the bearer token (``api_key``: a wrong one is a 401 on every route),
list the models it serves (``served_models``; ``list_models=False``: no such route, 404), refuse a
model it does not serve (``strict_models``: 404 "model does not exist", as vLLM does), and report
in every reply the model that answered (``response_model``, default the requested name) and a
``system_fingerprint``. ``logprobs: true`` with ``top_logprobs: n`` returns per-token
log-probabilities, as OpenAI and vLLM do. A request with a ``character_profile`` (Baichuan-NPC
style) is answered with the profile rendered as a system message.

    with FakeOpenAIServer(backend) as server:  # in tests
        OpenAIBackend.of(model="tiny", base_url=server.url, api_key_env=None)

    python -m tests.fake_openai_server --port 8011   # by hand, from the repo root: serves the tiny model

It also speaks Anthropic's Messages API (``POST /v1/messages``, the key in ``x-api-key``; give the
Anthropic SDK ``server.root``) and both batch APIs, OpenAI's and Anthropic's (`tests.fake_batches`:
``batch_polls_to_end``, ``batch_outcome``, ``batch_drop_polls``, ``batch_malformed``, ``server.batches``).

    python -m tests.fake_openai_server --port 8011 --scores   # a judge's stand-in: "Score: N" replies

``--scores`` (`ScoreBackend`) answers every request with a score read from a hash of its text, so a
judge aimed at the server gives valid judgments (docs/scoring.md, "Batch judging offline").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
from collections.abc import Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply
from tests.fake_batches import FakeBatches, anthropic_error, anthropic_to_chat, chat_to_anthropic

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_api_key",
    404: "not_found_error",
    429: "rate_limit_exceeded",
}


class FakeOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 in a background thread (a context manager)."""

    def __init__(
        self,
        backend: ChatBackend | None = None,
        model_name: str = "tiny",
        host: str = "127.0.0.1",
        port: int = 0,
        timeout_sleep_s: float = 5.0,
        retry_after_ms: int | None = 10,
        api_key: str | None = None,
        served_models: Sequence[str] | None = None,
        list_models: bool = True,
        strict_models: bool = False,
        response_model: str | None = None,
        system_fingerprint: str | None = "fp_fake_0001",
        fault_every: str | None = None,
    ) -> None:
        self.backend = backend
        self.model_name = model_name
        self.api_key = api_key
        self.served_models = list(served_models) if served_models is not None else [model_name]
        self.list_models = list_models
        self.strict_models = strict_models
        self.response_model = response_model
        self.system_fingerprint = system_fingerprint
        self.fault_every = fault_every  # the fault of every request that has no queued one
        self.model_requests = 0
        self.host = host
        self.port = port
        self.timeout_sleep_s = timeout_sleep_s
        self.retry_after_ms = retry_after_ms
        self.requests = 0
        # chat requests being answered now / at most at once, counting only those received since the
        # last reset (`epoch`): a request an earlier test gave up on may still be asleep in a handler
        self.in_flight = self.peak_in_flight = self.epoch = 0
        self.received: list[dict[str, Any]] = []
        self._faults: list[tuple[str, str | None]] = []
        self._lock = threading.Lock()
        self._generate_lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.batches = FakeBatches(self)  # the batch APIs' files and batches (tests.fake_batches)
        self.batch_polls_to_end = 1  # reads of a batch that still see it in progress
        self.batch_outcome = "completed"  # how a batch created from now on ends: completed | expired | failed
        self.batch_drop_polls = 0  # the next reads of a batch closed without an answer (unreachable)
        #: result lines made malformed, by a text of their last message (tests.fake_batches)
        self.batch_malformed: dict[str, str] = {}

    # --- control ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def root(self) -> str:
        """The server without ``/v1``: the Anthropic SDK's ``base_url``."""
        return f"http://{self.host}:{self.port}"

    def inject(self, faults: Iterable[str], match: str | None = None) -> None:
        """Fail the next requests (those whose last message contains `match`, if given), in order."""
        with self._lock:
            self._faults.extend((str(f), match) for f in faults)

    def pending_faults(self) -> int:
        with self._lock:
            return len(self._faults)

    def reset(self) -> None:
        with self._lock:
            self._faults.clear()
            self.received.clear()
            self.requests = 0
            self.model_requests = 0
            self.in_flight = self.peak_in_flight = 0
            self.epoch += 1
        self.batch_drop_polls = 0
        self.batch_malformed = {}
        self.batches = FakeBatches(self)

    def start(self) -> FakeOpenAIServer:
        if self.backend is None:
            self.backend = tiny_backend()
        self.stopped = False
        handler = type("Handler", (_Handler,), {"server_state": self})
        self._httpd = ThreadingHTTPServer((self.host, self.port), handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop as a killed process does: no new connection, and a connection kept alive from before
        gets no answer (closed), where a plain `shutdown` would still serve it."""
        self.stopped = True
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- request handling (called from the handler threads) -----------------------------------

    def _record(self, body: dict[str, Any], headers: Any) -> str | None:
        """Count the request and return the fault it must suffer, if any."""
        messages = body.get("messages") or []
        last = str(messages[-1].get("content", "")) if messages else ""
        with self._lock:
            self.requests += 1
            self.received.append({"body": body, "authorization": headers.get("Authorization")})
            if headers.get("X-Fault"):
                return headers["X-Fault"]
        return self._take_fault(last)

    def _take_fault(self, last: str) -> str | None:
        with self._lock:
            for i, (fault, match) in enumerate(self._faults):
                if match is None or match in last:
                    del self._faults[i]
                    return fault
        return self.fault_every

    def answer_line(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One batch line, answered as the chat endpoint would answer it (a queued fault included:
        an HTTP status fails the line; "timeout" and "drop" fail it with 500). Not counted in
        `requests`, which counts the single requests."""
        messages = body.get("messages") or []
        fault = self._take_fault(str(messages[-1].get("content", "")) if messages else "")
        if fault in ("timeout", "drop", "html"):
            return 500, _error(500, f"injected fault {fault}")
        if fault and fault not in ANSWER_FAULTS:
            return int(fault), _error(int(fault), f"injected fault {fault}")
        status, payload = self.complete(body)
        if fault and status == 200:
            ANSWER_FAULTS[fault](payload, self.api_key or "")  # echo_key: the key the batch was sent with
        return status, payload

    def complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Answer one chat completions request with the backend."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, _error(400, "'messages' must be a non-empty list")
        if self.strict_models and body.get("model") not in self.served_models:
            return 404, _error(404, f"The model `{body.get('model')}` does not exist.")
        profile = body.get("character_profile")
        if isinstance(profile, dict):
            rendered = "\n".join(f"{k}: {v}" for k, v in profile.items())
            messages = [{"role": "system", "content": rendered}, *messages]
        stop = body.get("stop") or ()
        settings = GenerationSettings(
            max_new_tokens=int(body.get("max_tokens") or body.get("max_completion_tokens") or 256),
            temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            seed=body.get("seed"),
            top_logprobs=int(body.get("top_logprobs") or 0) if body.get("logprobs") else 0,
        )
        assert self.backend is not None
        with self._generate_lock:
            reply = self.backend.generate([messages], settings)[0]
        if not reply.ok:
            return 500, _error(500, reply.error or "generation failed")
        prompt, completion = reply.prompt_tokens or 0, reply.completion_tokens or 0
        return 200, {
            "id": f"chatcmpl-fake-{self.requests}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.response_model or body.get("model", self.model_name),
            "system_fingerprint": self.system_fingerprint,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.text},
                    "finish_reason": reply.finish_reason,
                    "logprobs": _logprobs_payload(reply.logprobs),
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }


def _logprobs_payload(logprobs: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The chat completions `logprobs` object for a reply's per-token log-probabilities."""
    if not logprobs:
        return None
    content = []
    for item in logprobs:
        top = [{"token": t, "logprob": lp, "bytes": None} for t, lp in item["top"].items()]
        own = item["top"].get(item["token"], min(item["top"].values(), default=0.0))
        content.append({"token": item["token"], "logprob": own, "bytes": None, "top_logprobs": top})
    return {"content": content}


def _set_content(value: str | None) -> Any:
    def fault(payload: dict[str, Any], token: str) -> None:
        payload["choices"][0]["message"]["content"] = value

    return fault


def _no_choices(payload: dict[str, Any], token: str) -> None:
    payload["choices"] = []


def _echo_key(payload: dict[str, Any], token: str) -> None:
    message = payload["choices"][0]["message"]
    message["content"] = f"{message['content'] or 'I hear you.'} (my key is {token}, Bearer {token})"


#: faults that answer HTTP 200 with the reply changed: {fault: change(payload, bearer token)}
ANSWER_FAULTS = {
    "null_content": _set_content(None),
    "empty_content": _set_content(""),
    "no_choices": _no_choices,
    "echo_key": _echo_key,
}


def _error(status: int, message: str) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_state: FakeOpenAIServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(payload, ensure_ascii=False).encode("utf-8"), headers=headers)

    def _send_raw(
        self,
        status: int,
        data: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self._answered()
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (a "timeout" fault): nobody is listening any more
            self.close_connection = True

    def _authorized(self) -> bool:
        """False (after answering 401, echoing the token as a careless server might) for a wrong key."""
        expected = self.server_state.api_key
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        token = self.headers.get("x-api-key") or token  # Anthropic's header
        if expected is None or token == expected:
            return True
        self._send(401, _error(401, f"Incorrect API key provided: {token}"))
        return False

    def do_GET(self) -> None:
        state = self.server_state
        path = self.path.split("?")[0].rstrip("/")
        if path.startswith(("/v1/batches", "/v1/files/", "/v1/messages/batches")):
            if path.startswith(("/v1/batches/", "/v1/messages/batches/")) and not path.endswith("/results"):
                with state._lock:
                    drop, state.batch_drop_polls = (
                        state.batch_drop_polls > 0,
                        max(0, state.batch_drop_polls - 1),
                    )
                if drop:  # the server is unreachable for this read of a batch
                    self.close_connection = True
                    return
            if self._authorized():
                self._get_batch(state, path)
            return
        if state.list_models and path in ("/v1/models", "/models"):
            with state._lock:
                state.model_requests += 1
            if not self._authorized():
                return
            models = [  # the fields of both APIs' model lists (OpenAI's, Anthropic's)
                {
                    "id": m,
                    "object": "model",
                    "created": 0,
                    "owned_by": "fake",
                    "type": "model",
                    "display_name": m,
                    "created_at": "2026-01-01T00:00:00Z",
                }  # fmt: skip
                for m in state.served_models
            ]
            self._send(200, {"object": "list", "data": models})
        else:
            self._send(404, _error(404, f"no route {self.path}"))

    def do_POST(self) -> None:
        state = self.server_state
        if getattr(state, "stopped", False):  # killed: a kept-alive connection gets nothing
            self.close_connection = True
            return
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?")[0].rstrip("/")
        if path in ("/v1/files", "/v1/batches", "/v1/messages/batches", "/v1/messages"):
            if self._authorized():
                self._post_other(state, path, raw)
            return
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send(404, _error(404, f"no route {self.path}"))
            return
        body = self._json(raw)
        if body is None:
            return
        with state._lock:
            state.in_flight += 1
            state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
            self._epoch = state.epoch
        self._in_flight = True
        try:
            self._answer(state, body)
        finally:
            self._answered()

    def _json(self, raw: bytes) -> Any:
        """The request body as a JSON object; None, after answering 400, when it is not one."""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as err:
            self._send(400, _error(400, f"invalid JSON: {err}"))
            return None
        if not isinstance(body, dict):
            self._send(400, _error(400, "the body must be a JSON object"))
            return None
        return body

    def _get_batch(self, state: FakeOpenAIServer, path: str) -> None:
        batches = state.batches
        parts = path.split("/")  # ["", "v1", ...]
        if path == "/v1/batches":
            self._send(*batches.list_openai())
        elif path.startswith("/v1/batches/"):
            self._send(*batches.get_openai(parts[3]))
        elif path.startswith("/v1/files/") and path.endswith("/content"):
            data = batches.files.get(parts[3])
            if data is None:
                self._send(404, _error(404, f"no file {parts[3]}"))
            else:
                self._send_raw(200, data, "application/octet-stream")
        elif path.endswith("/results"):
            status, data = batches.anthropic_results(parts[4])
            self._send_raw(status, data, "application/binary" if status == 200 else "application/json")
        elif path.startswith("/v1/messages/batches/"):
            self._send(*batches.get_anthropic(parts[4]))
        else:
            self._send(404, _error(404, f"no route {self.path}"))

    def _post_other(self, state: FakeOpenAIServer, path: str, raw: bytes) -> None:
        """The batch APIs' POST routes and Anthropic's Messages endpoint."""
        if path == "/v1/files":
            self._send(*state.batches.upload(raw, self.headers.get("Content-Type") or ""))
            return
        body = self._json(raw)
        if body is None:
            return
        if path == "/v1/batches":
            self._send(*state.batches.create_openai(body))
        elif path == "/v1/messages/batches":
            self._send(*state.batches.create_anthropic(body))
        else:  # a single Messages API request, through the chat path (faults and counts included)
            chat = anthropic_to_chat(body)
            fault = state._record(chat, self.headers)
            if fault and fault not in ANSWER_FAULTS:
                status = 500 if fault in ("timeout", "drop", "html") else int(fault)
                headers = {"retry-after-ms": str(state.retry_after_ms)} if state.retry_after_ms else {}
                self._send(status, anthropic_error(status, f"injected fault {fault}"), headers)
                return
            status, payload = state.complete(chat)
            if status != 200:
                self._send(status, anthropic_error(status, payload["error"]["message"]))
                return
            if fault:
                ANSWER_FAULTS[fault](payload, "")
            self._send(200, chat_to_anthropic(payload))

    def _answered(self) -> None:
        """The request stops counting as in flight: before its answer is written (a client may send
        its next request as soon as it has read this one), or when it is dropped."""
        if getattr(self, "_in_flight", False):
            self._in_flight = False
            with self.server_state._lock:
                if self._epoch == self.server_state.epoch:
                    self.server_state.in_flight -= 1

    def _answer(self, state: FakeOpenAIServer, body: dict[str, Any]) -> None:
        fault = state._record(body, self.headers)
        if not self._authorized():
            return
        if fault == "drop":
            self.close_connection = True
            return
        if fault == "timeout":
            time.sleep(state.timeout_sleep_s)
        elif fault == "html":
            self._send_raw(200, b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html")
            return
        elif fault in ANSWER_FAULTS:
            status, payload = state.complete(body)
            if status == 200:
                token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                ANSWER_FAULTS[fault](payload, token)
            self._send(status, payload)
            return
        elif fault:
            status = int(fault)
            message = f"injected fault {status}"
            if status == 401:
                token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                message = f"Incorrect API key provided: {token}"
            headers = {"retry-after-ms": str(state.retry_after_ms)} if state.retry_after_ms else {}
            self._send(status, _error(status, message), headers)
            return
        try:
            status, payload = state.complete(body)
        except Exception as err:  # a bad request body: answer like an API would, keep serving
            status, payload = 400, _error(400, f"{type(err).__name__}: {err}")
        self._send(status, payload)


class ScoreBackend(ChatBackend):
    """A judge's stand-in: "Score: N", N from a hash of the last message (the same text, the same
    score), for a judge aimed at the server offline (`--scores`)."""

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        replies = []
        for messages in batch:
            h = int(hashlib.sha256(str(messages[-1]["content"]).encode()).hexdigest(), 16)
            replies.append(
                Reply(text=f"Score: {h % 5}", finish_reason="stop", prompt_tokens=50, completion_tokens=3)
            )
        return replies

    def identity(self) -> dict[str, Any]:
        return {"kind": "fake-scores"}


def tiny_backend(batch_size: int = 8) -> ChatBackend:
    """HFBackend on the embedded tiny model of conf/model/tiny.yaml."""
    from omegaconf import OmegaConf

    from esc.chat.backends.hf import HFBackend
    from esc.paths import REPO_ROOT

    return HFBackend.of(
        model=OmegaConf.load(REPO_ROOT / "conf" / "model" / "tiny.yaml"), batch_size=batch_size
    )


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m tests.fake_openai_server``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--scores", action="store_true", help='answer "Score: N" (a judge\'s stand-in)')
    return parser


def serve(argv: Sequence[str] | None = None) -> FakeOpenAIServer:
    """The server the command line `argv` asks for, started (``--port 0``: any free port)."""
    args = parser().parse_args(argv)
    backend = ScoreBackend() if args.scores else None
    return FakeOpenAIServer(backend, host=args.host, port=args.port).start()


def main(argv: Sequence[str] | None = None) -> None:
    server = serve(argv)
    what = "scores" if isinstance(server.backend, ScoreBackend) else "the tiny model"
    print(f"serving {what} at {server.url}, with the batch APIs (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
