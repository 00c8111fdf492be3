"""`build_backend`: a config node to a chat backend, from the registry (`esc.chat.base.REGISTRY`,
which finds the backends of `esc.chat.backends` on its first lookup)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from esc.chat.base import REGISTRY, ChatBackend
from esc.config_rules import Device, ExistingDir, OpenSettings, Plugin, Section, registered
from esc.errors import ConfigError
from esc.models.loading import AUTO_CLASSES


def build_backend(cfg: Mapping[str, Any], key: str = "backend") -> ChatBackend:
    """Build the backend a config node describes: ``kind`` picks the class, the rest are its arguments."""
    cfg = dict(cfg)
    kind = cfg.pop("kind", None)
    if kind not in REGISTRY:
        raise ConfigError(f"{key}.kind", f"unknown backend {kind!r}; known: {sorted(REGISTRY)}")
    factory = REGISTRY[kind]
    if "config_key" not in cfg and "config_key" in inspect.signature(factory).parameters:
        cfg["config_key"] = key  # its errors name the key as the config spells it
    try:
        return factory(**cfg)
    except TypeError as err:
        raise ConfigError(key, f"{kind} backend: {err}") from None


def backend_kinds() -> list[str]:
    """Every `kind:` a backend config may name (the built-in backends and any registered since)."""
    return sorted(REGISTRY)


class ModelNode(OpenSettings):
    """A backend's `model:` (conf/model/): transformers reads its keys; `auto_class` is checked here."""

    auto_class: Literal[AUTO_CLASSES] | None = Field(None, description="AutoModel for a custom architecture")  # type: ignore[valid-type]


class Backend(Plugin):
    """A backend node: `kind` one the registry knows, its keys the arguments of that kind's class
    (whose signature holds what the node leaves out); these keys are checked where given."""

    kind: Annotated[str, registered(backend_kinds)]
    registry = staticmethod(lambda: REGISTRY)
    device: Device = Field(None, description="auto: a CUDA GPU when there is one")
    adapter: ExistingDir | None = Field(None, description="a PEFT adapter directory")
    batch_size: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(None, description="or auto")
    model: ModelNode | str = Field(None)  # a local model's node, or an API's model name


def backend_model(*beside: str) -> type[Backend]:
    """The model of a backend node that the code reads `beside` keys of too (an extractor's `name`)."""
    return type("Backend", (Backend,), {"beside": beside}) if beside else Backend


def backend_config(node: str, *beside: str) -> Section:
    """The section of a backend node at `node` (and the keys read `beside` its class's arguments)."""
    return Section(node, backend_model(*beside))
