"""The built-in judges: each module registers its class with `esc.scoring.judge.REGISTRY`, which
imports every module of this package before its first lookup (a new module needs no import line);
`build_judge` builds one from its config.

* ``local`` (:mod:`.local`): a transformers model, optionally with LoRA adapters (ESC-RANK), scored
  from its next-token distribution over the answers 0-4;
* ``api`` (:mod:`.api`): any chat backend of `esc.chat` (an OpenAI-compatible endpoint: GPT-4, a
  vLLM server), scored from returned log-probabilities where there are some, else parsed strictly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from esc.chat.build import backend_config
from esc.config_rules import (
    Rule,
    Section,
    device,
    file_name,
    integer,
    keys,
    number,
    path,
    registered,
    registry_keys,
)
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


def judge_config(when: Callable[[Any], bool] | None = None) -> tuple[Section, ...]:
    """The schema of a `judge:` node (conf/judge/): its `kind` one the registry knows, its keys the
    arguments of that judge's class (and `notes`, `display_name`, which it drops)."""
    return (
        Section(
            "judge",
            (
                Rule("kind", registered(judge_kinds)),
                Rule("name", file_name(), "it names the score files"),
                Rule("device", device(), "auto: a CUDA GPU when there is one"),
                Rule("batch_size", integer(1)),
                Rule("max_new_tokens", integer(1)),
                Rule("min_answer_mass", number(minimum=0, maximum=1)),
            ),
            registry_keys(lambda: REGISTRY, "notes", "display_name"),
            when,
        ),
        Section(
            "judge.adapters",
            (Rule("root", path("dir", null=True)),),
            keys("layout", "root", "dimensions"),
            when,
        ),
        dataclasses.replace(backend_config("judge.backend"), when=when),
    )
