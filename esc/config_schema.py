"""What a composed config may hold, checked before any work: the schemas of each job, collected.

`validate(cfg, job)` is the first line of `train.py`, `evaluate.py`, `rank.py` and `build_cards.py`:
it stops at the first problem with a `ConfigError` naming the key (one line, exit code 2), so a
typo'd value never reaches a model load or writes a file. The models live beside the code that
reads the values (`CONFIG` of `esc.train.run`, `esc.judge_training.run`, `esc.evaluate.run`,
`esc.rank.run`, `esc.cards.construct.run`, built from the shared models of `esc.chat`,
`esc.models.loading` and `esc.scoring.judges`; pydantic validates, `esc.config_rules` holds the
vocabulary and turns its errors into one line). In order:

1. an experiment of another entry point (`rank.py +exp=train/esc_role`);
2. mandatory values (`???` in `conf/`) that the job needs and the command line did not set;
3. each section of the job's schema, validated once by its model: a missing key, a key the model
   does not know (a typo in a config file, or a `+key=` that nothing reads), a type, a range, and
   the relations between its keys (`shard.index < shard.count`, the model's own check);
4. every interpolation resolves (`~judge` left `run_name: ${judge.name}`), and no nan or inf is
   left anywhere, in keys no model reads too (no setting means one, and the run folder's
   settings.json could not hold it);

A section an experiment may not have is `optional`; where it is there, every key its model names
must be. An override of a key that does not exist is refused by Hydra itself (use `+key=value` to
add one), and `esc.lifecycle.run_hydra` prints its refusal as one line.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, Literal

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationToMissingValueError, OmegaConfBaseException
from pydantic import RootModel

from esc.config_rules import Section, load_section
from esc.errors import ConfigError
from esc.lifecycle import SCRIPTS
from esc.settings.types import refuse_non_finite

Job = Literal["train", "evaluate", "rank", "cards"]
JOBS: tuple[str, ...] = ("train", "evaluate", "rank", "cards")

#: the modules whose `CONFIG` is each job's schema, in the order its sections are checked. Imported
#: by name when the job runs: an entry point loads only its own job's code (evaluate.py does not
#: import Lightning); the layers contract holds either way, this module being the top layer.
SCHEMAS: dict[str, tuple[str, ...]] = {
    "train": ("esc.train.run", "esc.judge_training.run"),
    "evaluate": ("esc.evaluate.run",),
    "rank": ("esc.rank.run",),
    "cards": ("esc.cards.construct.run",),
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


def check_section(cfg: DictConfig, section: Section) -> Any:
    """ConfigError on the first problem of one section: its node validated by its model, once; the
    node as its model's instance (None where the section does not apply or is not there)."""
    if section.when is not None and not section.when(cfg):
        return None
    node = OmegaConf.select(cfg, section.node, default=None) if section.node else cfg
    if node is None:
        if not section.optional and (section.needed is None or section.needed(cfg)):
            # a section is read whole: where the run reads it, it cannot be left out
            raise ConfigError(section.node, "is not in the config, and this run reads it" + (
                f"; {section.missing}" if section.missing else ""))  # fmt: skip
        return None
    value = _select(cfg, section.node) if section.node else _resolved(cfg)
    try:
        checked = load_section(section.node, section.model, value)
    except ConfigError as err:
        raise ConfigError(err.key, err.problem + _set_by(cfg, err.key)) from None
    return checked.root if isinstance(checked, RootModel) else checked  # a plugin node: its settings


#: top-level keys of every job's config that no section reads: Hydra's, and the interpolations that
#: name the run and its folder (`hydra.run.dir`, `output_dir`, `paths.*`, `run_name`, `task_name`)
FRAME = ("hydra", "paths", "output_dir", "run_name", "task_name")


def _refuse_unread_top_keys(cfg: DictConfig, job: str, sections: tuple[Section, ...]) -> None:
    """ConfigError naming a top-level key that no section of `job` reads: a typo added with `+`
    (`+max_cots=1`, `+leaderbord.bootstrap=5`) would otherwise be accepted and do nothing."""
    known = set(FRAME)
    for section in sections:
        if section.node:
            known.add(section.node.split(".")[0])
        elif not issubclass(section.model, RootModel):
            known |= {f.alias or name for name, f in section.model.model_fields.items()}
    for key in cfg:
        if key not in known:
            raise ConfigError(
                str(key),
                f"unknown key (a typo?): nothing {SCRIPTS[job]} runs reads it; its top level holds "
                f"{', '.join(sorted(known - set(FRAME)))}",
            )


def validate(cfg: DictConfig, job: Job) -> dict[Any, Any]:
    """Raise ConfigError("key", "problem") on the first value `job` cannot use (see the module doc).
    Returns every section it checked as its model's instance, so the job reads them without
    validating them again: a named node by its dotted key (`"jury"`), a model of the top level by
    its class (`RunSettings`)."""
    if job not in JOBS:
        raise ValueError(f"job must be one of {JOBS}, got {job!r}")
    _check_experiment(job)
    for key in missing_keys(cfg):
        if _needed(cfg, job, key):
            raise ConfigError(key, f"is mandatory and not set: add {key}=VALUE to the command line")
    checked: dict[Any, Any] = {}
    sections = schema(job)
    _refuse_unread_top_keys(cfg, job, sections)
    for section in sections:
        value = check_section(cfg, section)
        if value is not None:
            checked[section.node or section.model] = value
    refuse_non_finite("", OmegaConf.to_container(cfg, resolve=False))  # names the key given, then
    refuse_non_finite("", _resolved(cfg))  # where an interpolation makes one
    return checked
