"""`build_backend`: a validated config node to a chat backend, from the registry (`esc.chat.base.REGISTRY`,
which finds the backends of `esc.chat.backends` on its first lookup).

A backend node's type is `Backend`: its `kind` picks the registered class, whose own settings model
(`Settings`, `esc.chat.settings.BackendSettings`) validates the rest, so the instance a job's
validation returns is that model's, and `build_backend` builds the class from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from esc.chat.base import REGISTRY, ChatBackend
from esc.chat.settings import BackendSettings
from esc.config_rules import Section
from esc.settings.plugins import load_plugin, node_model, plugin

Backend = plugin(lambda: REGISTRY, "backend")
"""The type of a backend node: validated by the settings model of the class its `kind` names."""


def build_backend(settings: BackendSettings, key: str = "backend") -> ChatBackend:
    """The backend of a validated node (what `esc.config_schema.validate` returned, or
    `backend_settings`); `key` is where the node sits in the config, named in its errors."""
    if not isinstance(settings, BackendSettings):
        raise TypeError(f"build_backend takes a backend's settings, not {type(settings).__name__}")
    return REGISTRY[settings.kind](settings, config_key=key)


def backend_settings(node: Mapping[str, Any], key: str = "backend") -> BackendSettings:
    """A backend node made in code (a judge's own backend, a test's) validated as a config node
    would be: its class's settings, or a ConfigError naming the dotted key below `key`."""
    return load_plugin(key, Backend, node)  # type: ignore[return-value]


def backend_kinds() -> list[str]:
    """Every `kind:` a backend config may name (the built-in backends and any registered since)."""
    return sorted(REGISTRY)


def backend_config(node: str, beside: type[BaseModel] | None = None) -> Section:
    """The section of a backend node at `node` (`beside`: the keys its reader takes beside the
    backend's, e.g. an extractor's `name`)."""
    node_type = Backend if beside is None else plugin(lambda: REGISTRY, "backend", beside)
    return Section(node, node_model(node_type))
