"""Build the ESC-Role training mixture (train, val) from a `data` config section.

Config keys read (the `data` node; conf/data/esc_role.yaml gives every one, with what it does, and
none has a default here: `MixtureSettings` refuses a key left out, naming it):

    root                            # data directory; null: esc.paths.data_dir()
    sources:
      esconv:   {enabled, max_samples, splits}     # max_samples null: all
      smile:    {enabled, max_samples, cards}      # cards null: the first client message is the card
      roleplay: {enabled, rolebench_turns, files}
    roleplay_ratio                  # role-play samples = round(ratio * number of ESC samples); 0 disables
    hold_out_card_echo              # true: seeker turns that recite the card are context, not learned
    languages
    val_fraction
    seed

The paper's mix (section 2.3.1): 3,390 ESC samples in 14K role-play samples, so
(14,000 - 3,390) / 3,390 = 3.13 general role-play samples per ESC sample (`PAPER_ROLEPLAY_RATIO`).
When the role-play pool is smaller than that, all of it is used and the log says so.

Determinism: every choice (max_samples subsets, role-play draw, val split) orders samples by
sha256(f"{seed}:{purpose}:{sample id}"), so the same config yields the same samples and split on
every machine, independent of Python's hash seed and file-system order.

Validation split: per source, dialogues in hash order go to val until it holds
`round(val_fraction * n)` samples. The split is by dialogue (`Sample.split_key`: the sample id,
or the scene for CharacterEval's several examples per scene), so no dialogue is in both splits.
ESConv's own valid/test files are *not* used as the val set: ESC-Role is not evaluated on
held-out ESConv dialogues (humans judge it on ESC-Eval role cards), so by default all three files
are training data and val is a uniform `val_fraction` of every source. Set
`sources.esconv.splits` to `[train, valid]` to hold the ESConv test dialogues out entirely;
`split_hint` keeps each sample's file split.

A source runs only if its `enabled` is true and one of its languages (esconv: en, smile: zh,
roleplay: en and zh) is in `languages`. Role-play is drawn relative to the ESC count, so it needs
at least one ESC source.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf
from pydantic import Field

from esc.config_rules import Settings
from esc.corpora.esconv import SPLITS as ESCONV_SPLITS
from esc.corpora.smile import smile_dir
from esc.errors import ConfigError
from esc.esc_role_samples.esconv import read_esconv_splits
from esc.esc_role_samples.roleplay import read_roleplay
from esc.esc_role_samples.sample import Sample
from esc.esc_role_samples.smile import read_smile
from esc.paths import data_dir
from esc.prompts import LANGUAGES
from esc.settings.plugins import load_node
from esc.settings.types import ExistingFile, NonEmpty

log = logging.getLogger(__name__)

SOURCE_LANGUAGES = {"esconv": ("en",), "smile": ("zh",), "roleplay": ("en", "zh")}
PAPER_ESC_SAMPLES, PAPER_TOTAL_SAMPLES = 3390, 14000  # paper section 2.3.1
PAPER_ROLEPLAY_RATIO = round((PAPER_TOTAL_SAMPLES - PAPER_ESC_SAMPLES) / PAPER_ESC_SAMPLES, 2)  # 3.13


def plain_mapping(cfg: Any) -> dict[str, Any]:
    """OmegaConf DictConfig or mapping -> plain dict."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    return dict(cfg)  # the `data` node, a mapping (its section checked that)


def hash_key(seed: int, purpose: str, sample_id: str) -> str:
    """Stable sort key for a sample (sha256 hex), independent of process and machine."""
    return hashlib.sha256(f"{seed}:{purpose}:{sample_id}".encode()).hexdigest()


def _ordered(samples: list[Sample], seed: int, purpose: str) -> list[Sample]:
    return sorted(samples, key=lambda s: hash_key(seed, purpose, s.id))


def _take(samples: list[Sample], n: int | None, seed: int, purpose: str) -> list[Sample]:
    """A deterministic subset of `n` samples (all when n is None or >= len), in original order."""
    if n is None or n >= len(samples):
        return samples
    keep = {s.id for s in _ordered(samples, seed, purpose)[:n]}
    return [s for s in samples if s.id in keep]


def split_val(samples: list[Sample], val_fraction: float, seed: int) -> tuple[list[Sample], list[Sample]]:
    """Split by dialogue (`Sample.split_key`): lowest-hash dialogues go to val until it holds
    round(val_fraction * n) samples (a multi-sample dialogue may overshoot by its size - 1)."""
    n_val = round(val_fraction * len(samples))
    sizes = Counter(s.split_key for s in samples)
    val_keys: set[str] = set()
    taken = 0
    for key in sorted(sizes, key=lambda k: hash_key(seed, "val", k)):
        if taken >= n_val:
            break
        val_keys.add(key)
        taken += sizes[key]
    return (
        [s for s in samples if s.split_key not in val_keys],
        [s for s in samples if s.split_key in val_keys],
    )


class EsconvSource(Settings):
    enabled: bool
    max_samples: int | None = Field(ge=0, description="null: all")
    splits: NonEmpty[Literal[ESCONV_SPLITS]]  # type: ignore[valid-type]


class SmileSource(Settings):
    enabled: bool
    max_samples: int | None = Field(ge=0, description="null: all")
    cards: str | None  # a JSON-lines card file; null: the client's first message is the card


