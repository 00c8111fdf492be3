"""Settings validated by pydantic: the model of a config node, and `Section`, where a job reads it.

Each module that reads a config node declares its model beside its code (a `Settings` subclass) and
the sections of its job (`CONFIG` in `esc.evaluate.run`, `esc.train.run`, `esc.judge_training.run`,
`esc.rank.run`, `esc.cards.construct.run`; shared nodes in `esc.chat.cache`, `esc.chat.base`,
`esc.chat.build`, `esc.models.loading`, `esc.scoring.judges`). `esc.config_schema.validate` checks
them all before any work. A model states each key's type and range, never its value: every field
is required (conf/ holds the value and the comment saying what it does), any other key is a typo
(`extra="forbid"`), types are strict (`"1"` is no integer, `true` no number) and nan or inf no
number. A `ValidationError` becomes one `ConfigError` naming the dotted key (`config_error`).
A node the code hands whole to a library (Lightning's Trainer, transformers) is an `OpenSettings`:
its named keys are checked, the library refuses the rest. A backend's or judge's node is a `plugin`
type: its `kind` one the registry knows, the rest validated by the `Settings` model that the class
registered under that kind declares (`PluginSettings`), and the class is built from that instance.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self, TypeVar, get_args

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    ValidationError,
    WrapValidator,
)
from pydantic_core import PydanticCustomError

from esc.errors import ConfigError

# --- models ---------------------------------------------------------------------------------------


class Settings(BaseModel):
    """A config node the code reads: every field required, no other key, strict types, finite numbers."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class OpenSettings(Settings):
    """A node whose other keys another reader takes (the top level: hydra, paths; a `model:` node
    that transformers reads): its fields are checked, any other key passes."""

    model_config = ConfigDict(extra="allow")


