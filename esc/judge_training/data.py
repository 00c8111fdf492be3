"""ESC-RANK training samples: a judge prompt for one (dialogue, dimension), answered with the
human score. The `data` group's builder for `train.py +exp=train/esc_rank` (conf/data/esc_rank.yaml).

The split is the paper's 7:1:2 by dialogue (`annotations.split_by_dialogue`): train and val feed
training; test is held out for the agreement report after training.

A sample is exactly what the judge will read: the prompt style's chat for the dimension, with the
judge model's chat() default system turn where the style has none (`data.chat_default_system`,
from `model.chat_default_system`), answered with the score; only the answer digit is learned
(`Sample.learn_end_of_turn=False`), the token `esc.chat.answer_tokens` reads. Each sample carries
a class weight, count(dimension, score)^-`balance_power` over the training split (mean 1 per
dimension), for balanced sampling or a weighted loss (`rank.balance` in `train.py +exp=train/esc_rank`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from esc.annotate.human_scores import Annotation, splits
from esc.errors import ConfigError
from esc.esc_role_samples.mixture import plain_mapping
from esc.esc_role_samples.sample import Sample
from esc.scoring.rubrics import dialogue_text, prompt_style

log = logging.getLogger(__name__)
ADAPTER_MODES = ("per_dimension", "single")  # rank.adapters: one adapter per dimension, or one for all
BALANCE_MODES = ("sampling", "loss", "none")  # rank.balance: how the class weights are used


def rank_sample(
    ann: Annotation, prompt: str, default_system: str | None = None, weight: float = 1.0
) -> Sample:
    """The judge's chat for `ann` (as `ScoreItem.prompt` renders it) answered with its score."""
    style = prompt_style(prompt)
    messages = style.messages(ann.dimension, dialogue_text(ann.lines), ann.language, default_system)
    messages.append({"role": "assistant", "content": str(ann.score)})
    return Sample(
        f"{ann.dialogue_id}#{ann.dimension}#{ann.annotator}",
        ann.source or "annotations",
        ann.language,
        None,
        messages,
        group=ann.dialogue_id,
        learn_end_of_turn=False,
        weight=weight,
    )


def class_weights(annotations: Sequence[Annotation], power: float) -> dict[tuple[str, int], float]:
    """(dimension, score) -> count^-power, scaled so the weights of each dimension's annotations
    average 1 (power 1: every score of a dimension drawn equally often; 0: all weights 1)."""
    counts = Counter((a.dimension, a.score) for a in annotations)
    raw = {key: n ** -float(power) for key, n in counts.items()}
    weights = {}
    for dim in {d for d, _ in counts}:
        keys = [k for k in counts if k[0] == dim]
        total = sum(counts[k] for k in keys)
        mean = sum(raw[k] * counts[k] for k in keys) / total
        weights.update({k: raw[k] / mean for k in keys})
    return weights


def build_rank_samples(cfg: Any) -> tuple[list[Sample], list[Sample]]:
    """(train, val) samples for the ChatSFTDataModule."""

    cfg = plain_mapping(cfg)
    parts = splits(cfg)
    # conf/data/esc_rank.yaml holds each value (`data.balance_power` checked with the config)
    prompt, system, power = cfg["prompt"], cfg["chat_default_system"], cfg["balance_power"]
    weights = class_weights(parts["train"], power)
    train = [rank_sample(a, prompt, system, weights[(a.dimension, a.score)]) for a in parts["train"]]
    val = [rank_sample(a, prompt, system) for a in parts["val"]]
    if not train:
        raise ConfigError(
            "data.dimensions", "no training annotations for the selected dimensions and languages"
        )
    log.info(
        "ESC-RANK data: %d train, %d val, %d test annotations (held out)",
        len(train),
        len(val),
        len(parts["test"]),
    )
    return train, val
