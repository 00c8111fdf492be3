"""Keys and values of recent conversations, kept so that the next turn prefills only what is new.

An ESC-Eval dialogue only grows: each side's next prompt is its last prompt, the reply it wrote,
the other side's answer and the generation prompt. Re-encoding the whole history every turn (the
official script's shape, and plain `generate`) makes prefill grow with the square of the dialogue's
length. The `hf` backend keeps, per conversation, the attention keys and values of its last prompt
and reply (`PrefixCache.store`) and, for a new prompt, takes the entry sharing its longest token
prefix (`PrefixCache.lookup`): only the tokens after it are prefilled.

Entries are whole conversations, at most `max_bytes` of them in total, least recently used first
out; an entry continued by a later turn is replaced by the longer one. The cache belongs to one
model with one adapter (the backend's); it holds tensors on the model's device.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

MIN_REUSE = 16  # shorter shared prefixes are not worth a cache row


@dataclasses.dataclass
class Entry:
    ids: np.ndarray  # the tokens whose keys and values are kept
    layers: list[tuple[Any, Any]]  # per layer: keys, values of shape [kv heads, tokens, head dim]
    nbytes: int


class PrefixCache:
    """Per-conversation keys and values, reused through the longest shared token prefix."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self.entries: OrderedDict[int, Entry] = OrderedDict()
        self.nbytes = 0
        self._keys = itertools.count()
        self.hits = self.misses = self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self.entries)

    def lookup(self, ids: Sequence[int]) -> tuple[int, int | None, list[tuple[Any, Any]] | None]:
        """(tokens reusable, entry key, the per-layer keys and values of those tokens) for a prompt;
        (0, None, None) without a useful match. At least one token of the prompt is left to feed."""
        query = np.asarray(ids, dtype=np.int64)
        best_key, best = None, 0
        for key, entry in self.entries.items():
            n = min(len(entry.ids), len(query))
            same = entry.ids[:n] == query[:n]
            shared = n if same.all() else int(same.argmin())
            if shared > best:
                best_key, best = key, shared
        usable = min(best, len(query) - 1)
        if best_key is None or usable < MIN_REUSE:
            self.misses += 1
            return 0, None, None
        self.entries.move_to_end(best_key)
        self.hits += 1
        self.reused_tokens += usable
        layers = [(k[:, :usable], v[:, :usable]) for k, v in self.entries[best_key].layers]
        return usable, best_key, layers

    def store(self, ids: Sequence[int], layers: list[tuple[Any, Any]], replaces: int | None = None) -> None:
        """Keep a conversation's keys and values; `replaces` is the entry it continues (dropped)."""
        if replaces is not None and replaces in self.entries:
            self.nbytes -= self.entries.pop(replaces).nbytes
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if nbytes > self.max_bytes:
            return
        while self.entries and self.nbytes + nbytes > self.max_bytes:
            self.nbytes -= self.entries.popitem(last=False)[1].nbytes
        self.entries[next(self._keys)] = Entry(np.asarray(ids, dtype=np.int64), layers, nbytes)
        self.nbytes += nbytes
