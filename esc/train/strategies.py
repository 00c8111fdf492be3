"""Distributed strategies from the `strategy` config group, and their DeepSpeed configs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from esc.errors import ConfigError
from esc.train.extensions import clear_stale_build_locks


def build_strategy(strategy_cfg: Mapping[str, Any] | str) -> Any:
    """A `strategy:` node (conf/strategy/): one with `_target_` is built; one without names a
    strategy Lightning knows by its `name` (conf/strategy/auto.yaml: `auto`), as does a plain string."""
    if isinstance(strategy_cfg, str):
        return strategy_cfg
    cfg = (
        OmegaConf.to_container(strategy_cfg, resolve=True)
        if isinstance(strategy_cfg, DictConfig)
        else dict(strategy_cfg)
    )
    name = cfg.pop("name", None)  # only a node without `_target_` needs one (`Strategy` checks it)
    if "_target_" not in cfg:
        return name
    if "DeepSpeed" in cfg["_target_"]:
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                "strategy",
                "Lightning's DeepSpeedStrategy needs CUDA GPUs; use strategy=auto "
                "on CPU (DeepSpeed configs are checked on CPU by tests/test_deepspeed.py)",
            )
        clear_stale_build_locks()  # DeepSpeed JIT-builds ops: an interrupted build's lock waits forever
    # _convert_: nested nodes arrive as plain dicts and lists; Lightning's DeepSpeedStrategy asserts
    # that its `config` is a dict (a DictConfig failed there, found on an H100: docs/gpu.md)
    return instantiate(cfg, _convert_="all")


def deepspeed_config(strategy_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The DeepSpeed JSON config a `strategy=deepspeed_*` entry carries."""
    cfg = (
        OmegaConf.to_container(strategy_cfg, resolve=True)
        if isinstance(strategy_cfg, DictConfig)
        else dict(strategy_cfg)
    )
    if "config" not in cfg:
        raise ConfigError("strategy.config", "this strategy has no DeepSpeed config")
    return dict(cfg["config"])


def fsdp_strategy(layer_class_name: str, **kwargs: Any) -> Any:
    """FSDPStrategy wrapping every module whose class is named ``layer_class_name``.

    Matching by name works for models whose code ships with the weights (InternLM2), where the
    class cannot be imported before the model is loaded.
    """
    import functools

    from pytorch_lightning.strategies import FSDPStrategy
    from torch.distributed.fsdp.wrap import lambda_auto_wrap_policy

    policy = functools.partial(
        lambda_auto_wrap_policy, lambda_fn=lambda module: type(module).__name__ == layer_class_name
    )
    return FSDPStrategy(auto_wrap_policy=policy, **kwargs)
