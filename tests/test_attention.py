"""`esc.models.attention`: grouped-query heads left to the SDPA kernel give transformers' SDPA outputs
exactly, and the hf backend switches its CPU models to it."""

from __future__ import annotations

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from esc.chat.backends.hf import HFBackend
from esc.models.attention import GROUPED_SDPA, grouped_sdpa_attention, use_grouped_sdpa
from esc.models.loading import ModelSettings, load_for_inference
from tests.helpers import compose


class Grouped(torch.nn.Module):
    num_key_value_groups = 3  # SmolLM2's 9 query heads over 3 key/value heads
    is_causal = True


def padded_mask(rows: int, queries: int, columns: int) -> torch.Tensor:
    """A 4D boolean mask as transformers builds it: causal over the last `queries` columns, each
    row left-padded by a different amount."""
    mask = torch.ones(queries, columns, dtype=torch.bool).tril(columns - queries)
    mask = mask.expand(rows, 1, queries, columns).clone()
    for row in range(rows):
        mask[row, :, :, : 5 * row] = False
    return mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("queries", [1, 7])
def test_grouped_heads_give_sdpas_outputs_exactly(dtype, queries):
    torch.manual_seed(0)
    rows, columns = 4, 40
    query = torch.randn(rows, 9, queries, 64, dtype=dtype)
    key, value = (torch.randn(rows, 3, columns, 64, dtype=dtype) for _ in range(2))
    mask = padded_mask(rows, queries, columns)
    ours, _ = grouped_sdpa_attention(Grouped(), query, key, value, mask, scaling=0.125)
    theirs, _ = sdpa_attention_forward(Grouped(), query, key, value, mask, scaling=0.125)
    assert ours.shape == theirs.shape == (rows, queries, 9, 64)
    assert torch.equal(ours, theirs)


def test_the_hf_backend_switches_its_cpu_model_and_logits_stay_the_same():
    backend = HFBackend.of(model=compose(["model=tiny"]).model, batch_size=4, device="cpu", prefix_cache_gb=0)
    backend.load()
    model = backend._model
    assert model.config._attn_implementation == GROUPED_SDPA
    ids = torch.randint(5, 200, (3, 30))
    mask = torch.ones_like(ids)
    mask[1, :6], mask[2, :11] = 0, 0  # left padding: transformers passes a mask, and would repeat heads
    with torch.inference_mode():
        ours = model(input_ids=ids, attention_mask=mask).logits
        model.set_attn_implementation("sdpa")
        theirs = model(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(ours[mask.bool()], theirs[mask.bool()])
    backend.close()


def test_a_model_not_on_sdpa_is_left_alone():
    model, _, _ = load_for_inference(ModelSettings.of(compose(["model=tiny"]).model), "cpu")
    model.set_attn_implementation("eager")
    assert use_grouped_sdpa(model) is False
    assert model.config._attn_implementation == "eager"
