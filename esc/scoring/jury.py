"""A jury: several judges in one run (`jury.members.<key>`, each a judge node), and how their
judgments pool. The settings sit here, below every task, because the runner builds the jury before
any task reads it; what a jury's judgments show is the score task's report (`esc.tasks.score.jury`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from esc.config_rules import integer, one_of, setting

JURY = "jury"
POOLS = ("mean", "median")
READINGS = ("expected", "stated")


@dataclasses.dataclass
class JurySettings:
    """`jury` (conf/jury/): the members' judge nodes by key, and how their judgments pool."""

    members: dict[str, Any] = setting()
    pool: str = setting(one_of(*POOLS))
    min_valid: int | None = setting(integer(1, null=True), "null: every judge")
    reading: str = setting(one_of(*READINGS))

    @property
    def names(self) -> list[str]:
        """The members' names (a member node's `name`, or its key)."""
        return jury_names({"members": self.members})


def jury_names(jury: Mapping[str, Any] | None) -> list[str]:
    """The judges' names of a `jury` node (`jury.members.<key>`: a judge node, named by its `name`)."""
    members = (jury or {}).get("members") or {}
    return [str((node or {}).get("name") or key) for key, node in members.items()]
