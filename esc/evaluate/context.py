"""Fitting a prompt into a model's context window: which older messages the engine leaves out."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from esc.chat.base import Message

TEMPLATE_TOKENS_PER_MESSAGE = 16  # generous: ChatML spends 5 tokens on a message's frame


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
