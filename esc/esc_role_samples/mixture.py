"""Build the ESC-Role training mixture (train, val) from a `data` config section.

Config keys read (the `data` node; conf/data/esc_role.yaml gives every one, with what it does, and
none has a default here: a key left out is a ConfigError naming it):

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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from esc.corpora.esconv import SPLITS as ESCONV_SPLITS
from esc.corpora.smile import smile_dir
from esc.errors import ConfigError
from esc.esc_role_samples.esconv import read_esconv_splits
from esc.esc_role_samples.roleplay import read_roleplay
from esc.esc_role_samples.sample import Sample
from esc.esc_role_samples.smile import read_smile
from esc.paths import data_dir
from esc.prompts import LANGUAGES

log = logging.getLogger(__name__)

SOURCE_LANGUAGES = {"esconv": ("en",), "smile": ("zh",), "roleplay": ("en", "zh")}
PAPER_ESC_SAMPLES, PAPER_TOTAL_SAMPLES = 3390, 14000  # paper section 2.3.1
PAPER_ROLEPLAY_RATIO = round((PAPER_TOTAL_SAMPLES - PAPER_ESC_SAMPLES) / PAPER_ESC_SAMPLES, 2)  # 3.13


def plain_mapping(cfg: Any) -> dict[str, Any]:
    """OmegaConf DictConfig or mapping -> plain dict."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    if not isinstance(cfg, Mapping):
        raise ConfigError("data", f"expected a mapping, got {type(cfg).__name__}")
    return dict(cfg)


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


def _required(node: Any, key: str, where: str) -> Any:
    """`node[key]`: conf/data/esc_role.yaml gives every key the mixture reads, so one left out (or a
    node that is no mapping) is a ConfigError naming it, never a value assumed here."""
    if not isinstance(node, Mapping):
        raise ConfigError(where, f"should be a mapping of keys to values, got {node!r}")
    if key not in node:
        raise ConfigError(
            f"{where}.{key}",
            "is not set, and the ESC-Role mixture reads it: keep the value conf/data/esc_role.yaml gives it",
        )
    return node[key]


def _number(cfg: dict[str, Any], key: str, prefix: str, lo: float, hi: float) -> float:
    value = _required(cfg, key, prefix)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ConfigError(f"{prefix}.{key}", f"should be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def _turns(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            key, f"should be an integer >= 1 (question/answer pairs per session), got {value!r}"
        )
    return value


def _roleplay_files(files: Any, key: str) -> list[dict[str, Any]]:
    """Check `sources.roleplay.files`: a list of {path, language, name?} of existing files."""
    if not isinstance(files, (list, tuple)):
        raise ConfigError(key, f"should be a list of {{path, language, name}}, got {files!r}")
    checked = []
    for k, spec in enumerate(files):
        if not isinstance(spec, Mapping) or not spec.get("path") or spec.get("language") not in LANGUAGES:
            raise ConfigError(
                f"{key}[{k}]", f"needs `path` and `language` (one of {list(LANGUAGES)}), got {spec!r}"
            )
        if not Path(spec["path"]).is_file():
            raise ConfigError(f"{key}[{k}].path", f"no such file: {spec['path']}")
        checked.append(dict(spec))
    return checked


def build_samples(cfg: Any, key_prefix: str = "data") -> tuple[list[Sample], list[Sample]]:
    """Read, filter, mix and split the ESC-Role training data; returns (train, val).

    `cfg` is the data config section (see the module docstring). `key_prefix` is how the section
    is named in error messages. Raises ConfigError if nothing is left after filtering.
    """
    cfg = plain_mapping(cfg)
    p = key_prefix
    root = Path(_required(cfg, "root", p) or data_dir())  # null: ESC_DATA_DIR or <repo>/data
    seed = _required(cfg, "seed", p)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"{p}.seed", f"should be an integer, got {seed!r}")
    val_fraction = _number(cfg, "val_fraction", p, 0.0, 0.5)
    ratio = _number(cfg, "roleplay_ratio", p, 0.0, 100.0)
    hold_out_echo = _required(cfg, "hold_out_card_echo", p)
    if not isinstance(hold_out_echo, bool):
        raise ConfigError(f"{p}.hold_out_card_echo", f"should be true or false, got {hold_out_echo!r}")
    languages = _required(cfg, "languages", p)
    if isinstance(languages, str) or not isinstance(languages, (list, tuple)):
        raise ConfigError(
            f"{p}.languages", f"should be a list drawn from {list(LANGUAGES)}, got {languages!r}"
        )
    unknown = [lang for lang in languages if lang not in LANGUAGES]
    if unknown:
        raise ConfigError(f"{p}.languages", f"unknown language(s) {unknown}; choose from {list(LANGUAGES)}")
    sources = _required(cfg, "sources", p)
    if not isinstance(sources, Mapping):
        raise ConfigError(f"{p}.sources", f"should be a mapping of source name -> options, got {sources!r}")
    extra = sorted(set(sources) - set(SOURCE_LANGUAGES))
    if extra:
        raise ConfigError(f"{p}.sources", f"unknown source(s) {extra}; known: {sorted(SOURCE_LANGUAGES)}")

    def option(name: str, key: str) -> Any:
        """`sources.<name>.<key>`, required (conf/data/esc_role.yaml gives every source every key)."""
        return _required(_required(sources, name, f"{p}.sources"), key, f"{p}.sources.{name}")

    def enabled(name: str) -> bool:
        if not option(name, "enabled"):
            return False
        if not set(SOURCE_LANGUAGES[name]) & set(languages):
            log.info(
                "%s: skipped, its language(s) %s are not in %s.languages", name, SOURCE_LANGUAGES[name], p
            )
            return False
        return True

    def max_samples(name: str) -> int | None:
        value = option(name, "max_samples")  # null: all
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ConfigError(
                f"{p}.sources.{name}.max_samples", f"should be null or an integer >= 0, got {value!r}"
            )
        return value

    per_source: dict[str, list[Sample]] = {}
    if enabled("esconv"):
        splits = option("esconv", "splits")
        if not isinstance(splits, list) or not splits or any(s not in ESCONV_SPLITS for s in splits):
            raise ConfigError(
                f"{p}.sources.esconv.splits",
                f"should be a non-empty list drawn from {list(ESCONV_SPLITS)}, got {splits!r}",
            )
        per_source["esconv"] = _take(
            read_esconv_splits(root, splits), max_samples("esconv"), seed, "max:esconv"
        )
    if enabled("smile"):
        card_file = option("smile", "cards")  # null: the client's first message is the card
        smile = read_smile(smile_dir(root), Path(card_file) if card_file else None)
        per_source["smile"] = _take(smile, max_samples("smile"), seed, "max:smile")
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
            rolebench_turns=_turns(
                option("roleplay", "rolebench_turns"), f"{p}.sources.roleplay.rolebench_turns"
            ),
            files=_roleplay_files(option("roleplay", "files"), f"{p}.sources.roleplay.files"),
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
