"""LightningModule: a causal LM with a PEFT LoRA adapter, optionally on a 4-bit (QLoRA) base."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import pytorch_lightning as pl
import torch

from esc.errors import ConfigError, UserError
from esc.models.loading import ModelSettings, QuantizationSettings, is_zero3, load_causal_lm
from esc.train.rng import CHECKPOINT_KEY, TrainingRandomness, gather_states, states_for_rank

log = logging.getLogger(__name__)

# Attention implementations that keep packed samples apart when given restarting position_ids and
# no attention mask (transformers' masking_utils and flash-attention's varlen path).
PACKING_ATTENTION = ("eager", "sdpa", "flex_attention", "flash_attention_2", "flash_attention_3")


def check_packing_support(model: torch.nn.Module) -> None:
    """A ConfigError naming `datamodule.packing` where packed samples would attend to each other.

    transformers' own model classes build their masks with `masking_utils.create_causal_mask`,
    which turns restarting position_ids into one causal block per sample (eager, sdpa, flex) or
    passes them to flash-attention's varlen kernel. Models run by their own remote code
    (`trust_remote_code`, e.g. InternLM2) build a single causal mask over the whole row.
    """
    module = type(model).__module__
    attention = getattr(model.config, "_attn_implementation", None)
    if not module.startswith("transformers.models."):
        reason = (
            f"{type(model).__name__} runs its own code ({module}), not known to keep packed samples apart"
        )
    elif attention not in PACKING_ATTENTION:
        reason = f"attention implementation {attention!r} is not known to keep packed samples apart"
    else:
        return
    raise ConfigError("datamodule.packing", f"{reason}; set datamodule.packing=false")


class LoRACausalLM(pl.LightningModule):
    """Fine-tunes a LoRA adapter on top of a frozen causal LM.

    The model is built in ``configure_model`` so that strategies which shard parameters
    (DeepSpeed ZeRO-3, FSDP) can build it inside their context. Checkpoints hold only the
    trainable (adapter) weights: a 14B base model is never copied into ``last.ckpt``, and every
    rank's random states (`esc.train.rng`), so that a resumed run draws the same dropout masks.
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
        weighted_loss: bool = False,
    ) -> None:
        super().__init__()
        self.model_cfg = dict(model)
        self.peft_cfg = dict(peft)
        self.quant_cfg = dict(quantization or {})
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.warmup_ratio = warmup_ratio
        self.gradient_checkpointing = gradient_checkpointing
        self.weighted_loss = weighted_loss
        self.model: torch.nn.Module | None = None
        self.strict_loading = False  # checkpoints carry the adapter only
        self.randomness = TrainingRandomness()

    def configure_model(self) -> None:
        if self.model is not None:
            return
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

        zero3 = self._zero3_config()
        model, quant = ModelSettings.of(self.model_cfg), QuantizationSettings.of(self.quant_cfg or None)
        base = load_causal_lm(model, quant, deepspeed_config=zero3)
        base.config.use_cache = False
        if self._packing():
            check_packing_support(base)
        checkpointing = {"use_reentrant": False}
        if self.quant_cfg.get("load_in_4bit") and zero3 is None:
            base = prepare_model_for_kbit_training(
                base,
                use_gradient_checkpointing=self.gradient_checkpointing,
                gradient_checkpointing_kwargs=checkpointing,
            )
        elif self.gradient_checkpointing:
            # QLoRA under ZeRO-3 skips prepare_model_for_kbit_training: it casts the unquantized
            # weights to fp32, and ZeRO-3 shards one dtype (the 4-bit storage's, bf16)
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpointing)
            if self.quant_cfg.get("load_in_4bit"):
                base.enable_input_require_grads()
        lora = LoraConfig(task_type="CAUSAL_LM", **self._lora_kwargs())
        self.model = get_peft_model(base, lora)
        trainable, total = self.model.get_nb_trainable_parameters()
        log.info(
            "LoRA adapter: %s trainable of %s parameters (%.3f%%)",
            f"{trainable:,}",
            f"{total:,}",
            100 * trainable / max(total, 1),
        )

    def _zero3_config(self) -> dict[str, Any] | None:
        """The DeepSpeed config when this module is trained under ZeRO-3, else None."""
        strategy = getattr(self._trainer, "strategy", None)
        config = getattr(strategy, "config", None)
        return config if isinstance(config, dict) and is_zero3(config) else None

    def _packing(self) -> bool:
        """Whether the trainer's datamodule packs several samples into one sequence."""
        datamodule = getattr(self._trainer, "datamodule", None)
        return bool(getattr(datamodule, "packing", False))

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
        if "position_ids" in batch:
            # packed (esc.esc_role_samples.tokenize.collate_packed): positions restart at every sample,
            # and with no attention mask and no cache transformers keeps the samples apart
            packed = {k: batch[k] for k in ("input_ids", "position_ids", "labels")}
            return self(**packed, use_cache=False).loss
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "labels")}
        return self(**inputs).loss

    def _weighted_step(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Each sample's mean token loss times its weight, over the batch's total weight."""
        logits = self(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        labels = batch["labels"][:, 1:]
        losses = torch.nn.functional.cross_entropy(
            logits[:, :-1].float().transpose(1, 2), labels, ignore_index=-100, reduction="none"
        )
        counted = (labels != -100).float()
        per_sample = (losses * counted).sum(-1) / counted.sum(-1).clamp(min=1)
        weight = batch["weight"].to(per_sample.device) * (counted.sum(-1) > 0)
        return (per_sample * weight).sum() / weight.sum().clamp(min=1e-8)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.randomness.step_starts()  # the last hook before the step draws (callbacks' hooks run first)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.randomness.step_ends()

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.weighted_loss and "weight" not in batch:
            raise ConfigError("module.weighted_loss", "the training samples carry no weight")
        loss = self._weighted_step(batch) if self.weighted_loss else self._step(batch)
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

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse a checkpoint of another adapter shape; take this rank's random states from it."""
        self._check_adapter_shape(checkpoint)
        trainer = self._trainer
        rank, world_size = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        self.randomness.resume(states_for_rank(checkpoint.get(CHECKPOINT_KEY), rank, world_size))

    def _check_adapter_shape(self, checkpoint: dict[str, Any]) -> None:
        """A one-line UserError, before anything is loaded, for a checkpoint of another adapter shape."""
        strategy = type(getattr(self._trainer, "strategy", None)).__name__
        if "FSDP" in strategy or "DeepSpeed" in strategy:  # sharded names and shapes: their own checks
            return
        saved = checkpoint.get("state_dict") or {}
        current = {name: p for name, p in self.named_parameters() if p.requires_grad}
        if not saved or not current:
            return
        for name, tensor in saved.items():
            param = current.get(name)
            if param is None:
                problem = f"it holds {name}, which this model's adapter does not have"
            elif param.shape != tensor.shape:
                problem = f"{name} is {tuple(tensor.shape)} there but {tuple(param.shape)} here"
            else:
                continue
            raise UserError(
                f"resume: the checkpoint was written for another adapter shape ({problem}: was peft.r, "
                "peft.target_modules or the model changed?); nothing was changed: rerun with its "
                "settings, use another output folder, or set resume=never"
            )
        missing = sorted(set(current) - set(saved))
        if missing:
            raise UserError(
                f"resume: the checkpoint has no {missing[0]} (and {len(missing) - 1} more adapter weights): "
                "was peft.target_modules or the model changed?; nothing was changed: rerun with its "
                "settings, use another output folder, or set resume=never"
            )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the adapter weights only; add every rank's random states (a collective: all ranks save)."""
        checkpoint[CHECKPOINT_KEY] = gather_states(self.randomness.current())
        trainable = {name for name, p in self.named_parameters() if p.requires_grad}
        state = checkpoint.get("state_dict")
        if state is not None:
            checkpoint["state_dict"] = {k: v for k, v in state.items() if k in trainable}
