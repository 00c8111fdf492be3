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
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, register_backend
from esc.chat.settings import BackendSettings
from esc.settings.types import NonEmpty

_CJK = re.compile(r"[\u3400-\u9fff]")


@register_backend("canned")
class CannedBackend(ChatBackend):
    CODE_VERSION = 1
    runs_in_process = True
    max_concurrency = 64  # no model to batch for: with another such side, dialogues stream

    class Settings(BackendSettings):
        """A `canned` node (conf/target/canned_*.yaml)."""

        replies: NonEmpty[str] | dict[str, NonEmpty[str]] = Field(
            description="a non-empty list of texts, or one per language: en, zh"
        )
        name: str = Field("canned", min_length=1, description="named in its identity")

    def __init__(self, settings: Settings, config_key: str = "backend") -> None:
        replies = settings.replies
        lists = dict(replies) if isinstance(replies, dict) else {"en": list(replies), "zh": list(replies)}
        self.replies = {lang: list(texts) for lang, texts in lists.items()}
        self.name = settings.name

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
