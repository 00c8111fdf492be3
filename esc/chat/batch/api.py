"""What a provider's batch API is to the rest of `esc.chat.batch`: create a batch of request lines,
find one by the token it was created with, poll it, read an ended batch's replies; and the two ways
asking about a batch goes wrong that are not bugs (`BatchNotFound`, `BatchUnreachable`)."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from esc.chat.base import GenerationSettings, Message, Reply

log = logging.getLogger(__name__)
#: the custom_id of a line that is not JSON (cut short), read from its text where it can be
_CUSTOM_ID = re.compile(r'"custom_id"\s*:\s*"((?:[^"\\]|\\.)*)"')


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


class BatchNotFound(Exception):
    """The provider does not know the batch: deleted, or made with another key, project or account.
    The message is one line, secrets masked."""


class BatchUnreachable(Exception):
    """The provider could not answer about the batch now (no connection, a timeout, a server error or
    a rate limit, once the SDK's retries are spent): ask again later. One line, secrets masked."""


class BatchAPI(Protocol):
    """One provider's batch endpoints, through its official SDK, for one backend's model. `poll` and
    `results` raise `BatchNotFound` or `BatchUnreachable`, never the SDK's own errors for those."""

    provider: str  # "openai" | "anthropic"
    keeps_token: bool  # whether `find` can find a batch by its token (the provider keeps metadata)

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
        be (strict: an answer without text is an error reply); a failed or expired line, and a
        malformed one, is an error reply that says why. Requests the provider gave no line for, or
        a line whose custom_id cannot be read (a warning), are absent."""
        ...


def result_lines(text: str, batch_id: str, where: str) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """The lines of a batch's results file (`where`: which file, for the warning) as (custom_id,
    row); row is None for a line that is not a JSON object (the caller makes it an error reply for
    that request). A line whose custom_id cannot be read is skipped with a warning: its request is
    one the batch gave no result for."""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        custom_id = row.get("custom_id") if isinstance(row, dict) else None
        if not isinstance(custom_id, str) and row is None:
            found = _CUSTOM_ID.search(line)
            custom_id = found.group(1) if found else None
        if not isinstance(custom_id, str) or not custom_id:
            log.warning(
                "batch %s: line %d of its %s is not a result line (no custom_id): skipped; its request "
                "is a failed judgment, submitted again by the next run", batch_id, number, where,
            )  # fmt: skip
            continue
        yield custom_id, row if isinstance(row, dict) else None


def malformed(batch_id: str, why: str) -> Reply:
    """The reply of a request whose result line is malformed (a failed judgment; a rerun submits it
    again)."""
    return Reply(
        text="", finish_reason="error", error=f"batch {batch_id}: its result line is malformed ({why})"
    )
