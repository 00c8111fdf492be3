"""What a composed config may hold, checked before any work: the schemas of each job, collected.

`validate(cfg, job)` is the first line of `train.py`, `evaluate.py`, `rank.py` and `build_cards.py`:
it stops at the first problem with a `ConfigError` naming the key (one line, exit code 2), so a
typo'd value never reaches a model load or writes a file. The rules themselves live beside the code
that reads the values (`CONFIG` of `esc.train.run`, `esc.judge_training.train`, `esc.evaluate.run`,
`esc.rank.run`, `esc.cards.construct.pipeline`, built from the shared sections of `esc.chat`,
`esc.models.loading` and `esc.scoring.judges`; the vocabulary is `esc.config_rules`). In order:

1. an experiment of another entry point (`rank.py +exp=train/esc_role`);
2. mandatory values (`???` in `conf/`) that the job needs and the command line did not set;
3. each section of the job's schema: a key the code does not read in a closed section (a typo in a
   config file, or a `+key=` that nothing reads), then its rules (type, range, choice, path);
4. every interpolation resolves (`~judge` left `run_name: ${judge.name}`), and no nan or inf is
   left anywhere, in keys no rule reads too (no setting means one, and the run folder's
   settings.json could not hold it);
5. relations between keys (`RELATIONS`), e.g. `shard.index < shard.count`.

Keys absent from the composed config are skipped (an experiment may not have them), except those a
rule marks `required` (a typed section's fields; `seed`). An override of
a key that does not exist is refused by Hydra itself (use `+key=value` to add one), and
`esc.lifecycle.run_hydra` prints its refusal as one line.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationToMissingValueError, OmegaConfBaseException

from esc.config_rules import Section, is_int, load_section, non_finite, refuse_non_finite
from esc.errors import ConfigError
from esc.lifecycle import SCRIPTS

Job = Literal["train", "evaluate", "rank", "cards"]
JOBS: tuple[str, ...] = ("train", "evaluate", "rank", "cards")

#: the modules whose `CONFIG` is each job's schema, in the order its sections are checked. Imported
#: by name when the job runs: an entry point loads only its own job's code (evaluate.py does not
#: import Lightning); the layers contract holds either way, this module being the top layer.
SCHEMAS: dict[str, tuple[str, ...]] = {
    "train": ("esc.train.run", "esc.judge_training.train"),
    "evaluate": ("esc.evaluate.run",),
    "rank": ("esc.rank.run",),
    "cards": ("esc.cards.construct.pipeline",),
}


def schema(job: str) -> tuple[Section, ...]:
    """The sections of `job`'s config, from the modules that read them (a module's `CONFIG` is a
    tuple, or a function returning them: rank.py's modes register when it is called)."""
    sections: list[Section] = []
    for name in SCHEMAS[job]:
        config = importlib.import_module(name).CONFIG
        sections += config() if callable(config) else config
    return tuple(sections)


_ABSENT = object()


@dataclasses.dataclass(frozen=True)
class Relation:
    """A check across keys: `check(cfg)` returns the problem with `key`, or None."""

    key: str
    check: Callable[[DictConfig], str | None]
    jobs: tuple[str, ...]


def _shard_in_range(cfg: DictConfig) -> str | None:
    index, count = _select(cfg, "shard.index"), _select(cfg, "shard.count")
    if is_int(index) and is_int(count) and index >= count:
        return f"must be below shard.count ({count}), got {index}"
    return None


def _stop_needs_ratings(cfg: DictConfig) -> str | None:
    if _select(cfg, "trajectory.stop.enabled") is True and _select(cfg, "trajectory.enabled") is not True:
        return "needs trajectory.enabled=true (a dialogue stops on the seeker's ratings)"
    return None


def _stop_thresholds_ordered(cfg: DictConfig) -> str | None:
    success, failure = _select(cfg, "trajectory.stop.success"), _select(cfg, "trajectory.stop.failure")
    numbers = isinstance(success, int | float) and isinstance(failure, int | float)
    if numbers and non_finite([success, failure]) is None and not failure < success:  # nan: its own rule
        return f"must be below trajectory.stop.success ({success}), got {failure}"
    return None


RELATIONS: tuple[Relation, ...] = (
    Relation("shard.index", _shard_in_range, ("evaluate",)),
    Relation("trajectory.stop.enabled", _stop_needs_ratings, ("evaluate",)),
    Relation("trajectory.stop.failure", _stop_thresholds_ordered, ("evaluate",)),
)


# Subtrees whose mandatory values (`???`) a job needs only in some modes.
def _needed(cfg: DictConfig, job: str, key: str) -> bool:
    if job != "rank":
        return True
    top = key.split(".", 1)[0]
    mode = importlib.import_module("esc.tasks.task").configured_mode(cfg)
    if mode is None:  # the `mode` rule names the registered ones
        return False
    if top == "dialogues":
        return mode.reads_dialogues
    if top == "judge":  # the modes that judge: agreement only without existing scores
        return bool(mode.needs_judge(cfg))
    return True


# --- validation -----------------------------------------------------------------------------------