class RoleplayFile(Settings):
    """One of your own role-play chat files (JSON lines)."""

    path: ExistingFile
    language: Literal[LANGUAGES]  # type: ignore[valid-type]
    name: str | None = None  # the source's name in the samples; null: the file's stem


class RoleplaySource(Settings):
    enabled: bool
    rolebench_turns: int = Field(ge=1, description="question/answer pairs per session")
    files: list[RoleplayFile]


class MixtureSources(Settings):
    esconv: EsconvSource
    smile: SmileSource
    roleplay: RoleplaySource


class MixtureSettings(Settings):
    """The `data` node of ESC-Role's training (conf/data/esc_role.yaml; the module docstring), as
    its builder is called with it: without `builder` (`esc.train.datamodule`)."""

    root: str | None  # null: ESC_DATA_DIR or <repo>/data
    sources: MixtureSources
    roleplay_ratio: float = Field(ge=0, le=100)
    hold_out_card_echo: bool
    languages: list[Literal[LANGUAGES]]  # type: ignore[valid-type]
    val_fraction: float = Field(ge=0, le=0.5)
    seed: int


def build_samples(cfg: Any, key_prefix: str = "data") -> tuple[list[Sample], list[Sample]]:
    """Read, filter, mix and split the ESC-Role training data; returns (train, val).

    `cfg` is the data config section (see the module docstring; its `builder`, this function, is
    left out; a `MixtureSettings` validated already is taken as it is), validated here once.
    `key_prefix` is how the section is named in error messages.
    Raises ConfigError if nothing is left after filtering.
    """
    node = (
        cfg
        if isinstance(cfg, MixtureSettings)
        else {k: v for k, v in plain_mapping(cfg).items() if k != "builder"}
    )
    settings: MixtureSettings = load_node(key_prefix, MixtureSettings, node)
    p = key_prefix
    root = Path(settings.root or data_dir())  # null: ESC_DATA_DIR or <repo>/data
    seed, val_fraction, ratio = settings.seed, settings.val_fraction, settings.roleplay_ratio
    hold_out_echo, languages, sources = settings.hold_out_card_echo, settings.languages, settings.sources

    def enabled(name: str) -> bool:
        if not getattr(sources, name).enabled:
            return False
        if not set(SOURCE_LANGUAGES[name]) & set(languages):
            log.info(
                "%s: skipped, its language(s) %s are not in %s.languages", name, SOURCE_LANGUAGES[name], p
            )
            return False
        return True

    per_source: dict[str, list[Sample]] = {}
    if enabled("esconv"):
        esconv = sources.esconv
        per_source["esconv"] = _take(
            read_esconv_splits(root, list(esconv.splits)), esconv.max_samples, seed, "max:esconv"
        )
    if enabled("smile"):
        card_file = sources.smile.cards  # null: the client's first message is the card
        smile = read_smile(smile_dir(root), Path(card_file) if card_file else None)
        per_source["smile"] = _take(smile, sources.smile.max_samples, seed, "max:smile")
    if not hold_out_echo:  # the ablation: learn the turns that recite the card too
        per_source = {k: [dataclasses.replace(s, hold_out=()) for s in v] for k, v in per_source.items()}
    for name, samples in per_source.items():
        echoing = sum(1 for s in samples if s.hold_out)
        per_source[name] = [s for s in samples if s.learned_turns()]
        if echoing:
            log.info(
                "%s: %d of %d dialogues have a seeker turn that recites the card (context, not learned); "
                "%d have nothing else to learn and are left out",
                name, echoing, len(samples), len(samples) - len(per_source[name]),
            )  # fmt: skip
    n_esc = sum(len(v) for v in per_source.values())
    target = round(ratio * n_esc)
    if enabled("roleplay") and target > 0:
        pool = read_roleplay(
            root,
            [lang for lang in LANGUAGES if lang in languages],
            rolebench_turns=sources.roleplay.rolebench_turns,
            files=[f.model_dump(exclude_unset=True) for f in sources.roleplay.files],
        )
        if target > len(pool):
            log.warning(
                "roleplay: wanted %d samples (%s x %d ESC) but only %d exist: using all of them "
                "(%.2f per ESC sample)",
                target, ratio, n_esc, len(pool), len(pool) / max(n_esc, 1),
            )  # fmt: skip
        per_source["roleplay"] = _take(pool, target, seed, "roleplay")

    train: list[Sample] = []
    val: list[Sample] = []
    for name, samples in per_source.items():
        tr, va = split_val(samples, val_fraction, seed)
        train.extend(tr)
        val.extend(va)
        by = Counter(s.source for s in samples)
        log.info("%s: %d samples (%d train, %d val) %s", name, len(samples), len(tr), len(va), dict(by))
    if not train:
        raise ConfigError(
            f"{p}.sources",
            f"no training samples left after filtering (languages={list(languages)}); enable a source "
            f"in {p}.sources whose language is in {p}.languages, or raise its max_samples",
        )
    log.info(
        "ESC-Role mixture: %d train, %d val (%d ESC, %d role-play)",
        len(train),
        len(val),
        n_esc,
        len(per_source.get("roleplay", [])),
    )
    return train, val
