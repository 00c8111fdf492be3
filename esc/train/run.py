"""The training job behind `train.py`: compose pieces from the config, fit, export the adapter."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from lightning_fabric.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf, open_dict
from pydantic import Field, model_validator

from esc.cards.schema import LANGUAGES
from esc.config_rules import OpenSettings, Section, check, relation, show
from esc.errors import ConfigError, UserError
from esc.esc_role_samples.mixture import MixtureSettings, build_samples
from esc.lifecycle import Job, JobResult, job_run
from esc.models.loading import MODEL_CONFIG, QuantizationSettings, TopModelSettings, load_tokenizer
from esc.settings.types import ExistingFile, NonEmpty, Target, is_int, path_problem
from esc.train.adapter import save_adapter
from esc.train.checkpoint_io import FolderCheckpointIO
from esc.train.heldout import HELDOUT_SOURCES, HeldOutEvaluation
from esc.train.loggers import build_loggers
from esc.train.progress import build_progress_bar
from esc.train.strategies import build_strategy

log = logging.getLogger(__name__)

GPU_ONLY_STRATEGY = ("DeepSpeed", "FSDP")  # DDP runs on CPUs too (gloo), unless it asks for nccl


@dataclasses.dataclass
class TrainResult(JobResult):
    """A trained adapter: where it is, the step it reached, the last metrics and the held-out loss
    (what a sweep of `+exp=train/esc_role_lr_optuna` minimises)."""

    adapter_dir: str = ""
    global_step: int = 0
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    heldout: dict[str, Any] | None = None

    def summary(self) -> str:
        lines = []
        if self.heldout:
            h = self.heldout
            lines.append(
                f"Held-out loss ({h['source']}, {h['dialogues']} dialogues, {h['tokens']:,} role-player "
                f"tokens): {h['before']:.4f} -> {h['after']:.4f} ({h['change']:+.4f})"
            )
        lines.append(f"Adapter saved to {self.adapter_dir} (step {self.global_step})")
        return "\n".join(lines)

    def objective(self) -> float | None:
        return float(self.heldout["after"]) if self.heldout else None


def adapt_to_hardware(cfg: DictConfig) -> list[str]:
    """On a machine without CUDA, swap GPU-only settings for CPU ones when `cpu_fallback` allows it.

    GPU recipes (`+exp=train/esc_role`) set `cpu_fallback: false`: there, a machine without a working
    CUDA GPU is a one-line ConfigError naming what needs the GPU and how to run on a CPU, instead
    of a 14B model quietly training on CPU. With `cpu_fallback=true` (`+exp=train/esc_role model=tiny
    cpu_fallback=true`), each setting is swapped, logged and listed in the manifest.
    """
    if torch.cuda.is_available():
        return []
    swaps: list[tuple[str, Callable[[], None]]] = []
    # a strategy without `_target_` is one Lightning knows by name (auto); DDP without
    # `process_group_backend` lets Lightning pick gloo on CPUs (conf/strategy/ddp.yaml)
    target = str(cfg.strategy["_target_"]) if "_target_" in cfg.strategy else ""
    nccl = cfg.strategy.get("process_group_backend") == "nccl"
    gpu_only = any(name.lower() in target.lower() for name in GPU_ONLY_STRATEGY)
    if gpu_only or ("ddp" in target.lower() and nccl):

        def strategy_auto() -> None:
            with open_dict(cfg):
                cfg.strategy = {"name": "auto"}

        swaps.append((f"strategy {target.rsplit('.', 1)[-1]} -> auto", strategy_auto))
    accelerator = str(cfg.trainer.accelerator)
    if accelerator in ("gpu", "cuda"):
        swaps.append(
            (
                f"trainer.accelerator {accelerator} -> auto",
                lambda: setattr(cfg.trainer, "accelerator", "auto"),
            )
        )
    precision = str(cfg.trainer.precision)
    if precision.startswith(("bf16", "16")):
        swaps.append(
            (
                f"trainer.precision {precision} -> 32-true",
                lambda: setattr(cfg.trainer, "precision", "32-true"),
            )
        )
    if str(cfg.module.optimizer._target_).startswith("deepspeed."):
        swaps.append(
            (
                "optimizer DeepSpeed -> torch.optim.AdamW",
                lambda: setattr(cfg.module.optimizer, "_target_", "torch.optim.AdamW"),
            )
        )
    if swaps and not cfg.cpu_fallback:
        raise ConfigError(
            "cpu_fallback",
            "is false and there is no CUDA GPU here for "
            + ", ".join(change.split(" -> ")[0] for change, _ in swaps)
            + "; to run on a CPU add `cpu_fallback=true` with a small model "
            "(`model=tiny cpu_fallback=true`), or use a CPU recipe (`+exp=train/esc_role_smollm2`)",
        )
    changes = []
    for change, swap in swaps:
        swap()
        changes.append(f"{change} (no CUDA GPU)")
        log.warning("No CUDA GPU: %s (cpu_fallback=true).", change)
    return changes


def function_name(target: str | None) -> str | None:
    """A `_target_` as a fingerprint records it: the function's name, not the module it lives in,
    so that moving code (issue 51 moved several packages) never stops a folder from resuming."""
    return target.rsplit(".", 1)[-1] if target else target


def output_settings(cfg: DictConfig) -> dict[str, Any]:
    """What shapes a training folder's adapter and checkpoints (OUT/settings.json): a rerun must
    match it to resume. Not in it: how long to train (max_steps, max_epochs), logging, devices."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    data, datamodule, trainer = plain["data"], plain["datamodule"], plain["trainer"]
    return {
        # the job and the sample builder by their function's name: where their code lives does
        # not shape the adapter
        "runner": function_name(plain["job"]["_target_"]),
        "model": plain["model"],
        "data": {**data, "builder": function_name(data["builder"]["_target_"])},
        **{node: plain[node] for node in ("peft", "quantization", "optimizer", "scheduler")},
        "module": {"warmup_ratio": plain["module"]["warmup_ratio"]},
        "datamodule": {k: datamodule[k] for k in ("batch_size", "max_length", "packing")},
        "trainer": {k: trainer[k] for k in ("accumulate_grad_batches", "precision", "gradient_clip_val")},
        "rank": plain.get("rank"),  # ESC-RANK's section; null in ESC-Role's runs
        "seed": plain["seed"],
    }


