"""LightningDataModule over HF `datasets`: ESC-Role samples -> tokenized, label-masked batches."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytorch_lightning as pl
from torch.utils.data import DataLoader

from esc.errors import ConfigError

log = logging.getLogger(__name__)


class ChatSFTDataModule(pl.LightningDataModule):
    """Builds the sample mixture, tokenizes it with the model's chat template and serves batches.

    Only the role-player's (assistant) tokens carry labels; see :mod:`esc.data.tokenize`.
    """

    def __init__(
        self,
        data: Mapping[str, Any],
        tokenizer: Any,
        max_length: int,
        batch_size: int = 1,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        packing: bool = False,
    ) -> None:
        super().__init__()
        self.data_cfg = data
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.packing = packing
        self.train_set = None
        self.val_set = None

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        from esc.data.mixture import build_samples
        from esc.data.tokenize import encode_dataset, pack

        train, val = build_samples(self.data_cfg)
        self.train_set = encode_dataset(train, self.tokenizer, self.max_length)
        self.val_set = encode_dataset(val, self.tokenizer, self.max_length) if val else None
        if len(self.train_set) == 0:
            raise ConfigError("model.max_length", f"no training sample fits in {self.max_length} tokens")
        if self.packing:
            self.train_set = pack(self.train_set, self.max_length)
        log.info("ESC-Role data: %d train / %d val sequences (max_length=%d, packing=%s)",
                 len(self.train_set), len(self.val_set or []), self.max_length, self.packing)

    def _collate(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        from esc.data.tokenize import collate

        return collate(batch, pad_token_id=self.tokenizer.pad_token_id)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True,
                          num_workers=self.num_workers, collate_fn=self._collate)

    def val_dataloader(self) -> DataLoader | list:
        if not self.val_set:
            return []
        return DataLoader(self.val_set, batch_size=self.eval_batch_size, shuffle=False,
                          num_workers=self.num_workers, collate_fn=self._collate)
