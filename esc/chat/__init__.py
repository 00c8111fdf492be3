"""Chat backends: a batch of message lists in, a list of replies out (hf, vllm, openai, baichuan_npc).

`esc.chat.base` holds the interface and the registry, `esc.chat.build.build_backend` makes a backend
from a config node (importing `esc.chat.backends`, and with it the SDKs, only then).
"""
