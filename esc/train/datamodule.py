"""LightningDataModule over HF `datasets`: ESC-Role samples -> tokenized, label-masked batches."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
from collections.abc import Mapping, Sequence
from typing import Any

import pytorch_lightning as pl
from torch.utils.data import DataLoader

from esc.errors import ConfigError
from esc.paths import cache_dir

log = logging.getLogger(__name__)


class ChatSFTDataModule(pl.LightningDataModule):
    """Builds the samples, tokenizes them with the model's chat template and serves batches.

    The samples come from ``data.builder`` (a dotted function path returning ``(train, val)``):
    the ESC-Role mixture by default, ESC-RANK's annotated judge prompts with ``data=esc_rank``.

    Only the role-player's (assistant) tokens carry labels; see :mod:`esc.sft.tokenize`.
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
        num_proc: int | None = None,
        cache: bool = True,
    ) -> None:
        super().__init__()
        self.data_cfg = data
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.packing = packing
        self.num_proc = num_proc
        self.cache = cache
        self.train_set = None
        self.val_set = None
        self._samples: tuple[list, list] | None = None

    def samples(self) -> tuple[list, list]:
        """The (train, val) samples, built once per process (prepare_data and setup both need them)."""
        if self._samples is None:
            from hydra.utils import get_method

            builder = self.data_cfg.get("builder") or "esc.sft.mixture.build_samples"
            self._samples = get_method(builder)(self.data_cfg)
        return self._samples

    def prepare_data(self) -> None:
        """Once per node: tokenize into the cache, so that every rank's `setup` only loads it."""
        if self.cache:
            train, val = self.samples()
            self._encode(train, "train")
            if val:
                self._encode(val, "val")

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        from esc.sft.tokenize import pack

        train, val = self.samples()
        self.train_set = self._encode(train, "train")
        self.val_set = self._encode(val, "val") if val else None
        if len(self.train_set) == 0:
            raise ConfigError("model.max_length", f"no training sample fits in {self.max_length} tokens")
        if self.packing:
            self.train_set = pack(self.train_set, self.max_length)
        log.info(
            "Training data: %d train / %d val sequences (max_length=%d, packing=%s)",
            len(self.train_set),
            len(self.val_set or []),
            self.max_length,
            self.packing,
        )

    def _encode(self, samples: Sequence[Any], split: str) -> Any:
        """Tokenize, reusing an earlier run's result for the same samples, tokenizer and max_length."""
        import datasets

        from esc.sft.tokenize import encode_dataset

        if not self.cache:
            return encode_dataset(samples, self.tokenizer, self.max_length, num_proc=self.num_proc)
        path = cache_dir() / "encoded" / f"{split}-{self._fingerprint(samples)}"
        if path.exists():
            log.info("Reusing tokenized %s data from %s", split, path)
            return datasets.load_from_disk(str(path))
        encoded = encode_dataset(samples, self.tokenizer, self.max_length, num_proc=self.num_proc)
        tmp = path.with_name(f"{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
        encoded.save_to_disk(str(tmp))
        try:
            os.rename(tmp, path)
        except OSError:  # another node or process finished the same cache first
            shutil.rmtree(tmp, ignore_errors=True)
        return datasets.load_from_disk(str(path))

    def _fingerprint(self, samples: Sequence[Any]) -> str:
        digest = hashlib.sha256()
        digest.update(json.dumps([s.to_dict() for s in samples], ensure_ascii=False, sort_keys=True).encode())
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        digest.update(
            (backend.to_str() if backend is not None else repr(self.tokenizer.get_vocab())).encode()
        )
        digest.update(str(self.tokenizer.chat_template).encode())
        digest.update(str(self.max_length).encode())
        return digest.hexdigest()[:16]

    def _collate(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        from esc.sft.tokenize import collate

        return collate(batch, pad_token_id=self.tokenizer.pad_token_id)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set,
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=self.num_workers,
            collate_fn=self._collate,
        )

    def val_dataloader(self) -> DataLoader | list:
        if not self.val_set:
            return []
        return DataLoader(
            self.val_set,
            batch_size=self.eval_batch_size,
            shuffle=False,
            num_workers=self.num_workers,
            collate_fn=self._collate,
        )
