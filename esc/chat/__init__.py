"""Chat backends: a batch of message lists in, a list of replies out (hf, openai, baichuan_npc)."""

from esc.chat.base import ChatBackend, GenerationSettings, Message, Reply, build_backend, register_backend

__all__ = ["ChatBackend", "GenerationSettings", "Message", "Reply", "build_backend", "register_backend"]
