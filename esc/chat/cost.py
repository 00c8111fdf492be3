"""Cost before you spend it: the requests, tokens and dollars a run would send to priced models.

A job that talks to a backend with a `price` (USD per 1,000 tokens, ``{"prompt": .., "completion":
..}``, e.g. conf/target/gpt4.yaml) builds a `CostEstimate` before its first request, prints its
`summary()`, records it in the manifest (`cost_estimate`) and refuses to start when it is over the
config's `max_cost` (`check_budget`). What it counts:

- **requests**: one per request the run would send (`evaluate.py`: the pending dialogues' turns of
  each side, and the written emotion ratings; `rank.py`: the pending items of each judge). Requests
  that the request cache already holds are counted too: they would cost nothing.
- **prompt tokens**: each request's prompt, counted by the backend's own `count_tokens` where that
  needs no model loaded (`ChatBackend.counts_tokens_offline`), else by a rule, marked ``~`` in the
  printout: ASCII characters / 4 (English) plus one token per other character (Chinese), plus
  `MESSAGE_TOKENS` per message for the chat template.
- **completion tokens**: every reply at its request's `max_new_tokens`: an upper bound.

The actual cost of a run is in its manifest (`usage`, `esc.chat.usage`), from the tokens the API
reported.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from esc.chat.base import ChatBackend, Message
from esc.errors import ConfigError

log = logging.getLogger(__name__)

#: template tokens counted per message by the rule (ChatML spends 4 to 5 on a message's frame)
MESSAGE_TOKENS = 4


def approx_tokens(text: str) -> int:
    """Tokens of `text` by the rule: ASCII characters / 4 (rounded up), plus one per other character.
    English runs about 4 characters a token; a Chinese character is about one token."""
    ascii_chars = sum(ch < "\x80" for ch in text)
    return math.ceil(ascii_chars / 4) + (len(text) - ascii_chars)


def count_prompt(backend: ChatBackend, messages: Sequence[Message]) -> tuple[int, bool]:
    """(prompt tokens of `messages`, whether the backend counted them). The backend counts only
    when that loads no model (`counts_tokens_offline`); otherwise, or when it cannot tell, the rule
    of `approx_tokens` plus `MESSAGE_TOKENS` per message."""
    if backend.counts_tokens_offline:
        counted = backend.count_tokens(messages)
        if counted is not None:
            return int(counted), True
    return sum(approx_tokens(m["content"]) + MESSAGE_TOKENS for m in messages), False


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
    price: Mapping[str, float] | None
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0  # each reply at its max_new_tokens: an upper bound
    approximate: bool = False  # some prompt counted by the rule, not the model's tokenizer

    def add(
        self, prompt_tokens: int, completion_tokens: int, requests: int = 1, counted: bool = True
    ) -> None:
        """Add `requests` requests of these token counts (`counted`: by the backend, not the rule)."""
        self.requests += requests
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.approximate = self.approximate or not counted

    @property
    def usd(self) -> float | None:
        """USD at the configured price; None without one."""
        if not self.price:
            return None
        return round(
            self.prompt_tokens / 1000 * float(self.price.get("prompt", 0.0))
            + self.completion_tokens / 1000 * float(self.price.get("completion", 0.0)),
            6,
        )

    def line(self) -> str:
        """``target gpt4: 1,655 requests, ~2,104,330 prompt + <=52,960 completion tokens, $64.31``"""
        tilde = "~" if self.approximate else ""
        return (
            f"{self.label}: {n_requests(self.requests)}, {tilde}{self.prompt_tokens:,} prompt + "
            f"<={self.completion_tokens:,} completion tokens, {usd(self.usd)}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "approximate": self.approximate,
            "price": dict(self.price) if self.price else None,
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
    def approximate(self) -> bool:
        return any(p.approximate for p in self.parts)

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
        tilde = "~" if self.approximate else ""
        head = (
            f"Cost estimate{f' ({self.what})' if self.what else ''}: {n_requests(self.requests)}, "
            f"{tilde}{self.prompt_tokens:,} prompt + <={self.completion_tokens:,} completion tokens, "
            f"at most about {usd(self.usd)}"
        )
        notes = ["an upper bound: every reply at its max_new_tokens"]
        if self.bounds:
            notes.append(self.bounds)
        notes.append("requests the request cache holds are counted too")
        if self.approximate:
            notes.append(
                "~: prompt tokens by the rule ASCII characters / 4 + one per other character + "
                f"{MESSAGE_TOKENS} per message, not the model's tokenizer"
            )
        if any(p.usd is None for p in self.parts):
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
            "approximate": self.approximate,
            "usd": self.usd,
            "parts": [p.to_dict() for p in self.parts],
        }


def check_budget(estimate: CostEstimate | None, max_cost: float | None, key: str = "max_cost") -> None:
    """A ConfigError naming `key` when the estimate's dollars are over `max_cost` (None: no budget;
    an estimate without a price has nothing to compare)."""
    if max_cost is None or estimate is None or estimate.usd is None or estimate.usd <= float(max_cost):
        return
    raise ConfigError(
        key,
        f"this run would cost up to {usd(estimate.usd)} ({n_requests(estimate.requests)}, "
        f"{'~' if estimate.approximate else ''}{estimate.prompt_tokens:,} prompt + "
        f"<={estimate.completion_tokens:,} completion tokens), over the budget of {usd(float(max_cost))}: "
        f"raise {key}, or run less (fewer cards, dimensions or questions)",
    )


def before_spending(
    estimate: CostEstimate | None, max_cost: float | None, manifest: Any = None, key: str = "max_cost"
) -> None:
    """What a job does with its estimate before its first request: print the summary, record it in
    `manifest` (`manifest.update(cost_estimate=...)`, when given) and refuse a run over `max_cost`.
    Nothing for None (no model of the run has a price), but a warning when a budget was set: it
    cannot be checked without a price (`price:` of the API's backend node)."""
    if estimate is None:
        if max_cost is not None:
            log.warning(
                "%s=%s is not checked: no model of this run has a price (set the API backend's `price`)",
                key,
                max_cost,
            )
        return
    print(estimate.summary(), flush=True)
    if manifest is not None:
        manifest.update(cost_estimate=estimate.to_dict())
    check_budget(estimate, max_cost, key)
