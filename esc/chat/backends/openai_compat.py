"""Any OpenAI-compatible chat completions endpoint: OpenAI itself, or a local vLLM / SGLang / TGI.

Requests go through the official ``openai`` SDK's ``AsyncOpenAI`` client, whose built-in retries
(exponential backoff with jitter, honouring ``Retry-After``) cover 408/409/429/5xx responses,
timeouts and connection errors. A call's conversations are sent concurrently, at most
``max_concurrency`` at a time, from a private event loop on a background thread, so `generate` is
a plain blocking call that works from sync code (and even from inside someone else's event loop).
A request that still fails after its retries becomes an error reply; the rest of the batch goes on.

The API key is read from the environment variable named by ``api_key_env`` when the client is
made and handed to the SDK client; it appears in no repr, identity, log line or error message (it is
masked in error text, in case a server echoes it back).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from esc.chat.backends._common import error_reply, plain
from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, register_backend
from esc.errors import ConfigError

log = logging.getLogger(__name__)

DUMMY_KEY = "EMPTY"  # local servers (vLLM, SGLang, TGI) accept any key when started without one


def _logprobs(choice: Any) -> list[dict[str, Any]] | None:
    """The chat completions `logprobs.content` list as {"token", "top": {token: logprob}} per token."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:
        return None  # the endpoint does not return log-probabilities
    return [
        {"token": item.token, "top": {t.token: float(t.logprob) for t in (item.top_logprobs or [])}}
        for item in content
    ]


@register_backend("openai")
class OpenAIBackend(ChatBackend):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        model: the model id the server knows, e.g. ``gpt-4-0613`` or a vLLM ``--served-model-name``.
        base_url: the API root (``http://127.0.0.1:8000/v1`` for a local server); None: OpenAI.
        api_key_env: the environment variable holding the key; None: send a dummy key (local servers).
        max_concurrency: requests in flight at once.
        timeout_s: seconds per request attempt.
        max_retries: retries per request after the first attempt (the SDK's backoff).
        price: USD per 1,000 tokens, e.g. ``{"prompt": 0.03, "completion": 0.06}``.
        extra_body: extra JSON fields sent with every request (server-specific options).
        revision: a label for the cache key and manifest, e.g. a dated model snapshot.
        context_window: tokens the model attends to, when known (the API cannot tell).
    """

    kind = "openai"
    default_base_url = "https://api.openai.com/v1"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        max_concurrency: int = 8,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        price: dict[str, float] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        revision: str | None = None,
        context_window: int | None = None,
    ) -> None:
        if not model:
            raise ConfigError("backend.model", "is empty: name the model the server serves")
        if int(max_concurrency) < 1:
            raise ConfigError("backend.max_concurrency", f"must be at least 1, got {max_concurrency}")
        if int(max_retries) < 0:
            raise ConfigError("backend.max_retries", f"must be 0 or more, got {max_retries}")
        if float(timeout_s) <= 0:
            raise ConfigError("backend.timeout_s", f"must be positive, got {timeout_s}")
        self.model = str(model)
        self.base_url = str(base_url).rstrip("/") if base_url else None
        self.api_key_env = api_key_env or None
        self.max_concurrency = int(max_concurrency)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.price = dict(price) if price else None
        self.extra_body = plain(extra_body)
        self.revision = revision
        self.context_window = int(context_window) if context_window else None
        self._client: Any = None
        self._secrets: tuple[str, ...] = ()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._setup_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    # --- readiness and identity ---------------------------------------------------------------

    def _read_key(self) -> str:
        if self.api_key_env is None:
            return DUMMY_KEY
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise ConfigError(
                "backend.api_key_env",
                f"environment variable {self.api_key_env} is not set: export it with your API key "
                "(or set backend.api_key_env=null for a local server that needs no key)",
            )
        return key

    def check_ready(self) -> None:
        """Fail now, naming the environment variable, when the API key is missing."""
        self._ensure_client()

    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "model": self.model,
            "base_url": self.base_url or self.default_base_url,
            "revision": self.revision,
            "extra_body": self.extra_body or None,
        }

    # --- the client and its event loop --------------------------------------------------------

    def _ensure_client(self) -> None:
        with self._setup_lock:
            if self._client is not None:
                return
            key = self._read_key()  # raises before anything is started
            from openai import AsyncOpenAI

            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=f"{self.kind}-backend", daemon=True)
            thread.start()
            kwargs: dict[str, Any] = {
                "api_key": key,
                "timeout": self.timeout_s,
                "max_retries": self.max_retries,
            }
            if self.base_url:
                kwargs["base_url"] = self.base_url
            self._secrets = (key,) if key != DUMMY_KEY else ()
            self._loop, self._thread = loop, thread
            self._client = self._run(self._make_client(AsyncOpenAI, kwargs))

    @staticmethod
    async def _make_client(factory: Any, kwargs: dict[str, Any]) -> Any:
        return factory(**kwargs)  # made on the backend's loop, which is the only one that uses it

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # --- requests -----------------------------------------------------------------------------

    def _request(self, messages: Sequence[Message], settings: GenerationSettings) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for one conversation."""
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "max_tokens": int(settings.max_new_tokens),
            "temperature": float(settings.temperature),
        }
        if settings.top_p != 1.0:
            request["top_p"] = float(settings.top_p)
        if settings.stop:
            request["stop"] = list(settings.stop)
        if settings.seed is not None:
            request["seed"] = int(settings.seed)
        if settings.top_logprobs:
            request["logprobs"] = True
            request["top_logprobs"] = int(settings.top_logprobs)
        if self.extra_body:
            request["extra_body"] = dict(self.extra_body)
        return request

    async def _one(
        self, semaphore: asyncio.Semaphore, messages: Sequence[Message], settings: GenerationSettings
    ) -> Reply:
        async with semaphore:
            t0 = time.perf_counter()
            try:
                request = self._request(messages, settings)
                response = await self._client.chat.completions.create(**request)
                choice = response.choices[0]
                usage = response.usage
                return Reply(
                    text=(choice.message.content or "").strip(),
                    finish_reason=choice.finish_reason or "stop",
                    prompt_tokens=getattr(usage, "prompt_tokens", None),
                    completion_tokens=getattr(usage, "completion_tokens", None),
                    latency_s=time.perf_counter() - t0,
                    logprobs=_logprobs(choice) if settings.top_logprobs else None,
                )
            except Exception as err:  # retries are exhausted (or the request was never valid)
                reply = error_reply(err, time.perf_counter() - t0, self._secrets)
                log.warning("%s request failed: %s", self.kind, reply.error)
                return reply

    async def _gather(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        semaphore = asyncio.Semaphore(self.max_concurrency)
        return list(await asyncio.gather(*(self._one(semaphore, m, settings) for m in batch)))

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        if not batch:
            return []
        self._ensure_client()
        return self._run(self._gather(batch, settings))

    def close(self) -> None:
        with self._setup_lock:
            client, loop, thread = self._client, self._loop, self._thread
            self._client = self._loop = self._thread = None
            self._secrets = ()
        if loop is None:
            return
        try:
            if client is not None:
                asyncio.run_coroutine_threadsafe(client.close(), loop).result(timeout=10)
        except Exception as err:  # pragma: no cover - best effort
            log.debug("closing the %s client: %s", self.kind, err)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)
        loop.close()

    def __del__(self) -> None:  # a forgotten close(): at least stop the loop thread, without waiting
        loop = getattr(self, "_loop", None)
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(loop.stop)
            except Exception:
                pass
