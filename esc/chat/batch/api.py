"""What a provider's batch API is to the rest of `esc.chat.batch`: create a batch of request lines,
find one by the token it was created with, poll it, read an ended batch's replies."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

from esc.chat.base import GenerationSettings, Message, Reply


@dataclasses.dataclass(frozen=True)
class Polled:
    """A batch's state as the provider reports it."""

    status: str  # the provider's word: validating, in_progress, completed, expired, failed, ended...
    ended: bool  # no more results will come: read them now
    done: int = 0  # requests answered so far (successes and failures)
    total: int = 0
    failed: int = 0
    detail: str = ""  # why a batch failed as a whole, in the provider's words

    def counts(self) -> dict[str, int]:
        return {"done": self.done, "total": self.total, "failed": self.failed}


class BatchAPI(Protocol):
    """One provider's batch endpoints, through its official SDK, for one backend's model."""

    provider: str  # "openai" | "anthropic"

    def request(self, messages: Sequence[Message], settings: GenerationSettings) -> dict[str, Any]:
        """The body of one batch line: what a single request would send."""
        ...

    def create(self, lines: Sequence[tuple[str, dict[str, Any]]], token: str) -> str:
        """Create a batch of (custom_id, body) lines; its id. `token` is kept with the batch where the
        provider keeps metadata (`find`). The create request is sent once (no SDK retry: a retried
        create whose first answer was lost makes a second batch)."""
        ...

    def find(self, token: str, since: float) -> str | None:
        """The id of a batch created with `token` at or after `since` (epoch seconds), or None (also
        when the provider keeps no metadata)."""
        ...

    def poll(self, batch_id: str) -> Polled: ...

    def results(self, batch_id: str) -> dict[str, Reply]:
        """An ended batch's replies by custom_id: each line read as the single request's answer would
        be (strict: an answer without text is an error reply); a failed or expired line is an error
        reply that says why. Requests the provider gave no line for are absent."""
        ...
