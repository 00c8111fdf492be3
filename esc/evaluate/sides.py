"""The config nodes of a dialogue's parties: the role-player and the seeker profile it plays, the
target, the trajectory's observer."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from esc.chat.base import Generation
from esc.chat.build import Backend
from esc.config_rules import Settings, check, relation
from esc.prompts.registry import needs_example, prompt_problem
from esc.prompts.seekers import profile_problem
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
    prompt: Annotated[str, check(prompt_problem)]
    icl: bool = Field(description="true: the prompt embeds the example dialogue (an ICL prompt)")
    notes: Any
    backend: Backend
    generation: Generation

    @model_validator(mode="after")
    def _icl_matches_prompt(self) -> RoleplayerSettings:
        if self.icl != needs_example(self.prompt):
            want = (
                "an ICL prompt, which embeds the example dialogue"
                if needs_example(self.prompt)
                else "no ICL prompt"
            )
            raise relation(
                "icl", f"must be {str(not self.icl).lower()}: roleplayer.prompt {self.prompt} is {want}"
            )
        return self


class SeekerSettings(Settings):
    """A `seeker:` node (conf/seeker/): the profile the role-player plays (esc/prompts/seekers.yaml),
    one more line of every role card; `cooperative` adds none."""

    name: Annotated[str, check(profile_problem)]