def train(cfg: DictConfig, checked: Mapping[Any, Any]) -> TrainResult:
    """Fit a LoRA adapter as configured; return where the outputs are. `checked`: the sections
    `esc.config_schema.validate` returned (the run's seed and resume are read from `TrainTop`).

    The output folder is locked for this run (rank zero holds the lock and writes the manifest;
    every rank of a multi-GPU job runs this function, the others only check) and must not hold the
    outputs of other settings (`esc.rundir`)."""
    out, top = Path(cfg.output_dir), checked[TrainTop]
    fallbacks = adapt_to_hardware(cfg)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    rank_zero = rank_zero_only.rank == 0
    with job_run(out, "train", output_settings(cfg), resolved, seed=top.seed, lock=rank_zero) as job:
        return _train(job, cfg, top, out, fallbacks, resolved)


def _train(
    job: Job, cfg: DictConfig, top: TrainTop, out: Path, fallbacks: list[str], resolved: Any
) -> TrainResult:
    manifest = job.manifest
    manifest.update(hardware_fallbacks=fallbacks)
    pl.seed_everything(top.seed, workers=True)

    log.info("Instantiating tokenizer for model <%s>", cfg.model.name)
    tokenizer = load_tokenizer(TopModelSettings.of(cfg.model))
    log.info("Instantiating datamodule <%s>", cfg.datamodule._target_)
    datamodule = instantiate(cfg.datamodule, tokenizer=tokenizer, _convert_="all")
    log.info("Instantiating module <%s>", cfg.module._target_)
    module = instantiate(cfg.module, _convert_="all")

    # Read (and check) the checkpoint to resume before anything in OUT is touched: a failed resume
    # changes nothing. Metrics of steps after it are trained again, so their rows are replaced.
    ckpt_path = _resume_checkpoint(top.resume, out)
    start_step = checkpoint_step(ckpt_path) if ckpt_path else 0
    # a callback set to null (`callbacks.checkpoint=null`) is left out
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c and "_target_" in c]
    if cfg.trainer.enable_progress_bar:
        callbacks.append(build_progress_bar())
    loggers = build_loggers(cfg.get("logger"), resolved, start_step=start_step)
    trainer_kwargs: dict[str, Any] = {
        "callbacks": callbacks,
        "logger": loggers or False,
        "strategy": build_strategy(cfg.strategy),
        "plugins": [FolderCheckpointIO()],  # last.ckpt replaced in one step; a full disk keeps the old one
    }
    if cfg.module.quantization.load_in_4bit and cfg.trainer.num_sanity_val_steps:
        # bitsandbytes repacks 4-bit weights for CPU inference on the first no-grad forward, which
        # breaks the next training step: no sanity validation before training in QLoRA mode.
        log.warning("QLoRA: skipping sanity validation before training (trainer.num_sanity_val_steps=0)")
        trainer_kwargs["num_sanity_val_steps"] = 0
    trainer: pl.Trainer = instantiate(cfg.trainer, **trainer_kwargs)

    manifest.update(resumed_from=str(ckpt_path) if ckpt_path else None)
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    total = sum(p.numel() for p in module.parameters())
    if total:  # a module that builds its model in `configure_model` has none yet
        share = 100 * trainable / total
        log.info("Parameters: %s trainable of %s (%.2f%%)", f"{trainable:,}", f"{total:,}", share)
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
        trainer.save_checkpoint(out / "last.ckpt")
        save_adapter(trainer, module, out, tokenizer)
    finally:
        if any(type(logger).__name__ == "WandbLogger" for logger in loggers):
            import wandb

            wandb.finish()
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    heldout = next((c.result for c in callbacks if isinstance(c, HeldOutEvaluation)), None)
    result = TrainResult(str(out), str(out), trainer.global_step, metrics, heldout)
    return job.complete(
        result,
        global_step=trainer.global_step,
        final_metrics=metrics,
        adapter_dir=str(out),
        metrics_csv=str(out / "metrics.csv"),
        heldout=heldout,
    )


