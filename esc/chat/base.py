"""The one interface every chat model sits behind, and the registry that builds them from config.

A backend takes a *batch* of conversations (each a list of ``{"role", "content"}`` messages) and
returns one :class:`Reply` per conversation, in order. Batching is the point: the evaluation engine
sends every pending message of a dialogue turn at once, so GPU generation and API servers stay busy.
A backend never raises for one failed request: the reply carries ``finish_reason="error"`` and the
reason, and the engine records that dialogue as failed.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from pydantic import Field

from esc.config_rules import Section, Settings
from esc.errors import ConfigError
from esc.registry import Registry
from esc.settings.plugins import Registered, registers_settings

if TYPE_CHECKING:
    from esc.chat.settings import Price


class Message(TypedDict):
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclasses.dataclass(frozen=True)
class GenerationSettings:
    """Decoding settings. temperature 0 means greedy decoding (the paper's setting)."""

    max_new_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    top_logprobs: int = 0  # > 0: return the log-probabilities of the n likeliest tokens at each step
    # the reply must be one of these strings (constrained decoding, e.g. a judge's "0".."4"); () free
    choices: tuple[str, ...] = ()
    # a LoRA adapter directory applied to this request only (e.g. one ESC-RANK adapter per dimension
    # on one base model); None: the backend's own. Backends that cannot switch adapters refuse it.
    adapter: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["stop"] = list(self.stop)
        data["choices"] = list(self.choices)
        # absent unless asked for: older cache keys and records stay valid
        for key in ("top_logprobs", "choices", "adapter"):
            if not data[key]:
                del data[key]
        return data


@dataclasses.dataclass
class Reply:
    """One generated message with what it cost."""

    text: str
    finish_reason: str  # "stop" | "length" | "error" | "content_filter"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    cached: bool = False
    error: str | None = None
    # with GenerationSettings.top_logprobs: per generated token, {"token": text, "top": {text: logprob}}
    logprobs: list[dict[str, Any]] | None = None
    # what an API says served the request: the model name it reports (e.g. a dated snapshot of the
    # requested alias) and its `system_fingerprint` (backend configuration); None when not reported
    model: str | None = None
    system_fingerprint: str | None = None
    # which of several servers answered (a backend spread over several `base_url`s), without
    # credentials; None for a backend of one server
    server: str | None = None

    @property
    def ok(self) -> bool:
        return self.finish_reason != "error"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reply:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


class ChatBackend(Registered, abc.ABC):
    """A chat model. Subclasses implement `generate` and `identity`; `close` frees resources.

    Code version: every backend class sets its own `CODE_VERSION` (an int) and bumps it whenever a
    change to that class can change the reply to the same request (prompt rendering, request shape,
    decoding, post-processing of the text). `code_version` lists the versions of the class and its
    backend ancestors; it is part of the identity and so of the request cache key, so a fix makes
    old cached replies miss instead of being replayed.
    """

    CODE_VERSION: int = 1
    #: tokens the model can attend to (prompt + reply); None when unknown
    context_window: int | None = None
    #: USD per 1,000 tokens (`Price`: prompt 0.03, completion 0.06); None when not configured
    price: Price | None = None
    #: `count_tokens` loads no model and sends no request, so the cost estimate (`esc.chat.cost`)
    #: may call it before a run starts; otherwise the estimate counts prompts by a rule
    counts_tokens_offline: bool = False
    #: optional `GenerationSettings` features it honours ("choices", "adapter"); others are refused
    features: frozenset[str] = frozenset()
    #: the model runs in this process (hf, vllm, canned): nothing is billed per token, so a run's
    #: `max_cost` holds without a price; a backend that sends requests to a server is billed (the
    #: default, so that a new API backend is never taken for free: `esc.chat.cost.server`)
    runs_in_process: bool = False
    #: requests it serves well at once, one conversation each (an API or a server does its own
    #: batching); None: it gains from batches of conversations (a local model). The engine plays
    #: dialogues independently, each as soon as its reply arrives, when every side has one.
    max_concurrency: int | None = None

    config_node = "backend"  # `Registered`: a backend's `Settings` is an `esc.chat.settings.BackendSettings`

    @abc.abstractmethod
    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        """One reply per conversation in `batch`, in order. Never raises for a single failed request."""

    @abc.abstractmethod
    def identity(self) -> dict[str, Any]:
        """What determines the outputs: backend kind, model id, revision, adapter... (cache key, manifest)."""

    def code_version(self) -> dict[str, int]:
        """``{class name: CODE_VERSION}`` for this class and each backend class it inherits code from."""
        return {
            cls.__name__: int(cls.__dict__["CODE_VERSION"])
            for cls in reversed(type(self).__mro__)
            if "CODE_VERSION" in cls.__dict__ and cls is not ChatBackend
        } or {type(self).__name__: int(self.CODE_VERSION)}

    def cache_identity(self) -> dict[str, Any]:
        """The identity the request cache keys on: `identity` with the code version, and with
        whatever a backend only knows once loaded (an hf model's downloaded revision) resolved."""
        identity = self.identity()
        identity.setdefault("code_version", self.code_version())
        return identity

    def check_ready(self) -> None:
        """Fail fast, before any work, with a UserError naming what is wrong (an API key, an endpoint,
        a model). Cheap: loads no local model, so every side can be checked before any loads."""
        return None

    def load(self) -> None:
        """Load local weights now (after every side's `check_ready`); otherwise the first use loads."""
        return None

    def expect_adapters(self, paths: Sequence[str]) -> None:
        """The per-request adapters (`GenerationSettings.adapter`) this backend will be asked for,
        named before it loads: an engine that must start with LoRA on (vLLM) needs to know. Loads
        nothing; most backends need nothing."""
        return None

    def count_tokens(self, messages: Sequence[Message]) -> int | None:
        """Prompt tokens of `messages` as this model would see them; None when the backend cannot tell."""
        return None

    def submit(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> None:
        """Send these requests now without waiting for their replies, where the backend can (an API's
        batch endpoint, `esc.chat.batch`); a later `generate` of the same requests collects them. A
        caller submits everything it will ask before asking any of it, so that batches wait side by
        side, not one after another. Most backends do nothing here."""
        return None

    def kept_conversations(self, tokens: int) -> int | None:
        """How many conversations of `tokens` tokens this backend keeps between turns (a local
        model's kept keys and values), so that a wave of dialogues is no larger; None: no bound."""
        return None

    def close(self) -> None:
        """Release models, clients and threads."""
        return None


class WrappedBackend(ChatBackend):
    """A backend in front of another (`inner`): the request cache, a batch API. Everything passes
    to `inner` unless the wrapper says otherwise; `generate` and `submit` are what wrappers change."""

    def __init__(self, inner: ChatBackend) -> None:
        self.inner = inner

    @property
    def context_window(self) -> int | None:  # type: ignore[override]
        return self.inner.context_window

    @property
    def price(self) -> Price | None:  # type: ignore[override]
        return self.inner.price

    @property
    def counts_tokens_offline(self) -> bool:  # type: ignore[override]
        return self.inner.counts_tokens_offline

    @property
    def max_concurrency(self) -> int | None:  # type: ignore[override]
        return self.inner.max_concurrency

    @property
    def runs_in_process(self) -> bool:  # type: ignore[override]
        return self.inner.runs_in_process

    @property
    def features(self) -> frozenset[str]:  # type: ignore[override]
        return self.inner.features

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()

    def cache_identity(self) -> dict[str, Any]:
        return self.inner.cache_identity()

    def code_version(self) -> dict[str, int]:
        return self.inner.code_version()

    def check_ready(self) -> None:
        self.inner.check_ready()

    def load(self) -> None:
        self.inner.load()

    def expect_adapters(self, paths: Sequence[str]) -> None:
        self.inner.expect_adapters(paths)

    def count_tokens(self, messages: Sequence[Message]) -> int | None:
        return self.inner.count_tokens(messages)

    def kept_conversations(self, tokens: int) -> int | None:
        return self.inner.kept_conversations(tokens)

    def submit(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> None:
        self.inner.submit(batch, settings)

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        return self.inner.generate(batch, settings)

    def close(self) -> None:
        self.inner.close()


def check_features(backend: ChatBackend, settings: GenerationSettings) -> None:
    """ConfigError when `settings` ask for a feature the backend does not have (constrained choices,
    a per-request adapter): a silently unconstrained answer would be read as a constrained one."""
    asked = {name for name in ("choices", "adapter") if getattr(settings, name)}
    missing = sorted(asked - backend.features)
    if missing:
        raise ConfigError(
            "backend.kind",
            f"{type(backend).__name__} cannot honour {', '.join(missing)} (constrained answers or "
            "per-request adapters): use backend.kind=vllm",
        )


BackendFactory = Callable[..., ChatBackend]
REGISTRY: Registry[BackendFactory] = Registry("chat backend", "esc.chat.backends")


def register_backend(kind: str) -> Callable[[BackendFactory], BackendFactory]:
    """Class decorator: make a backend buildable from config as ``backend.kind: <kind>`` (a module
    of `esc.chat.backends` is found without an import line; a taken kind is refused). The class
    declares its settings model, `Settings` (an `esc.chat.settings.BackendSettings`: every key it
    reads, typed), and is built as ``cls(settings, config_key=...)``."""
    return registers_settings(REGISTRY, kind)


class Generation(Settings):
    """A `generation:` node (conf/generation/greedy.yaml, which each role-player and target takes):
    the generation settings of every request a side sends (`settings`)."""

    max_new_tokens: int = Field(ge=1)
    temperature: float = Field(ge=0, description="0: greedy")
    top_p: float = Field(gt=0, le=1)
    stop: list[str]
    seed: int | None

    def settings(self) -> GenerationSettings:
        return GenerationSettings(**{**self.model_dump(), "stop": tuple(self.stop)})


def generation_config(node: str) -> Section:
    """The section of a `generation:` node at `node`."""
    return Section(node, Generation)
