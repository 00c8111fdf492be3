"""LightningDataModule over HF `datasets`: ESC-Role samples -> tokenized, label-masked batches."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import socket
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from hydra.utils import instantiate
from torch.utils.data import DataLoader, DistributedSampler

from esc.errors import ConfigError, UserError
from esc.esc_role_samples.tokenize import collate, collate_packed, encode_dataset, pack
from esc.paths import cache_dir

log = logging.getLogger(__name__)


class ResumableSampler(DistributedSampler):
    """Shuffles by (seed, epoch), takes this rank's share, and can start an epoch part-way through.

    A `DistributedSampler`, so Lightning leaves it in place under DDP and calls `set_epoch` every
    epoch; with one process it is a seeded shuffle. `skip` indices are dropped from the front of the
    next pass only: that is how a resumed run continues the epoch where its checkpoint was written.
    With `weights` (one per sample), an epoch is as many draws with replacement, each sample drawn
    in proportion to its weight (class-balanced sampling), from the same seeded generator.
    """

    def __init__(
        self,
        dataset: Any,
        num_replicas: int = 1,
        rank: int = 0,
        shuffle: bool = True,
        seed: int = 0,
        weights: Sequence[float] | None = None,
    ) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed)
        self.skip = 0
        self.weights = None if weights is None else list(map(float, weights))

    def __iter__(self) -> Iterator[int]:
        if self.weights is None:
            indices = list(super().__iter__())
        else:
            import torch

            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            draws = torch.multinomial(
                torch.tensor(self.weights, dtype=torch.double), self.total_size, True, generator=generator
            ).tolist()
            indices = draws[self.rank : self.total_size : self.num_replicas]
        skip, self.skip = self.skip, 0
        return iter(indices[skip:])


class ResumableDataLoader(DataLoader):
    """A DataLoader over a `ResumableSampler` whose position in the epoch goes into checkpoints.

    `ChatSFTDataModule.state_dict` puts `state_dict()` into every checkpoint and gives it back
    with `load_state_dict` on resume (Lightning also does so for stateful loaders, when it creates
    the loader after loading the checkpoint), so a rerun after a kill trains the rest of the epoch
    in the same order instead of starting the epoch over. The position counts batches handed to
    the trainer (not indices taken by worker processes ahead of time); the skip takes effect when
    the next pass starts, so the state may be loaded after `iter()` but before the first batch.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(self.sampler, ResumableSampler):
            raise TypeError("ResumableDataLoader needs a ResumableSampler")
        self._batches = 0  # batches of the current epoch handed out so far
        self._resume: dict[str, int] | None = None

    def __iter__(self) -> Iterator[Any]:
        resume, self._resume = self._resume, None
        start = 0
        if resume is not None and resume["epoch"] == self.sampler.epoch:
            start = resume["batches"]
            self.sampler.skip = start * self.batch_size
            log.info("Resuming epoch %d of the training data at batch %d", self.sampler.epoch, start)
        self._batches = start
        for batch in super().__iter__():
            self._batches += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        """Where the current epoch stands, and what the position depends on."""
        return {
            "epoch": self.sampler.epoch,
            "batches": self._batches,
            "batch_size": int(self.batch_size or 1),
            "dataset_size": len(self.dataset),
            "num_replicas": self.sampler.num_replicas,
            "seed": self.sampler.seed,
        }

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Continue the checkpoint's epoch after its last batch; refuse if the data no longer line up."""
        batches = int(state.get("batches", 0))
        per_rank = math.ceil(state.get("dataset_size", 0) / max(state.get("num_replicas", 1), 1))
        epoch_batches = math.ceil(per_rank / max(state.get("batch_size", 1), 1))
        if not 0 < batches < epoch_batches:  # saved at an epoch's start or end: nothing to skip
            return
        now = self.state_dict()
        changed = [
            f"{name} {state[name]} -> {now[name]}"
            for name in ("batch_size", "dataset_size", "num_replicas", "seed")
            if name in state and state[name] != now[name]
        ]
        if changed:
            raise UserError(
                "resume: the checkpoint stopped part-way through an epoch and the training data changed "
                f"since ({', '.join(changed)}), so its place in the data is lost; rerun with the "
                "checkpoint's settings, or resume=never to start over"
            )
        self._resume = {"epoch": int(state["epoch"]), "batches": batches}


