"""A jury: several judges in one run (`jury.members.<key>`, each a judge node), and how their
judgments pool. The settings sit here, below every task, because the runner builds the jury before
any task reads it; what a jury's judgments show is the score task's report (`esc.tasks.score.jury`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from esc.config_rules import Settings

JURY = "jury"
POOLS = ("mean", "median")
READINGS = ("expected", "stated")


class JurySettings(Settings):
    """`jury` (conf/jury/): the members' judge nodes by key, and how their judgments pool."""

    members: dict[str, Any]
    pool: Literal[POOLS]  # type: ignore[valid-type]
    min_valid: int | None = Field(ge=1, description="null: every judge")
    reading: Literal[READINGS]  # type: ignore[valid-type]

    @property
    def names(self) -> list[str]:
        """The members' names (a member node's `name`, or its key)."""
        return jury_names({"members": self.members})


def jury_names(jury: Mapping[str, Any] | None) -> list[str]:
    """The judges' names of a `jury` node (`jury.members.<key>`: a judge node, named by its `name`)."""
    members = (jury or {}).get("members") or {}
    return [str((node or {}).get("name") or key) for key, node in members.items()]
