"""A scripted chat backend for offline tests of the engine: deterministic replies, planned failures."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, register_backend
from esc.chat.settings import BackendSettings, Price


@register_backend("scripted")
class ScriptedBackend(ChatBackend):
    """Replies `<label> #<n>: <digest of the conversation>`; fails when the conversation mentions `fail_on`,
    answers without text (a blank reply that succeeded) when it mentions `empty_on`.

    Every batch it receives is recorded in `calls` (sizes and messages), so tests can check batching
    and what each side saw.
    """

    runs_in_process = True  # a fake model: nothing is billed

    instances: list[ScriptedBackend] = []
    counts_tokens_offline = True  # words: the cost estimate may count with it

    class Settings(BackendSettings):
        label: str = "bot"
        fail_on: str | None = None
        context_window: int | None = None
        price: Price | None = None
        max_concurrency: int | None = None
        slow_on: str | None = None
        slow_s: float = 0.0
        empty_on: str | None = None

    def __init__(self, settings: Settings, config_key: str = "backend") -> None:
        self.label, self.fail_on = settings.label, settings.fail_on
        self.context_window, self.price = settings.context_window, settings.price
        self.max_concurrency = settings.max_concurrency  # set: it acts as an API (the engine streams)
        self.slow_on, self.slow_s = (
            settings.slow_on,
            settings.slow_s,
        )  # a conversation mentioning slow_on waits
        self.empty_on = settings.empty_on  # a conversation mentioning it gets a reply without text
        self.calls: list[list[list[Message]]] = []
        ScriptedBackend.instances.append(self)

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        self.calls.append([list(m) for m in batch])
        replies = []
        for messages in batch:
            text = "\n".join(m["content"] for m in messages)
            if self.slow_on and self.slow_on in text:
                time.sleep(self.slow_s)
            if self.fail_on and self.fail_on in text:
                replies.append(
                    Reply("", "error", error=f"ScriptedError: planned failure on {self.fail_on!r}")
                )
                continue
            if self.empty_on and self.empty_on in text:
                replies.append(Reply("  ", "stop", prompt_tokens=len(text.split()), completion_tokens=1))
                continue
            digest = hashlib.sha256(text.encode()).hexdigest()[:8]
            replies.append(
                Reply(
                    f"{self.label} #{len(messages)}: {digest}",
                    "stop",
                    prompt_tokens=len(text.split()),
                    completion_tokens=3,
                )
            )
        return replies

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return sum(len(m["content"].split()) for m in messages)

    def identity(self) -> dict[str, Any]:
        return {"kind": "scripted", "label": self.label}


@register_backend("planned")
class PlannedBackend(ChatBackend):
    """A role-player (or observer) whose emotion ratings are planned per card.

    A conversation names its card by a word of its first message (`plans` keys); the n-th emotion
    question of that conversation (the aside or the observer's prompt, recognised by `marker`) is
    answered with `plans[word][n]` (the last one repeated). Any other request gets `seeker #<n>`.
    """

    runs_in_process = True  # a fake model: nothing is billed

    class Settings(BackendSettings):
        plans: dict[str, list[str]]
        marker: str = "0 to 9"

    def __init__(self, settings: Settings, config_key: str = "backend") -> None:
        self.plans, self.marker = settings.plans, settings.marker
        self.asked: dict[str, int] = {}
        self.calls: list[list[list[Message]]] = []

    def _card(self, messages: Sequence[Message]) -> str:
        text = "\n".join(m["content"] for m in messages)
        return next((word for word in self.plans if word in text), "")

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        self.calls.append([list(m) for m in batch])
        replies = []
        for messages in batch:
            if self.marker not in messages[-1]["content"]:
                replies.append(Reply(f"seeker #{len(messages)}", "stop", completion_tokens=2))
                continue
            card = self._card(messages)
            n = self.asked.get(card, 0)
            self.asked[card] = n + 1
            plan = self.plans.get(card) or ["5"]
            text = plan[min(n, len(plan) - 1)]
            replies.append(
                Reply("", "error", error="planned failure") if text == "FAIL" else Reply(text, "stop")
            )
        return replies

    def identity(self) -> dict[str, Any]:
        return {"kind": "planned", "plans": self.plans}