def _resume_checkpoint(mode: Any, out: Path) -> str | None:
    """`resume=auto` continues from the newest checkpoint in OUT, if any (a rerun after a kill).

    Candidates are `last.ckpt` (every N steps) and `hpc_ckpt_*.ckpt`, which Lightning writes when
    SLURM signals the end of a job's time; whichever was written last wins. An explicit path
    (`TrainTop.resume` checked that it exists) is that checkpoint.
    """
    if mode in (False, "never", None):
        return None
    if mode != "auto":  # an explicit checkpoint path
        return str(mode)
    candidates = [p for p in [out / "last.ckpt", *out.glob("hpc_ckpt_*.ckpt")] if p.exists()]
    if not candidates:
        return None
    newest = max(candidates, key=lambda p: p.stat().st_mtime)
    log.info("Resuming from %s", newest)
    return str(newest)


def checkpoint_step(path: str | Path) -> int:
    """The optimizer step a checkpoint was written at, read before anything in OUT is touched.

    A checkpoint that cannot be read (cut short by a kill while being written, not a checkpoint)
    is a one-line UserError. DeepSpeed writes a folder; Lightning's state is in its model-states file.
    """
    path = Path(path)
    source = path
    if path.is_dir():
        found = sorted(path.glob("*/mp_rank_00_model_states.pt")) or sorted(path.glob("*/*model_states.pt"))
        if not found:
            raise UserError(
                f"resume: {path} is a folder without DeepSpeed model states; move it away or set resume=never"
            )
        source = found[0]
    try:
        # mmap: the tensors are not read (Lightning loads the checkpoint again to resume from it)
        return int(torch.load(source, map_location="cpu", weights_only=False, mmap=True)["global_step"])
    except Exception as err:  # a truncated zip, a pickle error, a missing key: all mean unusable
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise UserError(
            f"resume: cannot read checkpoint {path} ({type(err).__name__}: {reason}); nothing was changed: "
            "move it away to start over, or set resume=never"
        ) from None


