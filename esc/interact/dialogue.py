"""A dialogue between a role-player and a target model, and the two views each side sees.

The role-player plays the help-seeker: in its view it is the *assistant*, the target's replies are
*user* turns, and the conversation opens with the supporter's opener. The target sees the same
dialogue the normal way: the role-player's messages are *user* turns and its own are *assistant*.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal

from esc.chat.base import Message, Reply

Speaker = Literal["roleplayer", "target"]
TEMPLATE_TOKENS_PER_MESSAGE = 16  # generous: ChatML spends 5 tokens on a message's frame


@dataclasses.dataclass
class Turn:
    speaker: Speaker
    text: str
    finish_reason: str
    latency_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False
    context_dropped: int = 0  # earlier messages left out because the context window was full

    @classmethod
    def from_reply(cls, speaker: Speaker, reply: Reply, context_dropped: int = 0) -> Turn:
        return cls(
            speaker,
            reply.text,
            reply.finish_reason,
            round(reply.latency_s, 4),
            reply.prompt_tokens,
            reply.completion_tokens,
            reply.cached,
            context_dropped,
        )


@dataclasses.dataclass
class Dialogue:
    """One role card played against one target. `status` is "complete" or "failed"."""

    card_id: int
    language: str
    roleplayer: str
    target: str
    system_prompt: str
    opener: str
    target_system_prompt: str | None
    turns: list[Turn] = dataclasses.field(default_factory=list)
    status: str = "running"
    error: str | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def key(self) -> tuple[int, str]:
        return (self.card_id, self.language)

    def roleplayer_view(self) -> list[Message]:
        """The conversation as the role-player sees it: it is the assistant."""
        messages: list[Message] = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": self.opener},
        ]
        for turn in self.turns:
            role = "assistant" if turn.speaker == "roleplayer" else "user"
            messages.append({"role": role, "content": turn.text})
        return messages

    def target_view(self) -> list[Message]:
        """The conversation as the target sees it: the role-player is the user. No opener."""
        messages: list[Message] = []
        if self.target_system_prompt:
            messages.append({"role": "system", "content": self.target_system_prompt})
        for turn in self.turns:
            role = "user" if turn.speaker == "roleplayer" else "assistant"
            messages.append({"role": role, "content": turn.text})
        return messages

    def fail(self, reason: str) -> None:
        self.status = "failed"
        self.error = reason

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Dialogue:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["turns"] = [Turn(**t) for t in data.get("turns", [])]
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class ContextFit:
    """A prompt made to fit a context window (`fit_context`): the messages to send, how many older
    ones were left out, the prompt's size in tokens (None when not counted: it fitted by a cheap
    bound, or the backend cannot count), and whether it fits with room for the reply."""

    messages: list[Message]
    dropped: int = 0
    tokens: int | None = None
    fits: bool = True


def fit_context(
    messages: list[Message],
    count_tokens: Callable[[list[Message]], int | None],
    window: int | None,
    reserve: int,
    keep_head: int,
    truncate: bool = True,
) -> ContextFit:
    """Drop the oldest messages after the first `keep_head` until the prompt plus `reserve` fits.

    The policy: system prompt (and the role-player's opener) stay, then the oldest exchanges go
    first, two messages at a time so roles keep alternating; the newest message always stays.
    `truncate=False` drops nothing (it only measures). When the prompt is still too long (nothing
    is left to drop, or `truncate=False`), `fits` is false: the caller must not send it, since a
    model given more tokens than its window silently sees a garbled or cut prompt. Without a window or a token
    counter, the prompt is returned unchanged and taken to fit (nothing can tell otherwise).
    """
    if window is None:
        return ContextFit(messages)
    # Cheap bound first: a token covers at least one byte of text, plus a few template tokens per
    # message. Most prompts fit by far, and then nothing is tokenized twice.
    if sum(len(m["content"].encode()) + TEMPLATE_TOKENS_PER_MESSAGE for m in messages) + reserve <= window:
        return ContextFit(messages)
    size = count_tokens(messages)
    if size is None or size + reserve <= window:
        return ContextFit(messages, tokens=size)
    head, body = messages[:keep_head], messages[keep_head:]
    dropped = 0
    while truncate and len(body) > 2:
        body = body[2:]
        dropped += 2
        size = count_tokens(head + body)
        if size is None or size + reserve <= window:
            return ContextFit(head + body, dropped, size)
    return ContextFit(head + body, dropped, size, fits=False)
