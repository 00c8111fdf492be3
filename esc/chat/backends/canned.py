"""Canned replies (``kind: canned``): a chatbot that answers from a fixed list, one reply per turn.

For validating the signals that read a conversation (the seeker's emotion trajectory, the safety
checklist, a judge) against replies whose quality is known: a target that always answers
supportively against one that always dismisses the seeker. The reply to a conversation is the
n-th of the list, n counting the assistant turns already in it (the list repeats when it runs out);
``replies`` is a list, or one list per language (``en``, ``zh``: a conversation with CJK characters
in its last message gets the ``zh`` list). Nothing is generated: ``max_new_tokens`` and decoding
settings do not apply.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, register_backend
from esc.errors import ConfigError

_CJK = re.compile(r"[\u3400-\u9fff]")


@register_backend("canned")
class CannedBackend(ChatBackend):
    CODE_VERSION = 1
    max_concurrency = 64  # no model to batch for: with another such side, dialogues stream

    def __init__(self, replies: Sequence[str] | Mapping[str, Sequence[str]], name: str = "canned") -> None:
        lists = dict(replies) if isinstance(replies, Mapping) else {"en": list(replies), "zh": list(replies)}
        if not lists or not all(
            isinstance(v, Sequence) and v and all(isinstance(t, str) for t in v) for v in lists.values()
        ):
            raise ConfigError("backend.replies", "needs a non-empty list of texts (or one per language)")
        self.replies = {lang: list(texts) for lang, texts in lists.items()}
        self.name = name

    def _language(self, messages: Sequence[Message]) -> str:
        text = messages[-1]["content"] if messages else ""
        language = "zh" if _CJK.search(text) else "en"
        return language if language in self.replies else next(iter(self.replies))

    def generate(self, batch: Sequence[Sequence[Message]], settings: GenerationSettings) -> list[Reply]:
        out = []
        for messages in batch:
            texts = self.replies[self._language(messages)]
            n = sum(m["role"] == "assistant" for m in messages)
            out.append(Reply(texts[n % len(texts)], "stop", prompt_tokens=0, completion_tokens=0))
        return out

    def identity(self) -> dict[str, Any]:
        digest = hashlib.sha256(
            json.dumps(self.replies, ensure_ascii=False, sort_keys=True).encode()
        ).hexdigest()
        return {
            "kind": "canned",
            "name": self.name,
            "replies_sha256": digest[:16],
            "code_version": self.code_version(),
        }