def _select(cfg: DictConfig, key: str) -> Any:
    """The plain, resolved value at `key`, or `_ABSENT`; a value that cannot resolve is a ConfigError."""
    try:
        value = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False)
        if isinstance(value, DictConfig | ListConfig):
            value = OmegaConf.to_container(value, resolve=True)
    except OmegaConfBaseException as err:
        raise ConfigError(key, f"cannot be resolved ({str(err).splitlines()[0]})") from None
    return value


def _resolved(cfg: DictConfig) -> Any:
    """The whole config as plain values, every interpolation resolved: one that cannot be (`~judge`
    leaves `run_name: ${judge.name}`) is a ConfigError naming its key, not a traceback in the job.
    One reaching a `???` the job does not need (a mode's) leaves the config unresolved."""
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except InterpolationToMissingValueError:
        return OmegaConf.to_container(cfg, resolve=False)
    except OmegaConfBaseException as err:
        key = str(getattr(err, "full_key", "") or "") or "(the config)"
        raise ConfigError(key, f"cannot be resolved ({str(err).splitlines()[0]})") from None


def missing_keys(node: Any, prefix: str = "") -> Iterator[str]:
    """Dotted keys whose value is the mandatory marker `???`, in config order."""
    if isinstance(node, DictConfig | ListConfig):
        node = OmegaConf.to_container(node, resolve=False)  # `???` stays a string, nothing resolves
    if node == "???":
        yield prefix
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from missing_keys(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from missing_keys(value, f"{prefix}[{i}]")


def _check_experiment(job: str) -> None:
    """An experiment (`+exp=<entry point>/<name>`, conf/exp/) runs only with its own entry point."""
    if not HydraConfig.initialized():
        return
    choice = HydraConfig.get().runtime.choices.get("exp")
    if choice and str(choice).split("/")[0] != job:
        owner = SCRIPTS.get(str(choice).split("/")[0])
        where = f"run it with `python {owner} +exp={choice}`" if owner else "name one as <entry point>/<name>"
        raise ConfigError("exp", f"{choice} is not an experiment of {SCRIPTS[job]} ({where})")


def _dotted(node: str, key: str) -> str:
    return f"{node}.{key}" if node else key


def _set_by(cfg: DictConfig, key: str) -> str:
    """`; its value comes from ${model.lora_lr}` when `key`'s value is an interpolation
    (`optimizer.lr`): the key the user gave is named too; "" otherwise."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    if isinstance(node, DictConfig) and leaf in node and OmegaConf.is_interpolation(node, leaf):
        return f"; its value comes from {node._get_node(leaf)._value()}"
    return ""


def check_section(cfg: DictConfig, section: Section) -> None:
    """ConfigError on the first unknown key of a closed section, then on the first rule it breaks."""
    if section.when is not None and not section.when(cfg):
        return
    node = OmegaConf.select(cfg, section.node, default=None) if section.node else cfg
    if node is None:
        if section.schema is not None and (section.needed is None or section.needed(cfg)):
            # a typed section is read whole: where the run reads it, it cannot be left out
            raise ConfigError(section.node, "is not in the config, and this run reads it" + (
                f"; {section.missing}" if section.missing else ""))  # fmt: skip
        return
    value = OmegaConf.to_container(node, resolve=False) if isinstance(node, DictConfig) else node
    if section.keys is not None and isinstance(value, Mapping):  # the keys, unresolved
        known = section.known(value)
        if known is not None:
            unknown = [k for k in value if k not in known]
            if unknown:
                raise ConfigError(
                    _dotted(section.node, str(unknown[0])),
                    f"unknown key (a typo?); `{section.node}` takes {', '.join(sorted(known))}",
                )
    for rule in section.rules:
        if rule.when is not None and not rule.when(cfg):
            continue
        key = _dotted(section.node, rule.key)
        found = _select(cfg, key)
        if found is _ABSENT:
            if rule.required:
                raise ConfigError(
                    key,
                    f"is not set, and this run reads it: keep the value conf/ gives it (no ~{key}) or set "
                    f"one (+{key}=VALUE)",
                )
            continue
        problem = rule.check(found)
        if problem:
            problem = f"{problem} ({rule.hint})" if rule.hint else problem
            raise ConfigError(key, problem + _set_by(cfg, key))
    if section.schema is not None and isinstance(value, Mapping):  # the types, once the rules hold
        load_section(section.node, section.schema, _select(cfg, section.node))


def validate(cfg: DictConfig, job: Job) -> None:
    """Raise ConfigError("key", "problem") on the first value `job` cannot use (see the module doc)."""
    if job not in JOBS:
        raise ValueError(f"job must be one of {JOBS}, got {job!r}")
    _check_experiment(job)
    for key in missing_keys(cfg):
        if _needed(cfg, job, key):
            raise ConfigError(key, f"is mandatory and not set: add {key}=VALUE to the command line")
    for section in schema(job):
        check_section(cfg, section)
    refuse_non_finite("", OmegaConf.to_container(cfg, resolve=False))  # names the key given, then
    refuse_non_finite("", _resolved(cfg))  # where an interpolation makes one
    for relation in RELATIONS:
        if job in relation.jobs:
            problem = relation.check(cfg)
            if problem:
                raise ConfigError(relation.key, problem)