def show(value: Any) -> str:
    """A value as the command line would write it: "abc", 1, true, null, [1, 2], nan, inf."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # nan, inf, -inf (JSON has no word for them)
    return json.dumps(value, ensure_ascii=False, default=str)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def non_finite(value: Any, key: str = "") -> tuple[str, float] | None:
    """The key (`key`, then dotted and [i] below it) and value of the first nan or inf in `value` (a
    plain value, containers walked), or None: no setting means nan or inf, and JSON cannot hold them."""
    if isinstance(value, float) and not math.isfinite(value):
        return key, value
    items = (
        value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    )
    for name, item in items:
        found = non_finite(item, f"{key}[{name}]" if isinstance(name, int) else f"{key}.{name}".lstrip("."))
        if found is not None:
            return found
    return None


def refuse_non_finite(key: str, value: Any) -> None:
    """ConfigError naming the first nan or inf in `value` (at `key`): what no model reads (an `Any`)."""
    found = non_finite(value, key)
    if found is not None:
        raise ConfigError(found[0], f"must be a finite number, got {show(found[1])}")


# --- the vocabulary: types a field can have beyond int, float, bool, str, Literal ------------------

NAME_MAX = 255  # bytes of one file name (ext4, XFS, Btrfs, APFS; NTFS counts 255 characters)
NAME_BYTES = 64
"""The most bytes (UTF-8) of a name that becomes part of file names (a target's, a role-player's, a
judge's): three of them and the longest fixed part of a file built from them (a score file's
temporary copy, `.<target>__<role-player>__<language>__<judge>.jsonl.XXXXXXXX.tmp`, 28 bytes; a
dialogue failure file's, 33 bytes with two names) stay within NAME_MAX, so a long name is refused
before any work, not with ENAMETOOLONG after it (tests/test_config_limits.py checks the sum)."""


def file_name_problem(value: Any) -> str | None:
    """Why `value` cannot be part of a file name (`target.name=../../x` wrote outside the run folder;
    240 characters played, then failed), or None."""
    text = value if isinstance(value, str) else ""
    if (
        not text
        or text in (".", "..")
        or any(c in text for c in "/\\")
        or any(ord(c) < 32 or ord(c) == 127 for c in text)
    ):
        return (
            "must be a name that can be part of a file name (no / or \\, not . or .., no control "
            f"characters), got {show(value)}"
        )  # fmt: skip
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > NAME_BYTES:
        return (
            f"is {size} bytes long (UTF-8), over the {NAME_BYTES} a name may have: the file names "
            f"built from it (e.g. <target>__<role-player>__<language>__<judge>.jsonl) must stay within "
            f"the file system's {NAME_MAX} bytes; use a shorter name"
        )
    return None


def check(problem: Callable[[Any], str | None]) -> AfterValidator:
    """A field's check beyond its type: `problem(value)` says what is wrong, or None."""

    def run(value: Any) -> Any:
        found = problem(value)
        if found:
            raise PydanticCustomError("config", "{problem}", {"problem": found})
        return value

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


def _file_name(value: Any) -> str | None:
    if not isinstance(value, str):  # `name=nan`, `name=1`: a number (quote it: name='1')
        return f"must be a name (quote a number: name='1'), got {show(value)}"
    return file_name_problem(value)


def _existing(kind: Literal["file", "dir", "any"]) -> Callable[[Any], str | None]:
    def problem(value: Any) -> str | None:
        if not isinstance(value, str) or not value:
            return f"must be a path, got {show(value)}"
        p = Path(value)
        if not p.exists():
            return (
                f"{value}: no such {'directory' if kind == 'dir' else 'file' if kind == 'file' else 'path'}"
            )
        if kind == "file" and not p.is_file():
            return f"{value}: is a directory, not a file"
        if kind == "dir" and not p.is_dir():
            return f"{value}: is a file, not a directory"
        return None

    return problem


def _device(value: Any) -> str | None:
    if value == "auto":
        return None
    import torch  # heavy: only where a device is given

    try:
        torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        return f"must be auto or a torch device such as cpu, cuda or cuda:1, got {show(value)}"
    return None


def _importable(value: Any) -> str | None:
    if not isinstance(value, str) or "." not in value:
        return f"must be a dotted path such as esc.train.run.train, got {show(value)}"
    try:
        found = get_object(value)
    except Exception as err:  # ImportError, AttributeError, or the module's own failure
        return f"{value}: cannot be imported ({type(err).__name__})"
    return None if callable(found) else f"{value}: is not a function or class"


FileName = Annotated[Any, check(_file_name)]
"""A name that becomes part of a file name (a target's, a role-player's, a judge's)."""
ExistingFile = Annotated[str, check(_existing("file"))]
ExistingDir = Annotated[str, check(_existing("dir"))]
ExistingPath = Annotated[str, check(_existing("any"))]
T = TypeVar("T")
NonEmpty = Annotated[list[T], Field(min_length=1)]
"""A list of at least one item (an empty list selects nothing)."""
Paths = ExistingPath | NonEmpty[ExistingPath]
"""One existing path, or a non-empty list of them."""
Device = Annotated[str, check(_device)]
"""`auto`, or a device torch knows (`cpu`, `cuda`, `cuda:1`, `mps`, ...)."""
Target = Annotated[str, check(_importable)]
"""A `_target_`: the dotted path of a function or class that imports (the one way a config names code)."""


def registered(kinds: Callable[[], Sequence[str]]) -> AfterValidator:
    """One of the kinds a registry knows when the check runs (`backend_kinds`, `judge_kinds`): a
    backend or judge registered by a plugin is a valid `kind:` too."""

    def problem(value: Any) -> str | None:
        known = list(kinds())
        return None if value in known else f"must be one of {', '.join(known)}, got {show(value)}"

    return check(problem)


class PluginSettings(Settings):
    """The settings of one registered class (a chat backend, a judge): its own model, the class's
    `Settings`, beside its code. It lists every key the class reads, with its type and range; the
    class is built from a validated instance and checks nothing itself. `kind` is the name it is
    registered under. A field may carry a default here (the one place it is written) where a
    `conf/` node leaves the key out."""

    kind: str


def registers_settings(registry: Any, name: str) -> Callable[[T], T]:
    """Class decorator: register the class under `name` in `registry` (an `esc.registry.Registry`);
    the class must declare its own `Settings`, a `PluginSettings` model (inheriting another's is not
    declaring: a subclass reads keys of its own)."""

    def decorate(cls: T) -> T:
        model = vars(cls).get("Settings")
        if not (isinstance(model, type) and issubclass(model, PluginSettings)):
            raise TypeError(
                f"{registry.what} {name!r}: {getattr(cls, '__qualname__', cls)} declares no `Settings` "
                "(a PluginSettings model of the keys it reads)"
            )
        registry.add(name, cls)
        cls.registered_as = name  # type: ignore[attr-defined]
        return cls

    return decorate


class Registered:
    """A class a registry builds from its settings (a chat backend, a judge: `registers_settings`):
    its `Settings` model, the name it is registered under, and `of`, which builds one from keyword
    settings validated as a config node would be (code and tests that make one without a file)."""

    Settings: ClassVar[type[Any]]
    registered_as: ClassVar[str]
    config_node: ClassVar[str]  # where such a node sits by default, named in errors

    @classmethod
    def of(cls, config_key: str | None = None, **keys: Any) -> Self:
        key = config_key or cls.config_node
        settings = load_section(key, cls.Settings, {"kind": cls.registered_as, **plain_tree(keys)})
        return cls(settings, config_key=key)  # type: ignore[call-arg]


def plain_tree(value: Any) -> Any:
    """`value` with every OmegaConf node in it (at any depth) as plain dicts and lists, resolved."""
    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    if isinstance(value, Mapping) and not isinstance(value, BaseModel):
        return {k: plain_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_tree(v) for v in value]
    return value


@dataclasses.dataclass(frozen=True)
class PluginKind:
    """The marker of a field whose node a registry's class validates (`plugin`): `registry()` maps
    each `kind` to its class, whose `Settings` is the node's model."""

    registry: Callable[[], Mapping[str, Any]]
    what: str  # "backend", "judge": named in errors
    beside: type[BaseModel] | None = None  # keys its reader takes beside the class's (an extractor's name)

    def kinds(self) -> list[str]:
        return sorted(self.registry())

    def model(self, value: Any) -> type[PluginSettings] | None:
        """The settings model of the class `value`'s `kind` names, or None (not a known kind)."""
        kind = value.get("kind") if isinstance(value, Mapping) else getattr(value, "kind", None)
        found = self.registry()
        return found[kind].Settings if isinstance(kind, str) and kind in found else None

    def validate(self, value: Any, handler: Any) -> PluginSettings:
        if isinstance(value, PluginSettings):
            return value  # validated already (a section passed down)
        value = plain_tree(value)
        kind_model = _kind_models.setdefault(self, _kind_model(self))
        kind_model.model_validate(value)  # not a mapping, no kind, an unknown kind: at `kind`
        if self.beside is not None:
            self.beside.model_validate({k: value.get(k) for k in self.beside.model_fields})
            value = {k: v for k, v in value.items() if k not in self.beside.model_fields}
        model = self.model(value)
        assert model is not None
        return model.model_validate(value)


def _kind_model(marker: PluginKind) -> type[BaseModel]:
    """A model that checks only a node's `kind` (the rest is its class's model's)."""
    return type(
        f"{marker.what.title()}Kind",
        (BaseModel,),
        {
            "model_config": ConfigDict(extra="allow", strict=True),
            "__annotations__": {"kind": Annotated[str, registered(marker.kinds)]},
        },
    )


_kind_models: dict[PluginKind, type[BaseModel]] = {}


def plugin(
    registry: Callable[[], Mapping[str, Any]], what: str, beside: type[BaseModel] | None = None
) -> Any:
    """The type of a node whose `kind` picks a registered class (a backend, a judge): validated by
    that class's own `Settings` model, so a key it does not read, a string where it reads a boolean,
    a number out of its range is refused like any other setting, naming the whole dotted key.
    `beside`: a model of the keys the node's reader takes beside the class's (checked, then left out)."""
    marker = PluginKind(registry, what, beside)
    return Annotated[Any, WrapValidator(marker.validate), marker]


def node_model(node_type: Any) -> type[RootModel[Any]]:
    """A model whose whole value is a plugin node (`node_type` made by `plugin`): a section's model."""
    made = _node_models.get(id(node_type))
    if made is None or made[0] is not node_type:
        made = _node_models[id(node_type)] = (node_type, type("PluginNode", (RootModel[node_type],), {}))  # type: ignore[valid-type]
    return made[1]


_node_models: dict[int, tuple[Any, type[RootModel[Any]]]] = {}


def load_plugin(key: str, node_type: Any, value: Any) -> PluginSettings:
    """A plugin node (`node_type` made by `plugin`) as its class's settings; a ConfigError naming the
    dotted key below `key` otherwise."""
    if isinstance(value, PluginSettings):
        return value
    return load_section(key, node_model(node_type), value).root


# --- errors ---------------------------------------------------------------------------------------

_WANTED = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "bool_type": "true or false", "bool_parsing": "true or false", "string_type": "a string",
    "list_type": "a list, e.g. [a, b]", "dict_type": "a mapping of keys to values",
    "model_type": "a mapping of keys to values", "model_attributes_type": "a mapping of keys to values",
    "none_required": "null",
}  # fmt: skip
_BOUND = {"greater_than_equal": ">= {ge}", "greater_than": "> {gt}", "less_than_equal": "<= {le}",
          "less_than": "< {lt}", "multiple_of": "a multiple of {multiple_of}"}  # fmt: skip


