"""Anthropic's Messages API (Claude), through the official ``anthropic`` SDK.

Requests go through the SDK's client, whose retries (backoff, ``retry-after``) cover 408/409/429/5xx
responses, timeouts and connection errors; a call's conversations are sent from a thread pool, at
most ``max_concurrency`` at a time. A request that still fails is an error reply; a reply without
text is one too (retried like a failure). The system turns of a conversation become the request's
``system``; the API returns no log-probabilities, so a judge reads the stated answer only.

Sampling: ``temperature`` and ``top_p`` are deprecated in the Messages API (models after Claude Opus
4.6 refuse them; the SDK 1.x dropped the arguments), so they are sent only with
``sampling_params: true`` (older models), in the request body. Without it the model samples as it
does by default: a judgment through Claude is not greedy decoding, and its identity says so.

The API key is read from the environment variable named by ``api_key_env`` and handed to the SDK
client; it appears in no repr, identity, log line or error message.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import anthropic
from pydantic import Field

from esc.chat.backends._common import error_reply, one_line
from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, check_features, register_backend
from esc.chat.settings import BackendSettings, EnvName, Price, ServerUrl
from esc.errors import ConfigError, UserError
from esc.secrets.redaction import scrub_text, secret_values

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 10.0
#: the API's stop reasons as `Reply.finish_reason`
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "refusal": "content_filter"}


def message_text(message: Any) -> str | None:
    """The text of a Messages API answer (its text blocks joined); None when it has none."""
    parts = [getattr(block, "text", "") for block in (getattr(message, "content", None) or [])]
    text = "".join(p for p in parts if isinstance(p, str))
    return text if text.strip() else None


@register_backend("anthropic")
class AnthropicBackend(ChatBackend):
    """A Claude model behind Anthropic's Messages API.

    Args:
        model: the model id, e.g. ``claude-sonnet-4-5-20250929``.
        base_url: the API root without ``/v1``; None: api.anthropic.com.
        api_key_env: the environment variable holding the key.
        max_concurrency: requests in flight at once.
        timeout_s: seconds per request attempt.
        max_retries: retries per request after the first attempt (the SDK's backoff).
        price: USD per 1,000 tokens (``{model, prompt, completion}``; ``batch_prompt``,
            ``batch_completion``: the Message Batches price).
        revision: a label for the cache key and manifest.
        context_window: tokens the model attends to, when known.
        sampling_params: send ``temperature`` and ``top_p`` (models that still take them).
    """

    CODE_VERSION = 1
    kind = "anthropic"
    default_base_url = "https://api.anthropic.com"

    class Settings(BackendSettings):
        """An `anthropic` node (conf/judge/claude.yaml)."""

        model: str = Field(min_length=1, description="the Claude model id")
        base_url: ServerUrl | None = Field(
            None, description="the API root without /v1; null: api.anthropic.com"
        )
        api_key_env: EnvName = Field("ANTHROPIC_API_KEY", description="the variable that holds the key")
        max_concurrency: int = Field(16, ge=1, description="requests in flight")
        timeout_s: float = Field(60.0, gt=0, description="seconds per request attempt")
        max_retries: int = Field(5, ge=0, description="retries after the first attempt")
        price: Price | None = None
        revision: str | None = Field(None, description="a label of this version of the model")
        context_window: int | None = Field(None, ge=1)
        sampling_params: bool = Field(False, description="send temperature and top_p: older models take them")

        def served_model(self) -> str | None:
            return self.model

    def __init__(self, settings: Settings, config_key: str = "backend") -> None:
        self.config_key = config_key
        self.model = settings.model
        self.base_url = settings.base_url.rstrip("/") if settings.base_url else None
        self.api_key_env = settings.api_key_env
        self.max_concurrency = settings.max_concurrency
        self.timeout_s = settings.timeout_s
        self.max_retries = settings.max_retries
        self.price = settings.price
        self.revision = settings.revision
        self.context_window = settings.context_window
        self.sampling_params = settings.sampling_params
        self.client: Any = None
        self._secrets: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"AnthropicBackend(model={self.model!r}, base_url={self.base_url!r})"

    def ensure_client(self) -> Any:
        """The SDK client, made on first use (a missing key is a ConfigError, before any request)."""
        with self._lock:
            if self.client is None:
                key = os.environ.get(self.api_key_env, "").strip()
                if not key:
                    raise ConfigError(
                        f"{self.config_key}.api_key_env",
                        f"environment variable {self.api_key_env} is not set: export it with your API key",
                    )
                self._secrets = (key,)
                self.client = anthropic.Anthropic(
                    api_key=key, base_url=self.base_url, timeout=self.timeout_s, max_retries=self.max_retries
                )
            return self.client

    def secrets(self) -> list[str]:
        return [*self._secrets, *secret_values()]

    def check_ready(self) -> None:
        """The key first (nothing sent without it), then one cheap request: list the models."""
        client = self.ensure_client().with_options(
            timeout=min(self.timeout_s, PROBE_TIMEOUT_S), max_retries=0
        )
        try:
            served = [str(m.id) for m in client.models.list(limit=1000).data]
        except anthropic.APIConnectionError as err:
            problem = f"unreachable ({one_line(err, self._secrets, 200)})"
        except (anthropic.AuthenticationError, anthropic.PermissionDeniedError) as err:
            problem = f"HTTP {err.status_code}: the server rejected the key in {self.api_key_env}"
        except anthropic.APIStatusError as err:
            problem = f"the server answered HTTP {err.status_code} ({one_line(err, self._secrets, 200)})"
        else:
            problem = None
            if served and self.model not in served:
                problem = f"model {self.model!r} is not served there (served: {', '.join(served[:10])})"
        if problem:
            where = self.base_url or self.default_base_url
            raise UserError(f"anthropic backend (model {self.model!r}, base_url {where}): {problem}")

    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "code_version": self.code_version(),
            "model": self.model,
            "base_url": self.base_url or self.default_base_url,
            "revision": self.revision,
            "sampling": "temperature and top_p sent" if self.sampling_params else "the model's default",
        }

    def request(self, messages: Sequence[Message], settings: GenerationSettings) -> dict[str, Any]:
        """The Messages API parameters of one conversation (also a batch line's ``params``)."""
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": int(settings.max_new_tokens),
            "messages": [
                {"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"
            ],
        }
        if system:
            params["system"] = system
        if self.sampling_params:
            params["temperature"] = float(settings.temperature)
            if settings.top_p != 1.0:
                params["top_p"] = float(settings.top_p)
        if settings.stop:
            params["stop_sequences"] = list(settings.stop)
        return params

    def reply(self, message: Any, latency_s: float = 0.0) -> Reply:
        """A Messages API answer as a reply; an error reply when it has no text."""
        text = message_text(message)
        reason = getattr(message, "stop_reason", None)
        if text is None:
            return Reply(
                text="",
                finish_reason="error",
                latency_s=latency_s,
                error=f"the server's reply has no text (stop_reason {reason})",
            )
        usage = getattr(message, "usage", None)
        return Reply(
            text=scrub_text(text.strip(), self.secrets()),
            finish_reason=FINISH.get(str(reason), "stop"),
            prompt_tokens=getattr(usage, "input_tokens", None),
            completion_tokens=getattr(usage, "output_tokens", None),
            latency_s=latency_s,
            model=getattr(message, "model", None) or None,
        )

    def _one(self, messages: Sequence[Message], settings: GenerationSettings) -> Reply:
        t0 = time.perf_counter()
        reply = None
        for _ in range(self.max_retries + 1):
            try:
                params = self.request(messages, settings)
                sampling = {k: params.pop(k) for k in ("temperature", "top_p") if k in params}
                message = self.client.messages.create(**params, extra_body=sampling or None)
            except Exception as err:  # the SDK's retries are exhausted, or the request is refused
                reply = error_reply(err, time.perf_counter() - t0, self._secrets)
                log.warning("anthropic request failed: %s", reply.error)
                return reply
            reply = self.reply(message, time.perf_counter() - t0)
            if reply.ok:
                return reply
        assert reply is not None
        return reply

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        if not batch:
            return []
        check_features(self, settings)
        self.ensure_client()
        workers = min(self.max_concurrency, len(batch))
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="anthropic") as pool:
            return list(pool.map(lambda m: self._one(m, settings), batch))

    def close(self) -> None:
        with self._lock:
            client, self.client = self.client, None
        if client is not None:
            client.close()
