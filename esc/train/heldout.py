"""Loss of a causal LM on held-out dialogues, counted on the learned (role-player) tokens only.

The figure that says whether ESC-Role training helps: the mean negative log-likelihood per
labelled token of dialogues the adapter never saw (e.g. ESConv's validation file when training used
only its train file), before and after training. Tokens are weighted equally across dialogues, so
long dialogues count by their length, as in training.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from esc.sft.tokenize import IGNORE_INDEX, collate


@dataclasses.dataclass(frozen=True)
class HeldOutLoss:
    nll_sum: float  # nats, summed over the labelled tokens
    tokens: int  # labelled (role-player) tokens scored
    dialogues: int

    @property
    def loss(self) -> float:
        """Mean NLL per labelled token (nats)."""
        return self.nll_sum / self.tokens if self.tokens else float("nan")

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss)


@torch.no_grad()
def heldout_loss(
    model: Any, encoded: Sequence[Mapping[str, list[int]]], pad_token_id: int, batch_size: int = 4
) -> HeldOutLoss:
    """Token-weighted NLL of `model` on `encoded` chats (from `esc.sft.tokenize.encode_chat`).

    Batches are right-padded (`collate`), so a row's loss does not depend on its batch. The model
    is put in eval mode (no dropout) and restored to its previous mode afterwards.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    nll_sum, tokens = 0.0, 0
    try:
        for start in range(0, len(encoded), batch_size):
            batch = collate([dict(row) for row in encoded[start : start + batch_size]], pad_token_id)
            batch = {
                k: v.to(device) for k, v in batch.items() if k in ("input_ids", "attention_mask", "labels")
            }
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            # position t predicts token t + 1; only labelled positions are scored
            targets = batch["labels"][:, 1:]
            mask = targets != IGNORE_INDEX
            scored = logits[:, :-1][mask].float()
            nll_sum += float(torch.nn.functional.cross_entropy(scored, targets[mask], reduction="sum"))
            tokens += int(mask.sum())
    finally:
        model.train(was_training)
    return HeldOutLoss(nll_sum=nll_sum, tokens=tokens, dialogues=len(encoded))
