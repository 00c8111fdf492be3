"""Greedy decoding of a left-padded batch with less work per step than `generate` (issue 25).

`transformers.GenerationMixin.generate` grows its `DynamicCache` by concatenation (every layer's keys
and values copied to append one token: O(context) per step) and decodes every row until the slowest
one ends. Here, with the same model forward, the same positions and masks and the same logits
processors:

- the keys and values live in buffers allocated once for the prompt and the longest reply
  (`GrowingLayer`); a step writes one column in place and attention reads a view;
- only the last position's logits go through the LM head (`logits_to_keep=1`);
- rows that have ended leave the batch (`compact`), and columns that are padding for every row
  left are cut, so attention runs over the rows still decoding and their own widths.

Greedy tokens are a row's argmax after the processors (e.g. ``no_repeat_ngram_size``), as
`generate` chooses them. The arithmetic is the same per row, but a smaller batch or a narrower row
may run other float kernels: identical tokens are checked by tests against `generate` and the
official batch-1 loop, not assumed.

Only what greedy decoding needs is here: sampling, stop strings and per-token log-probabilities go
through `generate` (`HFBackend._generate_chunk`), as do models whose forward takes no cache object
(`cache`, or `past_key_values` on older transformers) or no `logits_to_keep` (e.g. remote-code
models).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: GenerationConfig fields this loop honours; any other field set away from its default sends the
#: call to `generate`, so a processor is never silently skipped.
HONOURED = frozenset({"no_repeat_ngram_size", "repetition_penalty"})
#: Fields that do not change which token greedy decoding picks (or are handled by the caller).
NEUTRAL = frozenset(
    {"max_new_tokens", "max_length", "do_sample", "temperature", "top_p", "top_k", "min_p", "typical_p",
     "eos_token_id", "pad_token_id", "bos_token_id", "num_return_sequences", "return_dict_in_generate",
     "output_logits", "output_scores", "stop_strings", "transformers_version", "use_cache",
     "cache_implementation", "_from_model_config", "num_beams"}
)  # fmt: skip
#: Compact the batch once this share of its rows have ended (compacting copies the caches).
COMPACT_SHARE = 0.125


def unsupported_fields(gen: Any) -> list[str]:
    """GenerationConfig fields set away from their defaults that this loop does not honour."""
    from transformers import GenerationConfig

    default = GenerationConfig().to_dict()
    return sorted(
        key
        for key, value in gen.to_dict().items()
        if key not in HONOURED and key not in NEUTRAL and value != default.get(key)
    )


def cache_keyword(model: Any) -> str | None:
    """The keyword the causal LM's forward takes its cache object by: `cache` (transformers >= 5.2x),
    `past_key_values` (before, e.g. the 5.19 that vLLM 0.32 pins); None if it takes neither, or no
    `logits_to_keep`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    found = _CACHE_KEYWORDS.get(type(base), "?")
    if found == "?":
        params = inspect.signature(base.forward).parameters
        names = [k for k in ("cache", "past_key_values") if k in params]
        found = names[0] if names and "logits_to_keep" in params else None
        _CACHE_KEYWORDS[type(base)] = found
    return found


_CACHE_KEYWORDS: dict[type, str | None] = {}


def model_supports(model: Any) -> bool:
    """Whether the causal LM's forward takes a cache object and `logits_to_keep` (transformers' own
    models, under either name of the cache: `cache_keyword`)."""
    return cache_keyword(model) is not None


def processors_for(gen: Any) -> Any:
    """The logits processors `generate` builds for the honoured fields, in its order."""
    from transformers import LogitsProcessorList
    from transformers.generation.logits_process import (
        NoRepeatNGramLogitsProcessor,
        RepetitionPenaltyLogitsProcessor,
    )

    processors = LogitsProcessorList()
    if gen.repetition_penalty is not None and gen.repetition_penalty != 1.0:
        processors.append(RepetitionPenaltyLogitsProcessor(penalty=gen.repetition_penalty))
    if gen.no_repeat_ngram_size is not None and gen.no_repeat_ngram_size > 0:
        processors.append(NoRepeatNGramLogitsProcessor(gen.no_repeat_ngram_size))
    return processors


