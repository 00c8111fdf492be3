"""Chat backends: a batch of message lists in, a list of replies out (hf, openai, baichuan_npc)."""

from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, register_backend
from esc.chat.build import backend_kinds, build_backend

__all__ = [
    "ChatBackend",
    "GenerationSettings",
    "Message",
    "Reply",
    "backend_kinds",
    "build_backend",
    "register_backend",
]