def _model_at(model: Any, keys: Sequence[Any], value: Any = None) -> Any:
    """The model (or field annotation) reached from `model` along `keys` (in `value`, the node
    validated: a plugin node's model is its `kind`'s), or None."""
    if isinstance(model, type) and issubclass(model, RootModel):
        model = _unwrap(model.model_fields["root"].annotation, value, model.model_fields["root"].metadata)
    for key in keys:
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or key not in model.model_fields:
            return None
        field = model.model_fields[key]
        value = value.get(key) if isinstance(value, Mapping) else None
        model = _unwrap(field.annotation, value, field.metadata)
    return model


def _unwrap(annotation: Any, value: Any = None, metadata: Sequence[Any] = ()) -> Any:
    """The model inside `X | None`, `Annotated[X, ...]` (a plugin node: the model of `value`'s kind);
    the annotation itself otherwise."""
    for marker in metadata:
        if isinstance(marker, PluginKind):
            return marker.model(value) or annotation
    if isinstance(annotation, PluginKind):
        return annotation.model(value) or annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _unwrap(arg, value)
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    return annotation


_NUMERIC = {
    "int_type",
    "int_parsing",
    "int_from_float",
    "float_type",
    "float_parsing",
    "finite_number",
    *_BOUND,
}


def _field(model: Any, keys: Sequence[Any], value: Any = None) -> Any:
    """The FieldInfo of the key `keys` reach from `model`, or None."""
    parent = _model_at(model, keys[:-1], value)
    is_model = isinstance(parent, type) and issubclass(parent, BaseModel)
    return parent.model_fields.get(keys[-1]) if is_model and keys else None


