"""What a composed config may hold, checked before any work: each job's schema, collected.

`validate(cfg, job)` is the first line of `train.py`, `evaluate.py`, `rank.py` and `build_cards.py`,
and the jobs take the sections it returns. It stops at the first problem with a `ConfigError` naming
the key (one line, exit code 2), so a typo'd value never reaches a model load or writes a file:

1. an experiment of another entry point (`rank.py +exp=train/esc_role`);
2. a mandatory value (`???` in `conf/`) that a section the job reads needs, not set;
3. a top-level key no section reads (`+max_cots=1`), then each section of the job's schema
   (`SCHEMAS`), validated once by its model (`esc.settings.plugins.load_node`);
4. an interpolation that does not resolve (`~judge` left `run_name: ${judge.name}`), and nan or inf
   anywhere, in keys no model reads too (the run folder's settings.json could not hold it).

An override of a key that does not exist is refused by Hydra itself (`+key=value` adds one), and
`esc.lifecycle.run_hydra` prints its refusal as one line.
"""

from __future__ import annotations

import importlib
from typing import Any, Literal

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationToMissingValueError, OmegaConfBaseException
from pydantic import RootModel, create_model

from esc.config_rules import Section, Settings
from esc.errors import ConfigError
from esc.lifecycle import SCRIPTS
from esc.settings.plugins import load_node
from esc.settings.types import leaves, refuse_non_finite

Job = Literal["train", "evaluate", "rank", "cards"]

#: the modules whose `CONFIG` is each job's schema, in the order its sections are checked. Imported
#: by name when the job runs: an entry point loads only its own job's code (evaluate.py does not
#: import Lightning); the layers contract holds either way, this module being the top layer.
SCHEMAS: dict[str, tuple[str, ...]] = {
    "train": ("esc.train.run", "esc.judge_training.run"),
    "evaluate": ("esc.evaluate.run",),
    "rank": ("esc.rank.run",),
    "cards": ("esc.cards.construct.run",),
}
JOBS: tuple[str, ...] = tuple(SCHEMAS)


def schema(job: str) -> tuple[Section, ...]:
    """The sections of `job`'s config, from the modules that read them (a module's `CONFIG` is a
    tuple, or a function returning them: rank.py's modes register when it is called)."""
    sections: list[Section] = []
    for name in SCHEMAS[job]:
        config = importlib.import_module(name).CONFIG
        sections += config() if callable(config) else config
    return tuple(sections)


def _top_keys(section: Section) -> set[str]:
    """The top-level keys `section` reads: its node's first part, or the fields of a top-level model."""
    if section.node:
        return {section.node.split(".")[0]}
    if issubclass(section.model, RootModel):
        return set()
    return {f.alias or name for name, f in section.model.model_fields.items()}


def _needed(cfg: DictConfig, sections: tuple[Section, ...], key: str) -> bool:
    """Whether a mandatory value (`???`) at `key` must be set: a section that reads it applies
    (rank.py reads `dialogues` and `judge` only in the modes that do), or none names it."""
    readers = [s for s in sections if key.split(".", 1)[0] in _top_keys(s)]
    return not readers or any(s.when is None or s.when(cfg) for s in readers)


# --- validation -----------------------------------------------------------------------------------


def _plain(cfg: DictConfig, key: str = "") -> Any:
    """The plain value at `key` ("": the whole config; None: no such key), interpolations resolved:
    one that cannot be (`~judge` leaves `run_name: ${judge.name}`) is a ConfigError naming its key,
    not a traceback in the job. The whole config, where one reaches a `???` the job does not need (a
    mode's), is left unresolved."""
    try:
        value = OmegaConf.select(cfg, key, throw_on_missing=False) if key else cfg
        if isinstance(value, DictConfig | ListConfig):
            value = OmegaConf.to_container(value, resolve=True, throw_on_missing=False)
    except OmegaConfBaseException as err:
        if not key and isinstance(err, InterpolationToMissingValueError):
            return OmegaConf.to_container(cfg, resolve=False)
        where = key or str(getattr(err, "full_key", "") or "") or "(the config)"
        raise ConfigError(where, f"cannot be resolved ({str(err).splitlines()[0]})") from None
    return value


def _check_experiment(job: str) -> None:
    """An experiment (`+exp=<entry point>/<name>`, conf/exp/) runs only with its own entry point."""
    if not HydraConfig.initialized():
        return
    choice = HydraConfig.get().runtime.choices.get("exp")
    if choice and str(choice).split("/")[0] != job:
        owner = SCRIPTS.get(str(choice).split("/")[0])
        where = f"run it with `python {owner} +exp={choice}`" if owner else "name one as <entry point>/<name>"
        raise ConfigError("exp", f"{choice} is not an experiment of {SCRIPTS[job]} ({where})")


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
    value = _plain(cfg, section.node)
    if value is None:
        if not section.optional and (section.needed is None or section.needed(cfg)):
            # a section is read whole: where the run reads it, it cannot be left out
            raise ConfigError(section.node, "is not in the config, and this run reads it" + (
                f"; {section.missing}" if section.missing else ""))  # fmt: skip
        return None
    try:
        return load_node(section.node, section.model, value)  # a plugin node: its class's settings
    except ConfigError as err:
        raise ConfigError(err.key, err.problem + _set_by(cfg, err.key)) from None


#: top-level keys of every job's config that no section reads: Hydra's, and the interpolations that
#: name the run and its folder (`hydra.run.dir`, `output_dir`, `paths.*`, `run_name`, `task_name`)
FRAME = ("hydra", "paths", "output_dir", "run_name", "task_name")


def top_level(sections: tuple[Section, ...]) -> type[Settings]:
    """The top level as a model of the keys `sections` read: any other is a typo added with `+`
    (`+max_cots=1`, `+leaderbord.bootstrap=5`), refused as any node's unknown key is."""
    known = set(FRAME).union(*map(_top_keys, sections))
    return create_model("TopLevel", __base__=Settings, **{key: (Any, None) for key in known})


def validate(cfg: DictConfig, job: Job) -> dict[Any, Any]:
    """Raise ConfigError("key", "problem") on the first value `job` cannot use (see the module doc).
    Returns every section it checked as its model's instance, so the job reads them without
    validating them again: a named node by its dotted key (`"jury"`), a model of the top level by
    its class (`RunSettings`)."""
    _check_experiment(job)
    sections = schema(job)
    raw = OmegaConf.to_container(cfg, resolve=False)  # `???` stays a string, nothing resolves
    for key in (key for key, value in leaves(raw) if value == "???"):
        if _needed(cfg, sections, key):
            raise ConfigError(key, f"is mandatory and not set: add {key}=VALUE to the command line")
    checked: dict[Any, Any] = {}
    load_node("", top_level(sections), dict.fromkeys(cfg))
    for section in sections:
        value = check_section(cfg, section)
        if value is not None:
            checked[section.node or section.model] = value
    refuse_non_finite("", raw)  # names the key given, then
    refuse_non_finite("", _plain(cfg))  # where an interpolation makes one
    return checked
