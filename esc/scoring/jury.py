"""A jury: several judges in one run (`jury.members.<key>`, each a judge node), and how their
judgments pool. The settings sit here, below every task, because the runner builds the jury before
any task reads it; what a jury's judgments show is the score task's report (`esc.tasks.score.jury`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import Field, model_validator

from esc.config_rules import Settings, relation
from esc.scoring.judges import JudgeNode
from esc.settings.types import file_name_problem

JURY = "jury"
POOLS = ("mean", "median")
READINGS = ("expected", "stated")


class JurySettings(Settings):
    """`jury` (conf/jury/): the members' judge nodes by key, and how their judgments pool.
    conf/jury/none.yaml has no members and the pooling settings, so an ad hoc jury
    (`+judge@jury.members.a=tiny +judge@jury.members.b=smollm2`) takes them from there."""

    members: dict[str, JudgeNode] = Field(description="add one with +judge@jury.members.NAME=OPTION")
    pool: Literal[POOLS]  # type: ignore[valid-type]
    min_valid: int | None = Field(ge=1, description="null: every judge")
    reading: Literal[READINGS]  # type: ignore[valid-type]

    @property
    def names(self) -> list[str]:
        """The members' names (a member node's `name`, or its key)."""
        return jury_names({"members": self.members})

    @model_validator(mode="after")
    def _members(self) -> Self:
        names = self.names
        if len(set(names)) != len(names) or JURY in names:
            raise relation(
                "members",
                f"the judges' names must differ and not be {JURY!r} (files and rows are named by them): "
                f"{names}",
            )
        for name in names:
            problem = file_name_problem(name)
            if problem:
                raise relation("members", f"a judge's name {problem} (it names the score files)")
        if names and self.min_valid is not None and self.min_valid > len(names):
            raise relation("min_valid", f"is {self.min_valid}, but the jury has {len(names)} judges")
        return self


def jury_names(jury: Mapping[str, Any] | None) -> list[str]:
    """The judges' names of a `jury` node (`jury.members.<key>`: a judge node, named by its `name`)."""
    members = (jury or {}).get("members") or {}
    return [
        str(
            node.get("name") if isinstance(node, Mapping) and node.get("name") else getattr(node, "name", key)
        )
        for key, node in members.items()
    ]
