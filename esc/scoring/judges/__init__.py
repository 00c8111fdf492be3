"""The built-in judges: each module registers its class with `esc.scoring.judge.REGISTRY`, which
imports every module of this package before its first lookup (a new module needs no import line);
`build_judge` builds one from its config.

* ``local`` (:mod:`.local`): a transformers model, optionally with LoRA adapters (ESC-RANK), scored
  from its next-token distribution over the answers 0-4;
* ``api`` (:mod:`.api`): any chat backend of `esc.chat` (an OpenAI-compatible endpoint: GPT-4, a
  vLLM server), scored from returned log-probabilities where there are some, else parsed strictly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import Field

from esc.chat.build import Backend
from esc.config_rules import Device, ExistingDir, FileName, Plugin, Section, Settings, registered
from esc.errors import ConfigError
from esc.scoring.judge import REGISTRY, Judge

__all__ = ["build_judge", "judge_config", "judge_kinds"]


def build_judge(cfg: Mapping[str, Any], key: str = "judge") -> Judge:
    """The judge a `conf/judge/*.yaml` node describes: `kind` picks the class, the rest are arguments.
    `key` names the node in errors (`jury.members.NAME` for a jury's judge)."""
    cfg = {k: v for k, v in dict(cfg).items() if k not in ("notes", "display_name")}
    kind = cfg.pop("kind", None)
    if kind not in REGISTRY:
        raise ConfigError(f"{key}.kind", f"unknown judge {kind!r}; known: {sorted(REGISTRY)}")
    try:
        judge = REGISTRY[kind](**cfg)
    except TypeError as err:
        raise ConfigError(key, f"{kind} judge: {err}") from None
    judge.config_key = key
    return judge


def judge_kinds() -> list[str]:
    """Every `kind:` a judge config may name (the built-in judges and any registered since)."""
    return sorted(REGISTRY)


class Adapters(Settings):
    """A local judge's `adapters:` (ESC-RANK's per-dimension LoRA adapters)."""

    layout: str = Field(None)
    root: ExistingDir | None = Field(None)
    dimensions: Any = Field(None)


class JudgeSettings(Plugin):
    """A `judge:` node (conf/judge/): `kind` one the registry knows, its keys the arguments of that
    judge's class (and `notes`, `display_name`, which it drops); these keys are checked where given."""

    kind: Annotated[str, registered(judge_kinds)]
    registry = staticmethod(lambda: REGISTRY)
    beside = ("notes", "display_name")
    name: FileName = Field(description="it names the score files")
    device: Device = Field(None, description="auto: a CUDA GPU when there is one")
    batch_size: int = Field(None, ge=1)
    max_new_tokens: int = Field(None, ge=1)
    min_answer_mass: float = Field(None, ge=0, le=1)
    adapters: Adapters | None = Field(None)
    backend: Backend = Field(None)


def judge_config(when: Callable[[Any], bool] | None = None) -> tuple[Section, ...]:
    """The section of a `judge:` node, where `when` holds (the modes that judge)."""
    return (Section("judge", JudgeSettings, when),)
