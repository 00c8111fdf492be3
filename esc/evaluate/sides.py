"""The config nodes of a dialogue's parties: the role-player, the target, the trajectory's observer."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from esc.chat.base import Generation
from esc.chat.build import Backend
from esc.config_rules import Settings
from esc.settings.types import FileName


class TargetSettings(Settings):
    """A `target:` node (conf/target/): the chatbot under test. `system_prompt` and
    `weights_unavailable` are written only where a target has one."""

    name: FileName = Field(description="it names the dialogue files")
    display_name: Any
    notes: Any
    backend: Backend
    generation: Generation
    system_prompt: str | None = None
    weights_unavailable: str | None = None


class ObserverSettings(TargetSettings):
    """`trajectory.observer`: any target's node (`+target@trajectory.observer=smollm2`); its backend
    rates the seeker's emotion. Unset (`backend: null`) where the role-player rates."""

    name: FileName | None
    display_name: Any = None
    notes: Any = None
    backend: Backend | None
    generation: Generation = Field(None)


class RoleplayerSettings(Settings):
    """A `roleplayer:` node (conf/roleplayer/): the seeker simulator."""

    name: FileName = Field(description="it names the dialogue files")
    prompt: str
    icl: bool
    notes: Any
    backend: Backend
    generation: Generation