class ChatSFTDataModule(pl.LightningDataModule):
    """Builds the samples, tokenizes them with the model's chat template and serves batches.

    The samples come from ``data.builder`` (a ``_target_`` function, called with the rest of
    ``data``, returning ``(train, val)``):
    the ESC-Role mixture by default, ESC-RANK's annotated judge prompts with ``data=esc_rank``.

    Only the role-player's (assistant) tokens carry labels; see :mod:`esc.esc_role_samples.tokenize`. Training
    batches come from a `ResumableDataLoader` (shuffled by ``seed`` and the epoch; ``seed=None``:
    the seed given to `seed_everything`), so a resumed run continues the epoch where it stopped.
    With ``packing``, the rows of a batch are flattened into one sequence whose samples do not
    attend to each other (`esc.esc_role_samples.tokenize.collate_packed`). With ``weighted_sampling``,
    training draws samples in proportion to their `Sample.weight` (ESC-RANK's class balance).
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
        seed: int | None = None,
        weighted_sampling: bool = False,
    ) -> None:
        super().__init__()
        self.data_cfg = data
        self.tokenizer = tokenizer
        self._written: set[Path] = set()  # tokenized caches this process wrote
        self.max_length = max_length
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.packing = packing
        self.num_proc = num_proc
        self.cache = cache
        self.seed = seed
        self.weighted_sampling = weighted_sampling
        self._train_loader: ResumableDataLoader | None = None
        self._loader_state: Mapping[str, int] | None = None  # from a checkpoint, for the next loader
        self.train_set = None
        self.val_set = None
        self._samples: tuple[list, list] | None = None

    def samples(self) -> tuple[list, list]:
        """The (train, val) samples, built once per process (prepare_data and setup both need them)."""
        if self._samples is None:
            builder = self.data_cfg["builder"]
            if not callable(builder):  # a `_target_` node not yet instantiated (a datamodule built by hand)
                builder = instantiate(builder)
            self._samples = builder({key: value for key, value in self.data_cfg.items() if key != "builder"})
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

        train, val = self.samples()
        self.train_set = self._encode(train, "train")
        self.val_set = self._encode(val, "val") if val else None
        if len(self.train_set) == 0:
            raise ConfigError("model.max_length", f"no training sample fits in {self.max_length} tokens")
        if self.packing:
            if self.weighted_sampling:
                raise ConfigError("datamodule.packing", "packing and weighted sampling do not combine")
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

        what = f"{len(samples):,} {split} samples (max_length {self.max_length})"
        if not self.cache:
            log.info("Tokenizing %s", what)
            return encode_dataset(samples, self.tokenizer, self.max_length, num_proc=self.num_proc)
        path = cache_dir() / "encoded" / f"{split}-{self._fingerprint(samples)}"
        if path.exists():
            if path not in self._written:  # `setup` after this process's own `prepare_data` says nothing
                log.info("Reusing the tokenized %s from an earlier run (%s)", what, path)
            return datasets.load_from_disk(str(path))
        log.info("Tokenizing %s; kept for later runs in %s", what, path)
        self._written.add(path)
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

        return collate(batch, pad_token_id=self.tokenizer.pad_token_id)

    def _collate_packed(self, batch: list[dict[str, Any]]) -> dict[str, Any]:

        return collate_packed(batch)

    def train_dataloader(self) -> ResumableDataLoader:
        """Shuffled batches of this rank's share, resumable mid-epoch (see `ResumableDataLoader`)."""
        trainer = self.trainer
        seed = self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))
        sampler = ResumableSampler(
            self.train_set,
            num_replicas=trainer.world_size if trainer is not None else 1,
            rank=trainer.global_rank if trainer is not None else 0,
            seed=seed,
            weights=self.train_set["weight"] if self.weighted_sampling else None,
        )
        self._train_loader = ResumableDataLoader(
            self.train_set,
            batch_size=self.batch_size,
            sampler=sampler,
            num_workers=self.num_workers,
            collate_fn=self._collate_packed if self.packing else self._collate,
        )
        if self._loader_state is not None:
            self._train_loader.load_state_dict(self._loader_state)
            self._loader_state = None
        return self._train_loader

    def state_dict(self) -> dict[str, Any]:
        """The training loader's place in its epoch; Lightning stores it in every checkpoint.

        Lightning also saves a stateful loader's state itself, but restores it only if the loader
        is created after the checkpoint is loaded, and `configure_optimizers` (the schedule's
        length) creates it before: this hook is restored early enough in every case.
        """
        return {"train_loader": self._train_loader.state_dict()} if self._train_loader is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Hand a checkpoint's loader position to the training loader (now, or when it is created)."""
        state = state_dict.get("train_loader")
        if state is None:
            return
        if self._train_loader is not None:
            self._train_loader.load_state_dict(state)
        else:
            self._loader_state = state

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
