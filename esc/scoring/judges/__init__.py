"""The built-in judges: each module registers its class with `esc.scoring.judge.REGISTRY`, which
imports every module of this package before its first lookup (a new module needs no import line);
`build_judge` builds one from its config node.

* ``local`` (:mod:`.local`): a transformers model, optionally with LoRA adapters (ESC-RANK), scored
  from its next-token distribution over the answers 0-4;
* ``api`` (:mod:`.api`): any chat backend of `esc.chat` (an OpenAI-compatible endpoint: GPT-4, a
  vLLM server), scored from returned log-probabilities where there are some, else parsed strictly.

A judge node's type is `JudgeNode`: its `kind` picks the registered class, whose own settings model
(`Settings`, an `esc.scoring.judge.JudgeSettings`) validates the rest (its backend node by that
backend's model in turn), so a job's validation returns the instance `build_judge` builds from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from esc.config_rules import Section
from esc.scoring.judge import REGISTRY, Judge, JudgeSettings
from esc.settings.plugins import load_plugin, node_model, plugin

__all__ = ["JudgeNode", "build_judge", "judge_config", "judge_kinds", "judge_settings"]

JudgeNode = plugin(lambda: REGISTRY, "judge", hint="add one with +judge@KEY=OPTION")
"""The type of a judge node: validated by the settings model of the class its `kind` names."""


def build_judge(settings: JudgeSettings, key: str = "judge") -> Judge:
    """The judge of a validated `conf/judge/*.yaml` node (what `esc.config_schema.validate`
    returned, or `judge_settings`). `key` names the node in errors (`jury.members.NAME`)."""
    if not isinstance(settings, JudgeSettings):
        raise TypeError(f"build_judge takes a judge's settings, not {type(settings).__name__}")
    judge = REGISTRY[settings.kind](settings, config_key=key)
    judge.config_key = key
    return judge


def judge_settings(node: Mapping[str, Any], key: str = "judge") -> JudgeSettings:
    """A judge node made in code (ESC-RANK's evaluation, a test's) validated as a config node would
    be: its class's settings, or a ConfigError naming the dotted key below `key`."""
    return load_plugin(key, JudgeNode, node)  # type: ignore[return-value]


def judge_kinds() -> list[str]:
    """Every `kind:` a judge config may name (the built-in judges and any registered since)."""
    return sorted(REGISTRY)


def judge_config(when: Callable[[Any], bool] | None = None) -> tuple[Section, ...]:
    """The section of a `judge:` node, where `when` holds (the modes that judge)."""
    return (Section("judge", node_model(JudgeNode), when),)