def _wanted(field: Any) -> str | None:
    """A number field as one phrase: "an integer >= 1 or null", "a number > 0 and <= 1"; else None."""
    kinds = set(get_args(field.annotation)) or {field.annotation}
    base = "an integer" if int in kinds else "a number" if float in kinds else None
    if base is None:
        return None
    names = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "multiple_of": "a multiple of"}
    bounds = [
        f"{op} {_number(getattr(m, name))}"
        for m in field.metadata
        for name, op in names.items()
        if getattr(m, name, None) is not None
    ]
    return base + (f" {' and '.join(bounds)}" if bounds else "") + (" or null" if type(None) in kinds else "")


def _hint(model: Any, keys: Sequence[Any], value: Any = None) -> str:
    """A field's `description`: what follows the problem (e.g. "the paper plays 5"); an entry of a
    mapping field (`jury.members.NAME`) takes its field's."""
    for depth in (len(keys), len(keys) - 1):
        parent = _model_at(model, keys[: depth - 1], value) if depth > 0 else None
        if (
            isinstance(parent, type)
            and issubclass(parent, BaseModel)
            and keys[depth - 1] in parent.model_fields
        ):
            return parent.model_fields[keys[depth - 1]].description or ""
    return ""


def _keys(loc: Sequence[Any], value: Any, missing: bool = False) -> list[Any]:
    """The config keys in a pydantic `loc`: what a union adds (`constrained-int`, `list[str]`) dropped;
    a `missing` key's last part is not in `value`."""
    keys: list[Any] = []
    for i, part in enumerate(loc):
        if missing and i == len(loc) - 1:
            keys.append(part)
        elif isinstance(value, Mapping) and part in value:
            keys.append(part)
            value = value[part]
        elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
            keys.append(part)
            value = value[part]
    return keys


def _dotted(node: str, keys: Sequence[Any]) -> str:
    key = node
    for part in keys:
        key = f"{key}[{part}]" if isinstance(part, int) else f"{key}.{part}" if key else str(part)
    return key