def _growing_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """A DynamicLayer whose keys and values sit in a buffer of `capacity` columns, filled in
        place; `keys`/`values` are views of the filled part, so the model reads them as usual."""

        def __init__(self, capacity: int) -> None:
            super().__init__()
            self.capacity = capacity
            self.length = 0
            self._k: Any = None
            self._v: Any = None

        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
            self.device = key_states.device
            self._k = key_states.new_empty((*key_states.shape[:2], self.capacity, key_states.shape[-1]))
            self._v = value_states.new_empty((*value_states.shape[:2], self.capacity, value_states.shape[-1]))
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n = key_states.shape[-2]
            self._k[:, :, self.length : self.length + n] = key_states
            self._v[:, :, self.length : self.length + n] = value_states
            self.length += n
            self.keys = self._k[:, :, : self.length]
            self.values = self._v[:, :, : self.length]
            return self.keys, self.values

        def adopt(self, keys: Any, values: Any, length: int) -> None:
            """Take `keys`/`values` (at least `capacity` columns, the first `length` filled) as
            the buffers, without a copy."""
            self.device = keys.device
            self._k, self._v, self.length = keys, values, length
            self.keys, self.values = keys[:, :, :length], values[:, :, :length]
            self.is_initialized = True

        def get_seq_length(self) -> int:
            return self.length

        def get_max_length(self) -> int:
            return self.capacity

        def keep(self, rows: Any, first_column: int) -> None:
            """Only these rows, from this column on (a copy of what is kept; the rest is freed)."""
            self._k = self._k[rows][:, :, first_column:]
            self._v = self._v[rows][:, :, first_column:]
            self.capacity -= first_column
            self.length -= first_column
            self.keys = self._k[:, :, : self.length]
            self.values = self._v[:, :, : self.length]

    return GrowingLayer


@dataclass
class DecodedRow:
    """One row's generated tokens (ending with the end-of-sequence token when it produced one) and,
    when asked for, its keys and values for the prompt and every generated token but the last
    (the tokens the model has read), per layer (heads, tokens, dim)."""

    tokens: list[int]
    layers: list[tuple[Any, Any]] | None = None


