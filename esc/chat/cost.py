"""Cost before you spend it: the requests, tokens and dollars a run would send to priced models.

A job that talks to a backend with a `price` (USD per 1,000 tokens, ``{"prompt": .., "completion":
..}``, e.g. conf/target/gpt4.yaml) builds a `CostEstimate` before its first request, prints its
`summary()`, records it in the manifest (`cost_estimate`) and refuses to start when it is over the
config's `max_cost` (`check_budget`). What it counts:

- **requests**: one per request the run would send (`evaluate.py`: the pending dialogues' turns of
  each side, and the written emotion ratings; `rank.py`: the pending items of each judge). Requests
  that the request cache already holds are counted too: they would cost nothing.
- **prompt tokens**: each request's prompt, counted by the backend's own `count_tokens` where that
  needs no model loaded (`ChatBackend.counts_tokens_offline`), else bounded, marked ``<=`` in the
  printout: one token per UTF-8 byte of each message's text (a byte-level BPE token, as every
  OpenAI-style model has, holds at least one byte; a character-based one with byte fallback at
  least one character), plus `MESSAGE_TOKENS` per message and `REQUEST_TOKENS` per request for
  the chat template (its frame, the reply's opening, a default system turn a template may add).
  English prose costs about a quarter of that bound, Chinese about half: the bound, not a guess,
  because a budget (`max_cost`) must hold. (The rule it replaces, ASCII characters / 4 + one per
  other character, was exceeded by 10% on a real GPT-4 run.)
- **completion tokens**: every reply at its request's `max_new_tokens`: an upper bound.
- **the price**: the backend's `price` (through a batch API, `esc.chat.batch`: its
  ``batch_prompt`` and ``batch_completion``, and the line says "batch price"), which names the
  model it is for (``{model: gpt-4-0613, prompt: 0.03, completion: 0.06}``): each part's line
  says whose price it used, and a price of another model than the backend asks for (a config
  copied from gpt4.yaml with another `model`) is refused by the backend's settings
  (`esc.chat.settings.BackendSettings`) before any work: an estimate, and `max_cost`, at the wrong
  prices would bound nothing. A price that names no model
  is used as given, and its line says so. A price is never negative (its settings, `Price`,
  refuse one before any work): an estimate below zero would pass any `max_cost`.
- **what needs a price**: a backend that sends its requests to a server (`server`: its identity
  names a ``base_url``: openai, anthropic, baichuan_npc) is billed per token; a model in this
  process (hf, vllm, canned) costs nothing. A `max_cost` is checked only when every billed part has
  a price: one without is refused before any request (`check_budget`), naming the price to set
  (``{model: M, prompt: 0, completion: 0}`` for a free local server), or max_cost=null.

The actual cost of a run is in its manifest (`usage`, `esc.chat.usage`), from the tokens the API
reported.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Sequence
from typing import Any

from esc.chat.base import ChatBackend, Message
from esc.chat.settings import BatchPrice, Price
from esc.errors import ConfigError

log = logging.getLogger(__name__)

#: template tokens bounded per message (OpenAI's frame is 3; ChatML's 5 to 7, its role split in pieces
#: by a small vocabulary; Llama 3's 5)
MESSAGE_TOKENS = 8
#: template tokens bounded per request: the reply's opening (3 to 5), a BOS, and a default system turn
#: that a template adds when a prompt has none (Qwen's "You are a helpful assistant.": 11 to 18)
REQUEST_TOKENS = 32


def bound_tokens(text: str) -> int:
    """At most how many tokens `text` is, whatever the tokenizer: its UTF-8 bytes (a byte-level
    BPE token holds at least one byte)."""
    return len(text.encode("utf-8", errors="surrogatepass"))


def count_prompt(backend: ChatBackend, messages: Sequence[Message]) -> tuple[int, bool]:
    """(prompt tokens of `messages`, whether the backend counted them). The backend counts only
    when that loads no model (`counts_tokens_offline`); otherwise, or when it cannot tell, an upper
    bound: `bound_tokens` of each message plus `MESSAGE_TOKENS` per message, `REQUEST_TOKENS` once."""
    if backend.counts_tokens_offline:
        counted = backend.count_tokens(messages)
        if counted is not None:
            return int(counted), True
    return REQUEST_TOKENS + sum(bound_tokens(m["content"]) + MESSAGE_TOKENS for m in messages), False


def served_model(backend: ChatBackend) -> str | None:
    """The model a backend asks for (an API's `model`; a local model's name or path), from its
    identity; None when it names none."""
    identity = backend.identity()
    model = identity.get("model") or identity.get("name_or_path")
    return model if isinstance(model, str) else None


def server(backend: ChatBackend) -> str | None:
    """Where `backend` sends its requests, to be billed per token: the server its identity names
    (``base_url``: openai, anthropic, baichuan_npc, each its default API's address when none is
    configured); None for a model in this process (`runs_in_process`: hf, vllm, canned), which
    costs nothing."""
    if backend.runs_in_process:
        return None
    url = backend.identity().get("base_url")
    urls = url if isinstance(url, list | tuple) else [url]
    return ", ".join(str(u) for u in urls if u) or "its default server"


def priced_part(label: str, backend: ChatBackend, key: str) -> CostPart:
    """An empty `CostPart` for what `backend` would be sent, at its price (`key`: the price's config
    key; the backend's settings refused a price of another model); without a price, where its
    requests go (`server`)."""
    price = backend.price
    where = server(backend) if price is None else None
    model = served_model(backend) if where is not None else None  # for the price an error suggests
    return CostPart(label, price, key=key, server=where, model=model)


def in_estimate(backend: ChatBackend) -> bool:
    """Whether what `backend` is sent belongs in an estimate: it has a price, or sends its requests
    to a server (`server`), billed whether priced or not. A model in this process without a price
    costs nothing: a run of those only needs no estimate."""
    return bool(backend.price) or server(backend) is not None


def usd(amount: float | None) -> str:
    """Dollars as the printout shows them: cents, four decimals under a dollar, and two significant
    digits under a hundredth of a cent (a budget of $0.00001 is not "$0.0000")."""
    if amount is None:
        return "no price"
    if amount >= 1:
        return f"${amount:,.2f}"
    if amount == 0 or amount >= 0.0001:
        return f"${amount:.4f}"
    digits = 1 - math.floor(math.log10(abs(amount)))
    return f"${amount:.{digits}f}"


def n_requests(n: int) -> str:
    """The count with its noun: 1 request, 1,655 requests."""
    return f"{n:,} request{'' if n == 1 else 's'}"


@dataclasses.dataclass
class CostPart:
    """What one model would be sent for one role in a run: `label` says which ("target gpt4")."""

    label: str
    price: Price | None
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0  # each reply at its max_new_tokens: an upper bound
    bounded: bool = False  # some prompt bounded by its bytes, not counted by the model's tokenizer
    key: str = "price"  # the price's config key (`target.backend.price`), named in errors
    server: str | None = None  # unpriced: where its requests go, billed (None: in this process, free)
    model: str | None = None  # the model its backend asks for, named in the price an error suggests

    def add(
        self, prompt_tokens: int, completion_tokens: int, requests: int = 1, counted: bool = True
    ) -> None:
        """Add `requests` requests of these token counts (`counted`: by the backend, not bounded)."""
        self.requests += requests
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.bounded = self.bounded or not counted

    @property
    def usd(self) -> float | None:
        """USD at the configured price; None without one."""
        if self.price is None:
            return None
        return round(
            self.prompt_tokens / 1000 * self.price.prompt
            + self.completion_tokens / 1000 * self.price.completion,
            6,
        )

    @property
    def price_source(self) -> str:
        """Whose price the dollars are at: ``gpt-4-0613's price``."""
        if self.price is None:
            return "no price"
        model = self.price.model
        which = (
            "batch price" if isinstance(self.price, BatchPrice) else "price"
        )  # a batch API's (esc.chat.batch)
        return f"{model}'s {which}" if model else f"a {which} that names no model"

    def line(self) -> str:
        """``target gpt4: 1,655 requests, <=2,104,330 prompt + <=52,960 completion tokens, $64.31
        at gpt-4-0613's price``"""
        bound = "<=" if self.bounded else ""
        dollars = f"{usd(self.usd)} at {self.price_source}" if self.price else usd(None)
        return (
            f"{self.label}: {n_requests(self.requests)}, {bound}{self.prompt_tokens:,} prompt + "
            f"<={self.completion_tokens:,} completion tokens, {dollars}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "prompt_tokens_bounded": self.bounded,
            "price": self.price.shown() if self.price else None,
            "price_source": self.price_source,
            "usd": self.usd,
        }


@dataclasses.dataclass
class CostEstimate:
    """The requests, tokens and dollars of a run before it starts, part by part (see the module
    docstring). `what` says what was counted ("331 pending dialogues x 5 turns"); `bounds` what
    makes it an upper bound beyond the completions at max_new_tokens."""

    parts: list[CostPart]
    what: str = ""
    bounds: str = ""

    @property
    def requests(self) -> int:
        return sum(p.requests for p in self.parts)

    @property
    def prompt_tokens(self) -> int:
        return sum(p.prompt_tokens for p in self.parts)

    @property
    def completion_tokens(self) -> int:
        return sum(p.completion_tokens for p in self.parts)

    @property
    def bounded(self) -> bool:
        return any(p.bounded for p in self.parts)

    @property
    def unchecked(self) -> list[CostPart]:
        """The parts that send requests to a server (billed) without a price: no budget can be
        checked with them."""
        return [p for p in self.parts if not p.price and p.server is not None and p.requests]

    @property
    def usd(self) -> float | None:
        """USD of the priced parts; None when no part has a price."""
        priced = [p.usd for p in self.parts if p.usd is not None]
        return round(sum(priced), 6) if priced else None

    @classmethod
    def total(cls, estimates: Iterable[CostEstimate | None], what: str = "") -> CostEstimate | None:
        """Several estimates as one (the judges of a jury; both orders of pairwise items): their
        parts side by side; None when every one is None (nothing priced)."""
        found = [e for e in estimates if e is not None]
        if not found:
            return None
        return cls(
            [p for e in found for p in e.parts],
            what or "; ".join(e.what for e in found if e.what),
            "; ".join(dict.fromkeys(e.bounds for e in found if e.bounds)),
        )

    def summary(self) -> str:
        """What a job prints before it starts: the total, one line per part, what is an upper bound."""
        bound = "<=" if self.bounded else ""
        dollars = f"at most {usd(self.usd)}" if self.usd is not None else "no price"
        head = (
            f"Cost estimate{f' ({self.what})' if self.what else ''}: {n_requests(self.requests)}, "
            f"{bound}{self.prompt_tokens:,} prompt + <={self.completion_tokens:,} completion tokens, "
            f"{dollars}"
        )
        notes = ["an upper bound: every reply at its max_new_tokens"]
        if self.bounds:
            notes.append(self.bounds)
        notes.append("requests the request cache holds are counted too")
        if self.bounded:
            notes.append(
                "<= prompt: one token per UTF-8 byte (English costs about a quarter of that, Chinese "
                f"about half) + {MESSAGE_TOKENS} per message + {REQUEST_TOKENS} per request, not the "
                "model's tokenizer"
            )
        if self.unchecked:
            keys = ", ".join(dict.fromkeys(p.key for p in self.unchecked))
            notes.append(f"sent to a server without a price: set {keys} to see its dollars")
        if any(p.usd is None for p in self.parts) and self.usd is not None:
            notes.append("parts without a price are not in the dollars")
        notes.append("set max_cost=USD to refuse a run over budget")
        lines = [head, *(f"  {p.line()}" for p in self.parts), f"  ({'; '.join(notes)})"]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The manifest's `cost_estimate`."""
        return {
            "what": self.what,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "completion_tokens_are": "an upper bound (every reply at max_new_tokens)",
            "prompt_tokens_bounded": self.bounded,
            "usd": self.usd,
            "parts": [p.to_dict() for p in self.parts],
        }


def check_budget(estimate: CostEstimate | None, max_cost: float | None, key: str = "max_cost") -> None:
    """A ConfigError naming `key` when the estimate's dollars are over `max_cost`, or cannot be
    checked against it: a part sent to a server has no price (`CostEstimate.unchecked`). None for
    either: no budget, or nothing billed (every model in this process, none priced)."""
    if max_cost is None or estimate is None:
        return
    if estimate.unchecked:
        part = estimate.unchecked[0]
        model = part.model or "MODEL"
        raise ConfigError(
            key,
            f"cannot be checked: {part.label} is sent {n_requests(part.requests)} at {part.server} and "
            f"{part.key} is not set; set it to the model's price ({part.key}={{model: {model}, prompt: "
            f"USD_PER_1K, completion: USD_PER_1K}}; a free local server: {{model: {model}, prompt: 0, "
            f"completion: 0}}), or {key}=null to run without a budget",
        )
    if estimate.usd is None or estimate.usd <= float(max_cost):
        return
    raise ConfigError(
        key,
        f"this run would cost up to {usd(estimate.usd)} ({n_requests(estimate.requests)}, "
        f"{'<=' if estimate.bounded else ''}{estimate.prompt_tokens:,} prompt + "
        f"<={estimate.completion_tokens:,} completion tokens), over the budget of {usd(float(max_cost))}: "
        f"raise {key}, or run less (fewer cards, dimensions or questions)",
    )


def before_spending(
    estimate: CostEstimate | None, max_cost: float | None, manifest: Any = None, key: str = "max_cost"
) -> None:
    """What a job does with its estimate before its first request: print the summary, record it in
    `manifest` (`manifest.update(cost_estimate=...)`, when given) and refuse a run over `max_cost`,
    or one whose `max_cost` cannot be checked (`check_budget`). Nothing for None: every model of
    the run is in this process without a price, so it costs nothing and any budget holds."""
    if estimate is None:
        if max_cost is not None:
            log.info("%s=%s holds: every model of this run runs in this process", key, max_cost)
        return
    print(estimate.summary(), flush=True)
    if manifest is not None:
        manifest.update(cost_estimate=estimate.to_dict())
    check_budget(estimate, max_cost, key)