RESUME_MODES = ("auto", "never")  # `resume:`, or a checkpoint path


def _precision(value: Any) -> str | None:
    """A precision Lightning's Trainer accepts (`32-true`, `bf16-mixed`, `16-mixed`, 32, ...)."""
    from lightning_fabric.plugins.precision.precision import _PRECISION_INPUT

    allowed = [c for part in get_args(_PRECISION_INPUT) for c in get_args(part)]
    if any(type(value) is type(c) and value == c for c in allowed):
        return None
    shown = ", ".join(str(c) for c in allowed if isinstance(c, str) and "-" in c)
    return f"must be one of {shown} (or 64, 32, 16, bf16), got {show(value)}"


def _interval(value: Any) -> str | None:
    """Lightning's `val_check_interval`: null, batches, a fraction of an epoch, or DD:HH:MM:SS."""
    parts = value.split(":") if isinstance(value, str) else []
    is_time = len(parts) == 4 and all(p.strip().isdigit() for p in parts)
    batches = is_int(value) and value >= 1
    fraction = isinstance(value, float) and 0 < value <= 1
    if value is None or is_time or batches or fraction:
        return None
    return f"must be null, an integer >= 1, a number > 0 and <= 1 or a time DD:HH:MM:SS, got {show(value)}"


def _resume(value: Any) -> str | None:
    if value in (None, False) or value in RESUME_MODES:
        return None
    return path_problem("any")(value)


# Nodes that Hydra instantiates or hands to a library (trainer, optimizer, model, callbacks) are
# open: the keys named here are checked where an experiment gives them, the library refuses the rest.
# The keys this module reads itself are required (conf/ gives them; no value is assumed here).


class TargetNode(OpenSettings):
    target_: Target = Field(
        alias="_target_", description="the function train.py calls with the config and its sections"
    )


class TrainTop(OpenSettings):
    seed: int
    resume: Annotated[Any, check(_resume)] = Field(
        None, description="auto, never, or an existing checkpoint path"
    )
    cpu_fallback: bool = Field(None)
    job: TargetNode  # read by output_settings


class TrainModel(OpenSettings):
    max_length: int = Field(None, ge=1)


class Peft(OpenSettings):
    r: int = Field(None, ge=1, description="the LoRA rank")
    lora_alpha: float = Field(None, gt=0)
    lora_dropout: float = Field(None, ge=0, lt=1)


class DataModule(OpenSettings):
    batch_size: int = Field(None, ge=1)
    eval_batch_size: int = Field(None, ge=1)
    num_workers: int = Field(None, ge=0)
    num_proc: int | None = Field(None, ge=1)
    weighted_sampling: bool = Field(None)


class Module(OpenSettings):
    warmup_ratio: float = Field(None, ge=0, le=1)
    weighted_loss: bool = Field(None)


class Optimizer(OpenSettings):
    lr: float = Field(None, gt=0)


class Trainer(OpenSettings):
    max_steps: int = Field(None, ge=-1, description="-1: train for trainer.max_epochs")
    max_epochs: int | None = Field(None, ge=-1)
    accumulate_grad_batches: int = Field(None, ge=1)
    num_nodes: int = Field(None, ge=1)
    log_every_n_steps: int = Field(None, ge=1)
    num_sanity_val_steps: int = Field(ge=-1)  # read by _train (QLoRA skips it)
    limit_val_batches: float = Field(None, ge=0)
    gradient_clip_val: float | None = Field(None, ge=0)
    # read by adapt_to_hardware and _train:
    accelerator: str = Field(description="auto, cpu, gpu, ...: Lightning's Trainer accelerator")
    precision: Annotated[Any, check(_precision)] = Field(description="bf16-mixed on GPUs, 32-true on CPUs")
    enable_progress_bar: bool
    val_check_interval: Annotated[Any, check(_interval)] = Field(
        None, description="null: at each epoch's end; N: every N training batches; 0.25: four times an epoch"
    )