def _number(value: Any) -> Any:
    """A bound as the YAML writes it: 0, not 0.0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _bound(kind: str, ctx: Mapping[str, Any], value: Any) -> str:
    """A range a value missed, with the type it has: "an integer >= 1" (a union's member)."""
    what = "an integer" if is_int(value) else "a number"
    return f"{what} {_BOUND[kind].format(**{k: _number(v) for k, v in ctx.items()})}"


def _choices(expected: Any) -> str:
    """pydantic's "'a', 'b' or 'c'" as the command line writes them: a, b, c."""
    return str(expected).replace("'", "").replace(" or ", ", ")


def _problem(
    errors: list[Mapping[str, Any]], key: str, node_model: Any, keys: list[Any], value: Any = None
) -> str:
    """One sentence for the errors pydantic gave at one key (several where it tried a union)."""
    first = errors[0]
    kind, ctx = first["type"], first.get("ctx") or {}
    if kind == "missing":
        return (
            f"is not set, and this run reads it: keep the value conf/ gives it (no ~{key}) or set one "
            f"(+{key}=VALUE)"
        )
    if kind == "extra_forbidden":
        parent = _model_at(node_model, keys[:-1], value)
        known = ", ".join(sorted(parent.model_fields)) if isinstance(parent, type) else ""
        return f"unknown key (a typo?); `{key.rpartition('.')[0] or 'the top level'}` takes {known}"
    if kind == "unknown_key":
        return f"unknown key (a typo?); `{key.rpartition('.')[0]}` takes {', '.join(ctx['known'])}"
    field = _field(node_model, keys, value)
    nullable = field is not None and type(None) in get_args(field.annotation)
    if kind == "too_short" and not first["input"]:
        return "is an empty list, which selects nothing" + ("; use null for the default" if nullable else "")
    wanted_field = _wanted(field) if field is not None and kind in _NUMERIC else None
    if wanted_field and len(errors) == 1:
        return f"must be {wanted_field}, got {show(first['input'])}"
    custom = [e for e in errors if e["type"] == "config"]
    if custom:  # a check's own sentence
        return str(custom[-1]["ctx"]["problem"])
    wanted: list[str] = []
    for error in errors:
        t, c = error["type"], error.get("ctx") or {}
        text = (
            _WANTED.get(t)
            or (_bound(t, c, error["input"]) if t in _BOUND else None)
            or (
                f"one of {_choices(c['expected'])}{' or null' if nullable else ''}"
                if t == "literal_error"
                else None
            )
            or (f"at most {c.get('max_length')} items" if t == "too_long" else None)
            or (f"at least {c.get('min_length')} items" if t == "too_short" else None)
            or error["msg"]
        )
        if text not in wanted:
            wanted.append(text)
    return f"must be {' or '.join(wanted)}, got {show(first['input'])}"


def relation(key: str, problem: str) -> PydanticCustomError:
    """What a model's check across its keys raises: `problem` with `key` (dotted, below the node)."""
    return PydanticCustomError("relation", "{problem}", {"key": key, "problem": problem})


def config_error(err: ValidationError, node: str, value: Any, model: Any) -> ConfigError:
    """The first problem of `err` (validating `value`, the node `node`, with `model`) as one
    ConfigError naming its dotted key; a union's problems at one key in one sentence."""
    found = [(e, _keys(e["loc"], value, e["type"] == "missing")) for e in err.errors(include_url=False)]
    found.sort(key=lambda f: f[0]["type"] != "extra_forbidden")  # a typo first: it explains a missing key
    first, keys = found[0]
    if first["type"] in ("unknown_key", "relation"):  # raised by a model's own check: it names the key
        key = _dotted(node, [*keys, *str(first["ctx"]["key"]).split(".")])
        if first["type"] == "relation":
            return ConfigError(key, str(first["ctx"]["problem"]))
        return ConfigError(key, _problem([first], key, model, keys, value))
    # a union: the branch that got furthest (deepest key), all its errors at that key
    deepest = max((k for _, k in found if k[: len(keys)] == keys), key=len)
    same = [e for e, k in found if k == deepest]
    # the key a command line sets (`cards.languages`), then which item of its list
    at = next((i for i, k in enumerate(deepest) if isinstance(k, int)), len(deepest))
    key = _dotted(node, deepest[:at])
    problem = _problem(same, _dotted(node, deepest), model, deepest, value)
    items = "".join(f"item {k}: " if isinstance(k, int) else f"{k}: " for k in deepest[at:])
    hint = _hint(model, deepest[:at], value) if first["type"] != "missing" else ""
    return ConfigError(key, items + (f"{problem} ({hint})" if hint else problem))


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
        raise config_error(err, node, value, model) from None


# --- sections -------------------------------------------------------------------------------------


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


def typed_section(
    node: str, model: type[BaseModel], when: Callable[[Any], bool] | None = None, missing: str = ""
) -> Section:
    """The section of `model` at `node`, read whole: it must be there where `when` holds; `missing`
    says how to add it when an experiment brings it."""
    return Section(node, model, when, missing=missing)


def _first_above_zero(value: list[Any]) -> str | None:
    return None if value[0] > 0 else f"the first must be above 0, got {show(value)}"


def ratios(*parts: str) -> Any:
    """One number >= 0 for each of `parts` (e.g. train, val, test), the first > 0: what a split
    divides by (`[0, 0, 0]` divides nothing)."""
    size = len(parts)
    return Annotated[
        list[Annotated[float, Field(ge=0)]],
        Field(min_length=size, max_length=size, description=" : ".join(parts)),
        check(_first_above_zero),
    ]


def path_problem(kind: Literal["file", "dir", "any"] = "any") -> Callable[[Any], str | None]:
    """What is wrong with a path that must exist (a file, a directory, either), or None."""
    return _existing(kind)
