"""Loss of a causal LM on held-out dialogues, counted on the learned (role-player) tokens only.

The figure that says whether ESC-Role training helps: the mean negative log-likelihood per
labelled token of dialogues the adapter never saw (e.g. ESConv's validation file when training used
only its train file), before and after training. Tokens are weighted equally across dialogues, so
long dialogues count by their length, as in training.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from esc.errors import ConfigError
from esc.esc_role_samples.esconv import read_esconv_splits
from esc.esc_role_samples.sample import Sample
from esc.esc_role_samples.tokenize import IGNORE_INDEX, collate, encode_chat
from esc.jsonl import atomic_write_text
from esc.paths import data_dir

log = logging.getLogger(__name__)


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
    """Token-weighted NLL of `model` on `encoded` chats (from `esc.esc_role_samples.tokenize.encode_chat`).

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


# --- held-out loss of a training run (train.py `callbacks.heldout`) -----------------------------------

HELDOUT_SOURCES = {"esconv_valid": "valid", "esconv_test": "test"}


def heldout_samples(source: str, dialogues: int, root: Path | None = None) -> list[Sample]:
    """The first `dialogues` dialogues of a held-out file, as training samples (same prompt, same
    card layout, same labels): `esconv_valid` or `esconv_test` (ESConv's own split files; the
    `HeldOut` settings of `esc.train.run` check `callbacks.heldout`)."""
    return read_esconv_splits(Path(root or data_dir()), [HELDOUT_SOURCES[source]])[:dialogues]


class HeldOutEvaluation(pl.Callback):
    """Measures a training run's effect on dialogues it never saw: the role-player-token loss of the
    base model (the adapter disabled) when fitting starts and of the trained model when it ends.

    Writes `OUT/heldout.json` ({"before", "after", "change", "tokens", "dialogues", "step", ...}),
    logs `heldout/loss_before` and `heldout/loss_after`, and keeps the figures in `self.result`
    (`train.py` returns `after` as the objective of a sweep, e.g. Optuna's). Refuses to run when a
    held-out dialogue is also a training sample. Every rank computes the losses (under ZeRO-3 each
    forward pass needs all of them); rank zero writes the file.
    """

    def __init__(self, source: str = "esconv_valid", dialogues: int = 32, batch_size: int = 4) -> None:
        self.source, self.dialogues, self.batch_size = source, int(dialogues), int(batch_size)
        self.result: dict[str, Any] | None = None
        self._encoded: list[dict[str, list[int]]] = []
        self._before: HeldOutLoss | None = None

    def setup(self, trainer: pl.Trainer, module: pl.LightningModule, stage: str) -> None:
        """Before the model loads: the held-out set, checked against the training samples, encoded."""

        datamodule = trainer.datamodule
        root = datamodule.data_cfg.get("root")  # the folder training reads (data.root)
        samples = heldout_samples(self.source, self.dialogues, Path(root) if root else None)
        trained = {s.id for s in datamodule.samples()[0]}
        leaked = [s.id for s in samples if s.id in trained]
        if leaked:
            raise ConfigError(
                "callbacks.heldout.source",
                f"{len(leaked)} held-out dialogues are training samples too (e.g. {leaked[0]}): keep "
                f"them out of data.sources (e.g. data.sources.esconv.splits=[train])",
            )
        tokenizer = datamodule.tokenizer
        encoded = (encode_chat(tokenizer, s.messages, datamodule.max_length, s.hold_out) for s in samples)
        self._encoded = [e for e in encoded if e]

    def on_fit_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        tokenizer = trainer.datamodule.tokenizer
        with module.model.disable_adapter():  # the base model, also when resuming a trained adapter
            self._before = heldout_loss(module.model, self._encoded, tokenizer.pad_token_id, self.batch_size)

    def on_fit_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        assert self._before is not None
        pad = trainer.datamodule.tokenizer.pad_token_id
        after = heldout_loss(module.model, self._encoded, pad, self.batch_size)
        before = self._before
        self.result = {
            "source": self.source,
            "dialogues": after.dialogues,
            "tokens": after.tokens,
            "before": before.loss,
            "after": after.loss,
            "change": after.loss - before.loss,
            "perplexity_before": before.perplexity,
            "perplexity_after": after.perplexity,
            "step": trainer.global_step,
            "train_rows": len(trainer.datamodule.train_set),
        }
        for logger in trainer.loggers:
            logger.log_metrics(
                {"heldout/loss_before": before.loss, "heldout/loss_after": after.loss}, trainer.global_step
            )
        if trainer.is_global_zero:
            out = Path(trainer.default_root_dir)
            atomic_write_text(out / "heldout.json", json.dumps(self.result, indent=2) + "\n")
        log.info(
            "Held-out %s (%d dialogues, %d role-player tokens): loss %.4f -> %.4f (%+.1f%%)",
            self.source, after.dialogues, after.tokens, before.loss, after.loss,
            100 * (after.loss / before.loss - 1),
        )  # fmt: skip
