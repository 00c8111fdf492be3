"""Settings validated by pydantic: the base of every config node's model, the one error line, and
`Section`, where a job reads a node.

Each module that reads a config node declares its model beside its code (a `Settings` subclass) and
its job's sections (`CONFIG`, collected by `esc.config_schema`). A model states each key's type and
range, never its value: every field is required (conf/ holds the value and its comment), any other
key is a typo (refused naming the keys the node takes), types are strict (`"1"` is no integer) and
nan or inf no number. A `ValidationError` becomes one `ConfigError` naming the dotted key, in
pydantic's own words (`config_error`). A node handed whole to a library (Lightning's Trainer) is an
`OpenSettings`. Field types beyond Python's are in `esc.settings.types`; plugin nodes and the one
validation of a node, `load_node`, in `esc.settings.plugins`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from esc.errors import ConfigError


class Settings(BaseModel):
    """A config node the code reads: every field required, no other key, strict types, finite numbers."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        """A key the model does not read is a typo: refused naming the keys it does read (pydantic's
        own "extra inputs are not permitted" names none)."""
        if cls.model_config.get("extra") == "forbid" and isinstance(data, Mapping):
            known = sorted(f.alias or name for name, f in cls.model_fields.items())
            for key in data:
                if key not in known:
                    raise relation(str(key), f"unknown key (a typo?); this node takes {', '.join(known)}")
        return data


class OpenSettings(Settings):
    """A node whose other keys another reader takes (the top level: hydra, paths; a `model:` node
    that transformers reads): its fields are checked, any other key passes."""

    model_config = ConfigDict(extra="allow")


def show(value: Any) -> str:
    """A value as the command line would write it: "abc", 1, true, null, [1, 2], nan, inf."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # nan, inf, -inf (JSON has no word for them)
    return json.dumps(value, ensure_ascii=False, default=str)


def check(problem: Callable[[Any], str | None], says: str | None = None) -> AfterValidator:
    """A field's check beyond its type: `problem(value)` says what is wrong, or None; `says` (else
    `problem`'s docstring) is the rule as docs/bad_inputs.md lists it."""

    def run(value: Any) -> Any:
        found = problem(value)
        if found:
            raise PydanticCustomError("config", "{problem}", {"problem": found})
        return value

    run.__doc__ = says or problem.__doc__
    return AfterValidator(run)


def check_entries(problem: Callable[[str, Any], str | None]) -> AfterValidator:
    """A mapping field's check of each entry: `problem(key, value)` says what is wrong with one, and
    the error names the entry's own dotted key (`backend.generation_config.max_new_tokens`)."""

    def run(value: Any) -> Any:
        for key, item in (value or {}).items():
            found = problem(key, item)
            if found:
                raise relation(str(key), found)
        return value

    return AfterValidator(run)


def relation(key: str, problem: str) -> PydanticCustomError:
    """What a model's check across its keys raises: `problem` with `key` (dotted, below the node)."""
    return PydanticCustomError("relation", "{problem}", {"key": key, "problem": problem})


def _keys(loc: Sequence[Any], value: Any, missing: bool) -> list[Any]:
    """The config keys in a pydantic `loc`, walked in `value`: the tags a union adds (`int`,
    `literal['auto']`) dropped; a `missing` key's last part is not in `value`."""
    keys: list[Any] = []
    for i, part in enumerate(loc):
        if missing and i == len(loc) - 1 or isinstance(value, Mapping) and part in value:
            keys.append(part)
            value = value.get(part) if isinstance(value, Mapping) else None
        elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
            keys.append(part)
            value = value[part]
    return keys


def _wanted(error: Mapping[str, Any]) -> str | None:
    """What pydantic says a value should be ("greater than or equal to 1", "'en' or 'zh'"); None
    where its message is no such phrase (a check's own sentence, a missing key, a list's length)."""
    msg = str(error["msg"])
    return msg[len("Input should be ") :] if msg.startswith("Input should be ") else None


def _said(error: Mapping[str, Any]) -> str:
    """A problem that is no "should be": a check's own sentence, a missing key, pydantic's message."""
    if error["type"] in ("config", "relation"):
        return str(error["ctx"]["problem"])
    if error["type"] == "missing":
        return "is not set, and this run reads it (set one: +KEY=VALUE)"
    return str(error["msg"])[:1].lower() + str(error["msg"])[1:]


def config_error(errors: Sequence[Mapping[str, Any]], node: str, value: Any) -> ConfigError:
    """The first of pydantic's `errors` (`ValidationError.errors()`, validating `value`, the node
    `node`) as one ConfigError naming its dotted key, in pydantic's words; what the branches of a
    union wanted at that key joined by "or"."""
    found = [(e, _keys(e["loc"], value, e["type"] == "missing")) for e in errors]
    first, keys = found[0]
    if first["type"] == "relation":  # a model's own check names the key below it
        keys, here = [*keys, *str(first["ctx"]["key"]).split(".")], [first]
    else:  # a union: the branch that got furthest (an item of a list rather than "not a string")
        keys = max((k for _, k in found if k[: len(keys)] == keys), key=len)
        here = [e for e, k in found if k == keys]
    wanted = list(dict.fromkeys(w for w in map(_wanted, here) if w))
    if any(_wanted(e) is None for e in here) or not wanted:
        problem = _said(next(e for e in here if _wanted(e) is None))
    else:
        problem = f"must be {' or '.join(wanted)}, got {show(here[-1]['input'])}"
    at = next((i for i, k in enumerate(keys) if isinstance(k, int)), len(keys))  # the key a command line sets
    items = "".join(f"item {k}: " if isinstance(k, int) else f"{k}: " for k in keys[at:])
    key = ".".join([node, *map(str, keys[:at])]).strip(".")
    if items:  # a list item's own key: the command line sets the whole list, not this key
        problem = problem.replace(" (set one: +KEY=VALUE)", "")
    return ConfigError(key, items + problem.replace("KEY=", f"{key}="))  # "+KEY=VALUE": the key


M = TypeVar("M", bound=BaseModel)


def load_section(node: str, model: type[M], value: Any) -> M:
    """The config node `node` (its plain, resolved value) as an instance of `model`; a ConfigError
    naming the key that is missing, unknown, of the wrong type or out of range (the one check, the
    same for a section read from a saved manifest or in a test)."""
    if isinstance(value, DictConfig | ListConfig):  # a node read straight from the config
        value = OmegaConf.to_container(value, resolve=True)
    try:
        return model.model_validate(value)
    except ValidationError as err:
        raise config_error(err.errors(include_url=False), node, value) from None


@dataclasses.dataclass(frozen=True)
class Section:
    """A config node a job reads: `node` (dotted; "" is the top level) and its `model`.
    `when(cfg)`: the section applies only then (rank.py reads `judge` only in the modes that judge).
    `optional`: an experiment may leave the node out (a typed section the job reads whole may not);
    `needed(cfg)`: when its absence is an error (None: always), `missing` how to add it."""

    node: str
    model: type[BaseModel]
    when: Callable[[Any], bool] | None = None
    optional: bool = False
    missing: str = ""
    needed: Callable[[Any], bool] | None = None