class Checkpoint(OpenSettings):
    every_n_train_steps: int | None = Field(None, ge=0)


class HeldOut(OpenSettings):
    """`callbacks.heldout` (+exp=train/esc_role_heldout): the held-out loss before and after."""

    source: Literal[tuple(HELDOUT_SOURCES)] = Field(None, description="ESConv's own valid or test file")  # type: ignore[valid-type]
    dialogues: int = Field(None, ge=1)
    batch_size: int = Field(None, ge=1)


class Callbacks(OpenSettings):
    checkpoint: Checkpoint = Field(None)
    heldout: HeldOut = Field(None)


class Smile(OpenSettings):
    cards: ExistingFile | None = Field(None, description="a JSON-lines card file; null: none")


class RoleplaySource(OpenSettings):
    rolebench_turns: int = Field(None, ge=1, description="question/answer pairs per session")


class Sources(OpenSettings):
    smile: Smile = Field(None)
    roleplay: RoleplaySource = Field(None)


class Strategy(OpenSettings):
    """`strategy` (conf/strategy/): one Lightning knows by `name` (auto), or one built from `_target_`."""

    name: str = Field(None)

    @model_validator(mode="after")
    def _named_or_built(self) -> Strategy:
        if not self.name and "_target_" not in (self.model_extra or {}):
            raise relation("name", "is not set: name a Lightning strategy (auto) or give a _target_")
        return self


class BuilderNode(OpenSettings):
    target_: Target = Field(alias="_target_", description="a function returning (train, val) samples")


class Data(OpenSettings):
    builder: BuilderNode = Field(None)
    languages: NonEmpty[Literal[LANGUAGES]] = Field(None)  # type: ignore[valid-type]
    roleplay_ratio: float = Field(None, ge=0)
    hold_out_card_echo: bool = Field(None)
    sources: Sources = Field(None)
    val_fraction: float = Field(None, ge=0, lt=1)


class EscRoleData(MixtureSettings):
    """`data` of ESC-Role's training (conf/data/esc_role.yaml): its builder, `build_samples`, reads
    the rest of the node, checked whole here before any work."""

    builder: BuilderNode


def _esc_role_data(cfg: Any) -> bool:
    return OmegaConf.select(cfg, "data.builder._target_") == f"{build_samples.__module__}.build_samples"


#: what train.py reads of its config (`esc.config_schema.validate`; ESC-RANK adds
#: `esc.judge_training.run.CONFIG`)
CONFIG: tuple[Section, ...] = (
    Section("", TrainTop),
    Section("model", TrainModel, optional=True),
    MODEL_CONFIG,
    Section("peft", Peft, optional=True),
    Section("datamodule", DataModule, optional=True),
    Section("module", Module, optional=True),
    Section("optimizer", Optimizer, optional=True),
    Section("trainer", Trainer, optional=True),
    Section("callbacks", Callbacks),  # read whole by _train (conf/callbacks/default.yaml)
    Section("data", Data, optional=True),
    Section("data", EscRoleData, when=_esc_role_data),
    Section("quantization", QuantizationSettings, optional=True),  # bitsandbytes' (esc.models.loading)
    # nodes handed whole to Lightning, the scheduler and the sweep's table (issue 62:
    # a top-level key no section names is refused as a typo)
    Section("logger", OpenSettings, optional=True),
    Section("scheduler", OpenSettings, optional=True),
    Section("strategy", Strategy, optional=True),
    Section("variant", OpenSettings, optional=True),
)
