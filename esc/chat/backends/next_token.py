"""The next-token distribution of a batch of prompts on a transformers model: what a local judge
reads its answer from (`HFBackend.answer_distribution`).

Rows are left-padded with explicit position ids, so a row gets the same distribution alone as in
any batch, and only the last position's logits are computed. Prompts that start with the same
tokens (a rubric before the dialogue) can share one prefill: the shared part is run once and its
keys and values are reused by every batch of the group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

MIN_SHARED_PREFIX = 32  # shorter shared prompt starts are not worth a separate pass

#: (rows, vocabulary) probabilities -> (rows, answers): e.g. the summed probability of each answer's ids
Reduce = Callable[[Any], Any]


def shared_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Tokens every prompt starts with, leaving at least one token of each to run."""
    shortest = min(len(p) for p in prompts)
    n = 0
    while n < shortest - 1 and all(p[n] == prompts[0][n] for p in prompts):
        n += 1
    return n


def prefill(model: Any, device: Any, ids: list[int], adapter_kwargs: dict[str, Any]) -> list[tuple[Any, Any]]:
    """The per-layer keys and values of a prompt prefix."""
    import torch

    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids], device=device), use_cache=True, **adapter_kwargs)
    return [(layer.keys, layer.values) for layer in out.past_key_values.layers]


def next_token_answers(
    model: Any,
    device: Any,
    pad_id: int,
    prompts: list[list[int]],
    reduce: Reduce,
    adapter_kwargs: dict[str, Any],
    prefix: tuple[int, list[tuple[Any, Any]]] | None = None,
) -> list[list[float]]:
    """`reduce` of the next-token probabilities of each prompt. With `prefix` (tokens, keys and
    values shared by every prompt), only the rest is run: rows are [shared prefix][pad][rest of the
    prompt], positions counted over the real tokens."""
    import torch

    shared, layers = prefix if prefix else (0, None)
    rest = [ids[shared:] for ids in prompts]
    width = max(len(ids) for ids in rest)
    input_ids = torch.full((len(rest), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rest), shared + width), dtype=torch.long)
    attention[:, :shared] = 1
    for row, ids in enumerate(rest):
        input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        attention[row, shared + width - len(ids) :] = 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, shared:]
    kwargs = dict(adapter_kwargs)
    if layers is not None:
        from transformers import DynamicCache

        kwargs["past_key_values"] = DynamicCache(
            ddp_cache_data=[
                (k.expand(len(rest), -1, -1, -1), v.expand(len(rest), -1, -1, -1)) for k, v in layers
            ],
            config=model.config,
        )
    with torch.inference_mode():
        logits = model(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            position_ids=positions.to(device),
            logits_to_keep=1,
            use_cache=layers is not None,
            **kwargs,
        ).logits[:, -1, :]
    return reduce(torch.softmax(logits.float(), dim=-1)).cpu().tolist()
