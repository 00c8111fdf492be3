"""transformers' SDPA attention with grouped-query heads left to the kernel on CPU (issue 25).

For a masked query of more than one token (every prefill of a padded batch, every turn's new tokens
over a kept prefix), transformers' `sdpa_attention_forward` copies each key/value head once per
query head it serves (`repeat_kv`: 3 copies of the whole context per layer for SmolLM2) before
calling `scaled_dot_product_attention`. On CPU, PyTorch's kernel takes the grouped heads itself
(`enable_gqa=True`) with a mask: the same arithmetic per query head without the copies (measured:
208 vs 330 ms for 32 rows x 150 new tokens over 1,900 columns in float32, outputs equal). On CUDA
the masked grouped path falls back to the math kernel, so there, and for anything but a masked
multi-token query, this is transformers' function unchanged.
"""

from __future__ import annotations

from typing import Any

#: The name models are switched to (`AttentionInterface` / `AttentionMaskInterface`).
GROUPED_SDPA = "esc_sdpa_grouped"


def grouped_sdpa_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """`sdpa_attention_forward`, with `enable_gqa` instead of `repeat_kv` for masked queries on CPU."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    grouped = getattr(module, "num_key_value_groups", 1) > 1
    plain = kwargs.get("softcap") is None and kwargs.get("position_bias") is None
    if grouped and plain and attention_mask is not None and query.shape[2] > 1 and query.device.type == "cpu":
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
        )
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal,
        **kwargs,
    )  # fmt: skip


def use_grouped_sdpa(model: Any) -> bool:
    """Switch a model on SDPA attention to `grouped_sdpa_attention`; whether it was switched."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base.config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_attention)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
    base.set_attn_implementation(GROUPED_SDPA)
    return base.config._attn_implementation == GROUPED_SDPA
