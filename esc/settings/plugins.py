"""A backend's or judge's config node: its `kind` one a registry knows, the rest validated by the
`Settings` model (a `PluginSettings`) that the class registered under that kind declares; the class
is built from that instance (`registers_settings`, `Registered`, `plugin`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Self, TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    RootModel,
    WrapValidator,
)
from pydantic_core import PydanticCustomError

from esc.config_rules import Settings, check, load_section, show

T = TypeVar("T")


def registered(kinds: Callable[[], Sequence[str]], says: str = "a registered kind") -> AfterValidator:
    """One of the kinds a registry knows when the check runs (`backend_kinds`, `judge_kinds`): a
    backend or judge registered by a plugin is a valid `kind:` too."""

    def problem(value: Any) -> str | None:
        known = list(kinds())
        return None if value in known else f"must be one of {', '.join(known)}, got {show(value)}"

    made = check(problem, says)
    made.func.kinds = kinds  # type: ignore[attr-defined]  # the docs list them (esc.config_docs)
    return made


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
        settings = load_node(key, cls.Settings, {"kind": cls.registered_as, **plain_tree(keys)})
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
    hint: str = ""  # how to give one, where a value is no node ("+judge@KEY=OPTION")

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
        if not isinstance(value, Mapping):
            problem = f"must be a {self.what}'s node (its keys), got {show(value)}"
            raise PydanticCustomError("config", "{problem}", {"problem": problem + self.hint})
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
    registry: Callable[[], Mapping[str, Any]],
    what: str,
    beside: type[BaseModel] | None = None,
    hint: str = "",
) -> Any:
    """The type of a node whose `kind` picks a registered class (a backend, a judge): validated by
    that class's own `Settings` model, so a key it does not read, a string where it reads a boolean,
    a number out of its range is refused like any other setting, naming the whole dotted key.
    `beside`: a model of the keys the node's reader takes beside the class's (checked, then left out)."""
    marker = PluginKind(registry, what, beside, f" ({hint})" if hint else "")
    return Annotated[Any, WrapValidator(marker.validate), marker]


def node_model(node_type: Any) -> type[RootModel[Any]]:
    """A model whose whole value is a plugin node (`node_type` made by `plugin`): a section's model."""
    made = _node_models.get(id(node_type))
    if made is None or made[0] is not node_type:
        made = _node_models[id(node_type)] = (node_type, type("PluginNode", (RootModel[node_type],), {}))  # type: ignore[valid-type]
    return made[1]


_node_models: dict[int, tuple[Any, type[RootModel[Any]]]] = {}


def load_node(key: str, node: Any, value: Any) -> Any:
    """The one validation of a config node, wherever it comes from (a job's schema,
    `esc.config_schema`; a registered class's keyword settings, `Registered.of`; a node made in code,
    `load_plugin`; a section of a saved manifest): `value` at the dotted `key` as an instance of
    `node`, a model, or a plugin type (`plugin`), whose class's settings it returns. A value validated
    already passes as it is; a ConfigError naming the dotted key below `key` otherwise."""
    model = node if isinstance(node, type) and issubclass(node, BaseModel) else node_model(node)
    if isinstance(value, PluginSettings if issubclass(model, RootModel) else model):
        return value
    checked = load_section(key, model, value)
    return checked.root if isinstance(checked, RootModel) else checked


def load_plugin(key: str, node_type: Any, value: Any) -> PluginSettings:
    """A plugin node (`node_type` made by `plugin`) as its class's settings (`load_node`)."""
    return load_node(key, node_type, value)  # type: ignore[no-any-return]
