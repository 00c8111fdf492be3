"""Training checkpoints (`OUT/last.ckpt`) written in one step, inside the run folder.

Lightning's `TorchCheckpointIO` stages a checkpoint in the system's temp folder (fsspec's
transaction), then moves it over `last.ckpt`: a full temp disk is an error that names a temp file, and
a full run folder leaves a `last.ckpt` cut short by the copy, which the next resume cannot read. Here
the checkpoint goes to a temp file beside its destination and is renamed over it once complete
(`esc.jsonl.atomic_write_bytes`): a write that fails names the checkpoint and keeps the previous one.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from pytorch_lightning.plugins import TorchCheckpointIO

from esc.jsonl import atomic_write_bytes


class FolderCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` whose local saves replace the checkpoint file in one step."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        if storage_options is not None or "://" in str(path):  # remote storage: Lightning's own way
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        import torch

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write_bytes(path, buffer.getvalue())
