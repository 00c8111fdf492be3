"""LightningModule: a causal LM with a PEFT LoRA adapter, optionally on a 4-bit (QLoRA) base."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pytorch_lightning as pl
import torch

from esc.models.loading import load_causal_lm

log = logging.getLogger(__name__)


class LoRACausalLM(pl.LightningModule):
    """Fine-tunes a LoRA adapter on top of a frozen causal LM.

    The model is built in ``configure_model`` so that strategies which shard parameters
    (DeepSpeed ZeRO-3, FSDP) can build it inside their context. Checkpoints hold only the
    trainable (adapter) weights: a 14B base model is never copied into ``last.ckpt``.
    """

    def __init__(
        self,
        model: Mapping[str, Any],
        peft: Mapping[str, Any],
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., Any] | None = None,
        warmup_ratio: float = 0.0,
        quantization: Mapping[str, Any] | None = None,
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        self.model_cfg = dict(model)
        self.peft_cfg = dict(peft)
        self.quant_cfg = dict(quantization or {})
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.warmup_ratio = warmup_ratio
        self.gradient_checkpointing = gradient_checkpointing
        self.model: torch.nn.Module | None = None
        self.strict_loading = False  # checkpoints carry the adapter only

    def configure_model(self) -> None:
        if self.model is not None:
            return
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

        base = load_causal_lm(self.model_cfg, self.quant_cfg)
        base.config.use_cache = False
        if self.quant_cfg.get("load_in_4bit"):
            base = prepare_model_for_kbit_training(
                base,
                use_gradient_checkpointing=self.gradient_checkpointing,
                gradient_checkpointing_kwargs={"use_reentrant": False},
            )
        elif self.gradient_checkpointing:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        lora = LoraConfig(task_type="CAUSAL_LM", **self._lora_kwargs())
        self.model = get_peft_model(base, lora)
        trainable, total = self.model.get_nb_trainable_parameters()
        log.info(
            "LoRA adapter: %s trainable of %s parameters (%.3f%%)",
            f"{trainable:,}",
            f"{total:,}",
            100 * trainable / max(total, 1),
        )

    def _lora_kwargs(self) -> dict[str, Any]:
        kwargs = {k: v for k, v in self.peft_cfg.items() if k not in {"_target_"}}
        if not kwargs.get("target_modules"):
            kwargs["target_modules"] = list(self.model_cfg.get("lora_target_modules") or []) or "all-linear"
        else:
            kwargs["target_modules"] = list(kwargs["target_modules"])
        return kwargs

    def forward(self, **batch: torch.Tensor) -> Any:
        assert self.model is not None, "configure_model() has not run"
        return self.model(**batch)

    def _step(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "labels")}
        return self(**inputs).loss

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._step(batch)
        tokens = (batch["labels"] != -100).sum()
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=False)
        self.log("train/target_tokens", tokens.float(), on_step=True, on_epoch=False, reduce_fx="sum")
        return loss

    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._step(batch)
        self.log("val/loss", loss, prog_bar=True, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def configure_optimizers(self) -> Any:
        params = [p for p in self.parameters() if p.requires_grad]
        optimizer = self.optimizer_factory(params=params)
        if self.scheduler_factory is None:
            return optimizer
        total = int(self.trainer.estimated_stepping_batches)
        scheduler = self.scheduler_factory(
            optimizer=optimizer,
            num_warmup_steps=int(self.warmup_ratio * total),
            num_training_steps=total,
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        trainable = {name for name, p in self.named_parameters() if p.requires_grad}
        state = checkpoint.get("state_dict")
        if state is not None:
            checkpoint["state_dict"] = {k: v for k, v in state.items() if k in trainable}
