"""`build_backend`: a config node to a chat backend, from the registry (`esc.chat.base.REGISTRY`,
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


def build_backend(node: Mapping[str, Any] | BackendSettings, key: str = "backend") -> ChatBackend:
    """The backend a config node describes (validated here unless it is a settings instance already);
    `key` is where the node sits in the config, which its errors name (`judge.backend.max_retries`)."""
    settings = load_plugin(key, Backend, node)
    return REGISTRY[settings.kind](settings, config_key=key)


def backend_kinds() -> list[str]:
    """Every `kind:` a backend config may name (the built-in backends and any registered since)."""
    return sorted(REGISTRY)


def backend_config(node: str, beside: type[BaseModel] | None = None) -> Section:
    """The section of a backend node at `node` (`beside`: the keys its reader takes beside the
    backend's, e.g. an extractor's `name`)."""
    node_type = Backend if beside is None else plugin(lambda: REGISTRY, "backend", beside)
    return Section(node, node_model(node_type))
