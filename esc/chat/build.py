"""`build_backend`: a config node to a chat backend, from the registry (`esc.chat.base.REGISTRY`,
which finds the backends of `esc.chat.backends` on its first lookup)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from esc.chat.base import REGISTRY, ChatBackend
from esc.config_rules import Rule, Section, device, either, integer, one_of, path, registered, registry_keys
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


def backend_config(node: str, *extra: str) -> Section:
    """The schema of a backend node: its `kind` one the registry knows, its keys the arguments of the
    class registered under that kind (and `extra`, read beside them)."""
    return Section(
        node,
        (
            Rule("kind", registered(backend_kinds)),
            Rule("device", device(), "auto: a CUDA GPU when there is one"),
            Rule("adapter", path("dir", null=True), "a PEFT adapter directory"),
            Rule("batch_size", either(one_of("auto"), integer(1)), "or auto"),
            Rule("model.auto_class", one_of(*AUTO_CLASSES, null=True)),
        ),
        registry_keys(lambda: REGISTRY, *extra),
    )