def greedy_decode(
    model: Any,
    input_ids: Any,
    attention: Any,
    past: list[tuple[Any, Any]] | None,
    past_width: int,
    max_new_tokens: int,
    eos_ids: set[int],
    pad_id: int,
    processors: Any,
    keep_kv: bool = False,
    model_kwargs: Mapping[str, Any] | None = None,
) -> list[DecodedRow]:
    """Greedy replies of a left-padded batch: `input_ids` and `attention` (rows, width) on the model's
    device, the first `past_width` columns already in `past` (per layer keys and values of shape
    (rows, heads, columns, dim), the first `past_width` columns filled; with at least width +
    max_new_tokens columns they become the buffers, otherwise they are copied) or none."""
    import torch
    from transformers.cache_utils import Cache

    rows, width = input_ids.shape
    device = input_ids.device
    capacity = width + max_new_tokens
    layer_class = _growing_layer_class()
    layers = [layer_class(capacity) for _ in range(model.config.get_text_config().num_hidden_layers)]
    if past is not None and past_width:
        for layer, (keys, values) in zip(layers, past, strict=True):
            if keys.shape[2] >= capacity:  # buffers made for this call: taken as they are
                layer.adopt(keys, values, past_width)
            else:
                layer.update(keys, values)
    cache = Cache(layers=layers)
    mask = torch.zeros((rows, capacity), dtype=attention.dtype, device=device)
    mask[:, :width] = attention
    # What the logits processors read: each row's own tokens, contiguous and right-aligned (a row
    # with a kept prefix has padding between the prefix and its new tokens in `input_ids`; the
    # processors must not see it: a 3-gram across that gap would not be banned, padding would be
    # penalised as a repeated token). `starts[b]`: the row's first real column.
    tokens = torch.full((rows, capacity), pad_id, dtype=input_ids.dtype, device=device)
    starts = []
    for row in range(rows):
        real = input_ids[row][attention[row] != 0]
        tokens[row, width - len(real) : width] = real
        starts.append(width - len(real))
    positions = (attention.long().cumsum(-1) - 1).masked_fill(attention == 0, 0)
    next_position = positions[:, -1:] + 1
    kwargs = dict(model_kwargs or {})

    index = list(range(rows))  # batch row -> original row
    out: list[list[int]] = [[] for _ in range(rows)]
    kept: list[list[tuple[Any, Any]] | None] = [None] * rows
    ended = [False] * rows  # by batch row
    read = [0] * rows  # by original row: columns the row had read when it ended
    eos = torch.tensor(sorted(eos_ids), device=device)
    step_input = input_ids[:, past_width:]
    step_positions = positions[:, past_width:]
    length = width  # columns of `mask` in use (the cache's and the next token's)
    filled = width  # columns of `tokens` in use

    # Half precision: decoding steps get a ready 4D mask, so that attention always takes the packed
    # grouped-query path (transformers drops an all-ones 2D mask, and the CPU's bfloat16 kernel for
    # the unmasked grouped-query path ran 5x slower); float32 keeps generate's masks exactly.
    mask_4d = next(model.parameters()).dtype != torch.float32
    forward = _prefill  # then _decode_step: two names, so that a profile tells them apart
    with torch.inference_mode():
        while True:
            step_mask = mask[:, : layers[0].length + step_input.shape[1]]
            if mask_4d and step_input.shape[1] == 1:
                step_mask = step_mask[:, None, None, :].bool()
            logits = forward(model, step_input, step_mask, step_positions, cache, kwargs)
            forward = _decode_step
            scores = logits.float()
            if processors:  # row by row, each on its own tokens only (as the row would be alone)
                for b, start in enumerate(starts):
                    if not ended[b]:
                        scores[b : b + 1] = processors(tokens[b : b + 1, start:filled], scores[b : b + 1])
            chosen = scores.argmax(dim=-1)
            tokens[:, filled] = chosen
            mask[:, length] = 1
            length += 1
            filled += 1
            stops = torch.isin(chosen, eos).tolist()
            for batch_row, token in enumerate(chosen.tolist()):
                if ended[batch_row]:
                    continue
                row = index[batch_row]
                out[row].append(token)
                if stops[batch_row] or len(out[row]) >= max_new_tokens:
                    ended[batch_row] = True
                    read[row] = layers[0].length
            if all(ended):
                break
            if sum(ended) >= max(1, int(COMPACT_SHARE * len(index))):
                if keep_kv:
                    for batch_row in (b for b, done in enumerate(ended) if done):
                        kept[index[batch_row]] = _row_kv(layers, mask, batch_row, read[index[batch_row]])
                live = [b for b, done in enumerate(ended) if not done]
                live_t = torch.tensor(live, device=device)
                mask, tokens, next_position = mask[live_t], tokens[live_t], next_position[live_t]
                first = int((mask[:, :length] != 0).long().argmax(dim=-1).min())  # padding for every row
                mask, length = mask[:, first:], length - first
                for layer in layers:
                    layer.keep(live_t, first)
                starts = [starts[b] for b in live]
                cut = min(starts)
                tokens, filled, starts = tokens[:, cut:], filled - cut, [start - cut for start in starts]
                index = [index[b] for b in live]
                ended = [False] * len(index)
                chosen = chosen[live_t]
            step_input = chosen.unsqueeze(-1)
            step_positions = next_position
            next_position = next_position + 1
    if keep_kv:
        for batch_row, row in enumerate(index):
            kept[row] = _row_kv(layers, mask, batch_row, read[row])
    return [DecodedRow(tokens=out[row], layers=kept[row]) for row in range(rows)]


def _prefill(model: Any, ids: Any, mask: Any, positions: Any, cache: Any, kwargs: dict[str, Any]) -> Any:
    """The prompts' forward pass (the part of each not in the kept prefix): last-position logits."""
    return _decode_step(model, ids, mask, positions, cache, kwargs)


def _decode_step(model: Any, ids: Any, mask: Any, positions: Any, cache: Any, kwargs: dict[str, Any]) -> Any:
    """One forward pass writing into `cache`; the logits of each row's last position."""
    cache_arg = {cache_keyword(model) or "cache": cache}
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
        **cache_arg, **kwargs,
    )  # fmt: skip
    return out.logits[:, -1, :]


def _row_kv(layers: list[Any], mask: Any, batch_row: int, columns: int) -> list[tuple[Any, Any]]:
    """One row's keys and values at its real (unmasked) columns among the first `columns`."""
    real = mask[batch_row, :columns].nonzero().squeeze(-1)
    return [
        (layer.keys[batch_row].index_select(1, real), layer.values[batch_row].index_select(1, real))
        for layer in layers
    ]
