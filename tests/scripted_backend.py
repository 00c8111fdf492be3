"""A scripted chat backend for offline tests of the engine: deterministic replies, planned failures."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, register_backend


@register_backend("scripted")
class ScriptedBackend(ChatBackend):
    """Replies `<label> #<n>: <digest of the conversation>`; fails when the conversation mentions `fail_on`.

    Every batch it receives is recorded in `calls` (sizes and messages), so tests can check batching
    and what each side saw.
    """

    instances: list[ScriptedBackend] = []

    def __init__(
        self,
        label: str = "bot",
        fail_on: str | None = None,
        context_window: int | None = None,
        price: dict | None = None,
        max_concurrency: int | None = None,
        slow_on: str | None = None,
        slow_s: float = 0.0,
    ) -> None:
        self.label, self.fail_on = label, fail_on
        self.context_window, self.price = context_window, price
        self.max_concurrency = max_concurrency  # set: it acts as an API (the engine streams)
        self.slow_on, self.slow_s = slow_on, slow_s  # a conversation mentioning slow_on waits slow_s
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
