"""Lightning callbacks that tests inject into `train.py` with `+callbacks.NAME._target_=...`.

`BatchRecorder` appends one JSON line per training batch (rank, step, a digest of every row) and
flushes it, so a killed run's record survives; `KillAt` SIGKILLs its own process at a given step:
a crash at a known point, without timing races.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytorch_lightning as pl


def row_digests(input_ids: Any, attention_mask: Any) -> list[str]:
    """A short digest of each row's real (unpadded) tokens: the identity of the sample it holds."""
    digests = []
    for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
        tokens = [t for t, m in zip(ids, mask, strict=True) if m]
        digests.append(hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:12])
    return digests


class BatchRecorder(pl.Callback):
    """Append {rank, step, batch_idx, rows} for every trained batch to `path` (rank N: `path.rankN`).

    A batch is recorded once its training step has run (at batch end), under the optimizer step it
    started at, so a batch fetched by a run that was then killed is not in the record.
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._current: dict[str, Any] | None = None

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        rows = row_digests(batch["input_ids"], batch["attention_mask"]) if "attention_mask" in batch else []
        self._current = {"rank": trainer.global_rank, "step": trainer.global_step, "batch_idx": batch_idx}
        self._current["rows"] = rows

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        path = self.path if trainer.global_rank == 0 else Path(f"{self.path}.rank{trainer.global_rank}")
        with path.open("a") as fh:
            fh.write(json.dumps(self._current) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


class KillAt(pl.Callback):
    """SIGKILL this process when training reaches `step` (before that step's batch is trained).

    With `once` (a file path), only the first run that gets there is killed: the file marks it, so
    the very same command line, run again, resumes and finishes. The run it kills is a process of its
    own (`run_entry(..., process=True)`): in the test's process it would kill pytest.
    """

    def __init__(self, step: int, once: str | None = None) -> None:
        self.step = step
        self.once = Path(once) if once else None

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step == self.step:
            if self.once is not None:
                if self.once.exists():
                    return
                self.once.write_text(str(self.step))
            os.kill(os.getpid(), signal.SIGKILL)


def kill_once_at(step: int, marker: Path) -> list[str]:
    """train.py overrides adding `KillAt(step, once=marker)`: the first run is killed at `step`, the
    same command run again resumes."""
    return [
        "+callbacks.kill._target_=tests.train_probes.KillAt",
        f"+callbacks.kill.step={step}",
        f"+callbacks.kill.once={marker}",
    ]


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records a `BatchRecorder` wrote, in order."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class BaseWeightProbe(pl.Callback):
    """Write to `path` how far the trained model's input embeddings are from the model files.

    0 (up to the dtype's rounding) means the pretrained weights were loaded; under ZeRO-3 a model
    built partitioned but never filled from its files would differ. The embeddings are gathered
    first when DeepSpeed ZeRO-3 holds only a shard of them.
    """

    def __init__(self, path: str, weights: str) -> None:
        self.path = Path(path)
        self.weights = weights

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        import contextlib

        from safetensors.torch import load_file

        reference = load_file(self.weights)["model.embed_tokens.weight"].float()
        embeddings = pl_module.model.get_input_embeddings().weight
        gather: Any = contextlib.nullcontext()
        if hasattr(embeddings, "ds_id"):
            import deepspeed

            gather = deepspeed.zero.GatheredParameters([embeddings])
        with gather:
            diff = (embeddings.detach().float().cpu() - reference).abs().max().item()
        if trainer.is_global_zero:
            self.path.write_text(json.dumps({"max_abs_diff": diff, "dtype": str(embeddings.dtype)}))
