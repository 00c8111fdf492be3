"""Any OpenAI-compatible chat completions endpoint: OpenAI itself, or a local vLLM / SGLang / TGI.

Requests go through the official ``openai`` SDK's ``AsyncOpenAI`` client, whose built-in retries
(exponential backoff with jitter, honouring ``Retry-After``) cover 408/409/429/5xx responses,
timeouts and connection errors. A call's conversations are sent concurrently, at most
``max_concurrency`` at a time, from a private event loop on a background thread, so `generate` is
a plain blocking call that works from sync code (and even from inside someone else's event loop).
A request that still fails after its retries becomes an error reply; the rest of the batch goes on.
An answer without text (null or empty content, no choices, an HTML page) is a failure too, retried the
same number of times, and its reason says what came back.

``base_url`` may name several servers (replicas of one model, e.g. vLLM on several nodes): requests
are spread over them in turn; a server that fails a request (connection error, timeout, 429, 5xx) is
set aside for ``set_aside_s`` seconds and the request goes to another, up to ``max_retries`` rounds of
the servers; every reply says which server answered (``Reply.server``, kept in the dialogue files'
turns, without credentials). With one server the SDK's own retries do the work, as before.

The API key is read from the environment variable named by ``api_key_env`` when the client is
made and handed to the SDK client; it appears in no repr, identity, log line or error message (it is
masked in error text, in case a server echoes it back).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai
from pydantic import Field

from esc.chat.backends._common import error_reply, one_line
from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, check_features, register_backend
from esc.chat.settings import BackendSettings, EnvName, Price, ServerUrl
from esc.errors import ConfigError, UserError
from esc.secrets.redaction import redact, scrub_text, secret_values, url_passwords
from esc.settings.types import NonEmpty

log = logging.getLogger(__name__)

DUMMY_KEY = "EMPTY"  # local servers (vLLM, SGLang, TGI) accept any key when started without one
PROBE_TIMEOUT_S = 10.0  # the readiness request's timeout (at most the backend's own)


FILTERED = "the server filtered the reply"
EMPTY_BACKOFF_S, EMPTY_BACKOFF_MAX_S = 0.5, 8.0  # retry waits for an answer without text


def empty_answer(response: Any) -> str | None:
    """What is wrong with a chat completions answer that has no reply text, in words a user can act
    on; None when it has text. The SDK hands back a plain string when the body is not JSON (an HTML
    error page from a proxy, say)."""
    if isinstance(response, str | bytes):
        text = response.decode("utf-8", "replace") if isinstance(response, bytes) else response
        start = " ".join(text.split())[:80]
        return f"the server's answer is not JSON (it starts: {start!r}): check base_url and the server"
    choices = getattr(response, "choices", None)
    if not choices:
        return "the server's answer has no choices (an empty `choices` list)"
    choice = choices[0]
    content = getattr(getattr(choice, "message", None), "content", None)
    if content is not None and content.strip():
        return None
    reason = getattr(choice, "finish_reason", None)
    if reason == "content_filter":
        return f"{FILTERED} (finish_reason content_filter) and sent no text"
    what = "null" if content is None else "empty"
    return f"the server's reply has no text (content {what}, finish_reason {reason})"


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
        base_url: the API root (``http://127.0.0.1:8000/v1`` for a local server); None: OpenAI; a
            list: several servers of the same model, requests spread over them (module docstring).
        api_key_env: the environment variable holding the key; None: send a dummy key (local servers).
        max_concurrency: requests in flight at once (64: sized for a server such as vLLM; an
            evaluation with every side behind such a backend plays that many dialogues at once).
        timeout_s: seconds per request attempt.
        max_retries: retries per request after the first attempt (the SDK's backoff).
        price: USD per 1,000 tokens, e.g. ``{"prompt": 0.03, "completion": 0.06}``.
        extra_body: extra JSON fields sent with every request (server-specific options).
        revision: a label for the cache key and manifest, e.g. a dated model snapshot.
        context_window: tokens the model attends to, when known (the API cannot tell).
        set_aside_s: with several servers, how long one that failed a request gets no requests.

    `check_ready` checks the key variable (no request when it is unset), then lists the server's
    models with one request (short timeout, no retries): an unreachable server, a rejected key or
    a model the server does not serve fails before any work. Replies keep the model name the
    server reports and its ``system_fingerprint``.

    Code version: bump `CODE_VERSION` whenever a change to this class can change the reply to the
    same request (the request body, how the reply text or finish reason is read); it is part of the
    request cache key (subclasses add their own, e.g. ``baichuan_npc``).
    """

    CODE_VERSION = 1
    kind = "openai"
    default_base_url = "https://api.openai.com/v1"
    #: a configured model missing from the server's model list is an error (else a warning)
    strict_model_list = True

    class Settings(BackendSettings):
        """An `openai` node (conf/target/chatgpt.yaml, conf/judge/gpt4.yaml, ...)."""

        model: str = Field(min_length=1, description="the model id the server serves")
        base_url: ServerUrl | NonEmpty[ServerUrl] | None = Field(
            None, description="null: api.openai.com; a list: replicas of one model"
        )
        api_key_env: EnvName | None = Field(
            "OPENAI_API_KEY", description="null: a local server without a key"
        )
        max_concurrency: int = Field(64, ge=1, description="requests in flight")
        timeout_s: float = Field(60.0, gt=0, description="seconds per request attempt")
        max_retries: int = Field(5, ge=0, description="retries after the first attempt")
        price: Price | None = None
        extra_body: dict[str, Any] | None = Field(None, description="extra JSON fields of each request")
        revision: str | None = Field(None, description="a label of this version of the model")
        context_window: int | None = Field(None, ge=1)
        set_aside_s: float = Field(30.0, ge=0, description="how long a failing server of several rests")

        def served_model(self) -> str | None:
            return self.model

    def __init__(self, settings: Settings, config_key: str = "backend") -> None:
        self.config_key = config_key
        base_url = settings.base_url
        urls = [base_url] if base_url is None or isinstance(base_url, str) else list(base_url)
        self.model = settings.model
        self.base_urls = [u.rstrip("/") for u in urls if u]  # [] : the default (OpenAI)
        self.base_url = self.base_urls[0] if self.base_urls else None
        self.set_aside_s = settings.set_aside_s
        self.api_key_env = settings.api_key_env
        self.max_concurrency = settings.max_concurrency
        self.timeout_s = settings.timeout_s
        self.max_retries = settings.max_retries
        self.price = settings.price
        self.extra_body = dict(settings.extra_body or {})
        self.revision = settings.revision
        self.context_window = settings.context_window
        self._client: Any = None
        self._clients: list[Any] = []  # one per server (several: `base_url` a list)
        self._aside: list[float] = [0.0] * max(1, len(self.base_urls))  # set aside until (monotonic)
        self._turn = itertools.count()  # round robin over the servers
        self._secrets: tuple[str, ...] = ()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._setup_lock = threading.Lock()

    def __repr__(self) -> str:
        shown = self.base_urls if len(self.base_urls) > 1 else self.base_url
        return f"{type(self).__name__}(model={self.model!r}, base_url={shown!r})"

    @property
    def several(self) -> bool:
        """Whether requests are spread over several servers."""
        return len(self.base_urls) > 1

    # --- readiness and identity ---------------------------------------------------------------

    def _read_key(self) -> str:
        if self.api_key_env is None:
            return DUMMY_KEY
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise ConfigError(
                f"{self.config_key}.api_key_env",
                f"environment variable {self.api_key_env} is not set: export it with your API key "
                f"(or set {self.config_key}.api_key_env=null for a local server that needs no key)",
            )
        return key

    def check_ready(self) -> None:
        """Fail now, with one line, when the key is missing, the server unreachable, the key rejected
        or the model not served. The key check comes first and sends nothing."""
        self._ensure_client()  # a missing key raises here, before any request
        problems = []
        for i, client in enumerate(self._clients):  # every server: a wrong address fails now, not mid-run
            problem = self._run(self._probe(client))
            if problem:
                problems.append((i, self._url(self.base_urls[i] if self.base_urls else None), problem))
        if not problems:
            return
        unreachable = all(problem.startswith("unreachable") for _, _, problem in problems)
        if not self.several or len(problems) == len(self._clients) or not unreachable:
            _, url, problem = next((p for p in problems if not p[2].startswith("unreachable")), problems[0])
            also = f" (and the other {len(problems) - 1} servers)" if len(problems) > 1 else ""
            raise UserError(f"{self.kind} backend (model {self.model!r}, base_url {url}): {problem}{also}")
        # several replicas, some of them unreachable: the run goes on with the others (a run folder's settings
        # name the servers, so a run whose server died resumes with that server still listed)
        for i, url, problem in problems:
            self._aside[i] = time.monotonic() + self.set_aside_s
            log.warning(
                "%s backend (model %r, base_url %s): %s; set aside for %g s, the requests go to the other "
                "%d of %d servers",
                self.kind, self.model, url, problem, self.set_aside_s, len(self._clients) - len(problems),
                len(self._clients),
            )  # fmt: skip

    def _url(self, url: str | None = None, query: bool = False) -> str:
        """A base URL (default: the first) without user info (it may hold credentials); without the
        query unless asked."""
        parts = urlsplit(url or self.base_url or self.default_base_url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host  # IPv6
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query if query else "", ""))

    def _why(self, err: BaseException) -> str:
        cause = err.__cause__ if isinstance(err, openai.APIConnectionError) and err.__cause__ else err
        return one_line(cause, self._secrets, limit=200)

    async def _probe(self, server: Any) -> str | None:
        """One cheap request to `server`'s client (list the models); what is wrong, or None. Falls
        back to a one-token chat request when the server has no model list."""
        timeout = min(self.timeout_s, PROBE_TIMEOUT_S)
        client = server.with_options(timeout=timeout, max_retries=0)
        try:
            page = await client.models.list()
            served = [str(m.id) for m in page.data]
        except openai.APITimeoutError:
            return f"unreachable (no answer within {timeout:g} s)"
        except openai.APIConnectionError as err:  # refused, DNS, TLS
            return f"unreachable ({self._why(err)})"
        except (openai.AuthenticationError, openai.PermissionDeniedError) as err:
            return self._rejected(err)
        except openai.APIStatusError as err:  # no model list here (404, 405...): try a chat request
            log.info(
                "%s: listing models gave HTTP %s; probing with a one-token request",
                self._url(),
                err.status_code,
            )
            return await self._probe_chat(client)
        if served and self.model not in served:
            shown = ", ".join(served[:10]) + (f" and {len(served) - 10} more" if len(served) > 10 else "")
            if self.strict_model_list:
                return f"model {self.model!r} is not served there (served: {shown})"
            log.warning("%s: model %r is not in the server's list (%s)", self._url(), self.model, shown)
        return None

    async def _probe_chat(self, client: Any) -> str | None:
        try:
            await client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": "Hi"}], max_tokens=1
            )
        except openai.APIConnectionError as err:
            return f"unreachable ({self._why(err)})"
        except (openai.AuthenticationError, openai.PermissionDeniedError) as err:
            return self._rejected(err)
        except openai.NotFoundError as err:
            return (
                f"HTTP 404 for both /models and /chat/completions: check base_url (it usually ends in "
                f"/v1) and that the server serves the model ({self._why(err)})"
            )
        except openai.BadRequestError as err:  # reachable and the key accepted; the probe's shape was not
            log.warning("%s: could not verify model %r (%s)", self._url(), self.model, self._why(err))
        except openai.APIStatusError as err:
            return f"the server answered HTTP {err.status_code} ({self._why(err)})"
        return None

    def _rejected(self, err: openai.APIStatusError) -> str:
        where = f"the key in {self.api_key_env}" if self.api_key_env else "no key (backend.api_key_env=null)"
        return f"HTTP {err.status_code}: the server rejected {where} ({self._why(err)})"

    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "code_version": self.code_version(),
            "model": self.model,
            "base_url": (
                [self._url(u, query=True) for u in self.base_urls] if self.several else self._url(query=True)
            ),
            "revision": self.revision,
            # credential-like entries (a header with a key, say) masked: identities reach files
            "extra_body": redact(self.extra_body) if self.extra_body else None,
        }

    # --- the client and its event loop --------------------------------------------------------

    def _ensure_client(self) -> None:
        with self._setup_lock:
            if self._client is not None:
                return
            key = self._read_key()  # raises before anything is started
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=f"{self.kind}-backend", daemon=True)
            thread.start()
            # several servers: no retries in the SDK, the next request goes to another server instead
            kwargs: dict[str, Any] = {
                "api_key": key,
                "timeout": self.timeout_s,
                "max_retries": 0 if self.several else self.max_retries,
            }
            # the key, and the credentials of a base_url with a password (sent as HTTP Basic auth)
            secrets = {key} - {DUMMY_KEY}
            for url in self.base_urls:
                secrets |= url_passwords(url)
            self._secrets = tuple(sorted(secrets, key=len, reverse=True))
            self._loop, self._thread = loop, thread
            self._clients = [
                self._run(
                    self._make_client(openai.AsyncOpenAI, {**kwargs, **({"base_url": url} if url else {})})
                )
                for url in (self.base_urls or [None])
            ]
            self._client = self._clients[0]

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
        """One conversation's reply. An answer without text (null or empty content, no choices, a body
        that is not JSON) is retried like an HTTP failure, `max_retries` times with backoff, and is then
        an error reply that says what came back: never a turn."""
        async with semaphore:
            t0 = time.perf_counter()
            for attempt in range(self.max_retries + 1):
                try:
                    request = self._request(messages, settings)
                    if self.several:
                        response, server = await self._spread(request)
                    else:
                        response, server = await self._client.chat.completions.create(**request), None
                except Exception as err:  # the SDK's retries are exhausted (or the request was never valid)
                    reply = error_reply(err, time.perf_counter() - t0, self._secrets)
                    log.warning("%s request failed: %s", self.kind, reply.error)
                    return reply
                problem = empty_answer(response)
                if problem is None:
                    return self._reply(
                        response, bool(settings.top_logprobs), time.perf_counter() - t0, server
                    )
                if attempt < self.max_retries and not problem.startswith(FILTERED):
                    log.info("%s: %s; retrying (%d of %d)", self.kind, problem, attempt + 1, self.max_retries)
                    await asyncio.sleep(min(EMPTY_BACKOFF_S * 2**attempt, EMPTY_BACKOFF_MAX_S))
            tries = f" ({self.max_retries + 1} tries)" if self.max_retries else ""
            error = scrub_text(f"{problem}{tries}", [*self._secrets, *secret_values()])
            log.warning("%s request failed: %s", self.kind, error)
            return Reply(text="", finish_reason="error", latency_s=time.perf_counter() - t0, error=error)

    async def _spread(self, request: dict[str, Any]) -> tuple[Any, str]:
        """One request sent to the next server in turn that is not set aside; a server that fails it
        (connection, timeout, 429, 5xx) is set aside for `set_aside_s` and the request goes to the
        next, for up to `max_retries` + 1 rounds of the servers. Returns the answer and the server
        that gave it (its URL without credentials); raises the last failure, or an error a server
        gives for the request itself (400, 401: another server would say the same)."""
        retryable = (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)
        last: Exception | None = None
        for _ in range((self.max_retries + 1) * len(self._clients)):
            i = await self._next_server()
            try:
                return await self._clients[i].chat.completions.create(**request), self._url(self.base_urls[i])
            except retryable as err:
                self._aside[i] = time.monotonic() + self.set_aside_s
                log.warning(
                    "%s: server %s failed (%s); set aside for %g s, the request goes to another",
                    self.kind, self._url(self.base_urls[i]), self._why(err), self.set_aside_s,
                )  # fmt: skip
                last = err
        assert last is not None
        raise last

    async def _next_server(self) -> int:
        """The next server in turn that is not set aside; when all are, wait for the first to return
        (at most `set_aside_s`)."""
        n = len(self._clients)
        start = next(self._turn)
        now = time.monotonic()
        for k in range(n):
            i = (start + k) % n
            if self._aside[i] <= now:
                return i
        i = min(range(n), key=lambda j: self._aside[j])
        await asyncio.sleep(max(0.0, min(self._aside[i] - now, self.set_aside_s)))
        return i

    def _reply(
        self, response: Any, want_logprobs: bool, latency_s: float, server: str | None = None
    ) -> Reply:
        """A chat completions answer with text (`empty_answer` is None) as a reply: also what a batch
        line's body is read into (`esc.chat.batch.openai_batches`)."""
        choice = response.choices[0]
        usage = response.usage
        return Reply(
            # the key this backend holds (or any known secret) masked, should the model echo it
            text=scrub_text(choice.message.content.strip(), [*self._secrets, *secret_values()]),
            finish_reason=choice.finish_reason or "stop",
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            latency_s=latency_s,
            logprobs=_logprobs(choice) if want_logprobs else None,
            model=getattr(response, "model", None) or None,
            system_fingerprint=getattr(response, "system_fingerprint", None) or None,
            server=server,
        )

    async def _gather(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        # one semaphore for all calls (created on, and used only from, the private loop): concurrent
        # `generate` calls, as the streaming engine makes, share the `max_concurrency` bound
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.max_concurrency)
        return list(await asyncio.gather(*(self._one(self._semaphore, m, settings) for m in batch)))

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        if not batch:
            return []
        check_features(self, settings)
        self._ensure_client()
        return self._run(self._gather(batch, settings))

    def close(self) -> None:
        with self._setup_lock:
            clients, loop, thread = self._clients, self._loop, self._thread
            self._client = self._loop = self._thread = self._semaphore = None
            self._clients = []
            self._secrets = ()
        if loop is None:
            return
        try:
            for client in clients:
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
