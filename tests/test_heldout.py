"""Held-out role-player loss (esc.train.heldout), the figure behind benchmarks/bench_heldout_loss.py."""

from __future__ import annotations

import math

import pytest
import torch

from esc.esc_role_samples.esconv import read_esconv_splits
from esc.esc_role_samples.tokenize import IGNORE_INDEX, encode_chat
from esc.models.loading import ModelSettings, load_causal_lm, load_tokenizer
from esc.paths import data_dir
from esc.train.heldout import heldout_loss
from tests.helpers import compose, requires_data

pytestmark = requires_data


@pytest.fixture(scope="module")
def tiny():
    cfg = compose(["model=tiny"]).model
    return load_tokenizer(model := ModelSettings.of(cfg)), load_causal_lm(model).eval()


@pytest.fixture(scope="module")
def encoded(tiny):
    tokenizer, _ = tiny
    samples = read_esconv_splits(data_dir(), ["valid"])[:5]
    return [encode_chat(tokenizer, s.messages, 512) for s in samples]


def test_equals_the_models_own_loss_on_one_dialogue(tiny, encoded) -> None:
    tokenizer, model = tiny
    row = encoded[0]
    result = heldout_loss(model, [row], tokenizer.pad_token_id)
    with torch.no_grad():
        own = model(
            input_ids=torch.tensor([row["input_ids"]]), labels=torch.tensor([row["labels"]])
        ).loss.item()
    learned_after_first = sum(label != IGNORE_INDEX for label in row["labels"][1:])
    assert result.tokens == learned_after_first > 0 and result.dialogues == 1
    assert result.loss == pytest.approx(own, rel=1e-5)
    assert result.perplexity == pytest.approx(math.exp(own), rel=1e-5)


def test_token_weighted_and_independent_of_batching(tiny, encoded) -> None:
    tokenizer, model = tiny
    pad = tokenizer.pad_token_id
    whole = heldout_loss(model, encoded, pad, batch_size=4)
    singles = [heldout_loss(model, [row], pad) for row in encoded]
    assert whole.tokens == sum(s.tokens for s in singles)
    assert whole.nll_sum == pytest.approx(sum(s.nll_sum for s in singles), rel=1e-4)
    assert whole.loss != pytest.approx(sum(s.loss for s in singles) / len(singles), rel=1e-6)


def test_restores_training_mode(tiny, encoded) -> None:
    tokenizer, model = tiny
    model.train()
    heldout_loss(model, encoded[:1], tokenizer.pad_token_id)
    assert model.training
    model.eval()
