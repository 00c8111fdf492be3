"""Export the trained PEFT adapter (and tokenizer) in its standard format."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

log = logging.getLogger(__name__)


def save_adapter(
    trainer: pl.Trainer, module: pl.LightningModule, out: str | Path, tokenizer: Any = None
) -> Path:
    """Write ``adapter_config.json`` + ``adapter_model.safetensors`` (+ tokenizer) to ``out``.

    The result loads with ``PeftModel.from_pretrained(base, out)``. Call it on every rank: under
    DeepSpeed ZeRO-3 the sharded adapter weights are gathered first; only rank zero writes.
    """
    out = Path(out)
    model = module.model
    with _gathered(trainer, [p for p in model.parameters() if p.requires_grad]):
        if trainer.is_global_zero:
            out.mkdir(parents=True, exist_ok=True)
            model.save_pretrained(out, safe_serialization=True)
            if tokenizer is not None:
                tokenizer.save_pretrained(out)
            log.info("Saved the LoRA adapter to %s", out)
    trainer.strategy.barrier("save_adapter")
    return out


def _gathered(trainer: pl.Trainer, params: list) -> contextlib.AbstractContextManager:
    """Gather ZeRO-3 partitioned parameters; a no-op for every other strategy."""
    config = getattr(trainer.strategy, "config", None)
    if isinstance(config, dict) and config.get("zero_optimization", {}).get("stage") == 3:
        import deepspeed

        return deepspeed.zero.GatheredParameters(params, modifier_rank=None)
    return contextlib.nullcontext()
