"""Token counts and cost of a model's replies in one run: what the manifests report per model."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from esc.chat.base import Reply

if TYPE_CHECKING:
    from esc.chat.settings import Price


@dataclasses.dataclass
class Usage:
    """Token counts of one side, for the manifest and the cost estimate.

    `prompt_tokens` / `completion_tokens` count the replies the model produced in this run (what an
    API bills); replies replayed from the request cache cost nothing and are counted apart in
    `cached_prompt_tokens` / `cached_completion_tokens`. `served` counts replies by the model name
    and ``system_fingerprint`` the API reported (cached ones included, with their own count).
    """

    requests: int = 0
    cached: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    cached_completion_tokens: int = 0
    served: dict[tuple[str | None, str | None], list[int]] = dataclasses.field(default_factory=dict)

    def add(self, reply: Reply) -> None:
        self.requests += 1
        self.cached += reply.cached
        self.errors += not reply.ok
        if reply.cached:
            self.cached_prompt_tokens += reply.prompt_tokens or 0
            self.cached_completion_tokens += reply.completion_tokens or 0
        else:
            self.prompt_tokens += reply.prompt_tokens or 0
            self.completion_tokens += reply.completion_tokens or 0
        if reply.model or reply.system_fingerprint:
            counts = self.served.setdefault((reply.model, reply.system_fingerprint), [0, 0])
            counts[0] += 1
            counts[1] += reply.cached

    def cost(self, price: Price | None) -> float | None:
        """USD for the tokens generated in this run (cache hits are free); None without a price."""
        if price is None:
            return None
        return round(
            self.prompt_tokens / 1000 * price.prompt + self.completion_tokens / 1000 * price.completion, 6
        )

    def report(self, price: Price | None) -> dict[str, Any]:
        """The manifest's entry: counts, cost, and the served models / fingerprints seen."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "served"}
        data["cost_usd"] = self.cost(price)
        data["served"] = [
            {"model": model, "system_fingerprint": fingerprint, "replies": n, "cached": cached}
            for (model, fingerprint), (n, cached) in sorted(
                self.served.items(), key=lambda item: (str(item[0][0]), str(item[0][1]))
            )
        ]
        return data
