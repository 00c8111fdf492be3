"""What people annotate: three kinds of task, each a list of fields with the values allowed.

- ``dialogue``: an ESC-Eval dialogue scored on the 7 dimensions, 0-4 (paper Table 16; the rules of
  `esc/scoring/rubrics.yaml`);
- ``roleplay``: a role-play dialogue scored on the 6 role-play metrics, 0-2 (paper Table 10;
  `esc/scoring/roleplay_metrics.yaml`);
- ``card``: a role card graded high / middle / invalid (paper Table 8; `esc/cards/grading.yaml`)
  and placed in a tertiary category of the taxonomy (Table 9).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from esc.cards.grading import grading
from esc.cards.taxonomy import load_taxonomy
from esc.errors import UserError
from esc.scoring.roleplay_metrics import roleplay_metrics
from esc.scoring.rubrics import annotation_rules, dimensions

KINDS = ("dialogue", "roleplay", "card")


@dataclasses.dataclass(frozen=True)
class Field:
    """One label a person gives: its name, the values allowed (as text, in order), whether they are
    ordered (scores) or not (categories), and the guidance shown for it."""

    name: str
    title: str
    values: tuple[str, ...]
    ordinal: bool
    guide: str = ""
    hints: tuple[str, ...] = ()  # one per value, shown beside it

    def parse(self, value: Any) -> str | None:
        """The allowed value `value` stands for ("3", 3 and 3.0 are "3"), or None if it is none."""
        if isinstance(value, bool):
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        text = str(value).strip()
        return text if text in self.values else None


@dataclasses.dataclass(frozen=True)
class TaskKind:
    name: str
    fields: tuple[Field, ...]
    instructions: str

    def field(self, name: str) -> Field:
        for field in self.fields:
            if field.name == name:
                return field
        raise KeyError(name)


def _scored(key: str, title: str, focus: str, levels: dict[Any, str]) -> Field:
    values = tuple(str(k) for k in sorted(int(k) for k in levels))
    return Field(key, title, values, True, focus, tuple(levels[int(v)] for v in values))


@functools.cache
def task_kind(name: str) -> TaskKind:
    """The task kind called `name` (one of KINDS)."""
    if name == "dialogue":
        rules = annotation_rules()
        fields = tuple(
            # titled by the paper's name (Table 2) as every view is, not Table 16's own spelling
            # ("Diversity", "Humaniod"), which stays in rubrics.yaml with the rules it heads
            _scored(d.key, d.paper_name, rules[d.key]["focus"], rules[d.key]["levels"])
            for d in dimensions()
        )
        return TaskKind(
            name, fields, "Score the AI assistant in this dialogue on each dimension, 0-4 (paper Table 16)."
        )
    if name == "roleplay":
        data = roleplay_metrics()
        fields = tuple(
            _scored(m["key"], m["table_name"], m["explanation"], m["levels"]) for m in data["metrics"]
        )
        return TaskKind(
            name,
            fields,
            "Score the role-player (the person with the worry) on each metric, 0-2 (paper Table 10).",
        )
    if name == "card":
        data = grading()
        rules = {g: " ".join(f"{i + 1}. {r}" for i, r in enumerate(data["rules"][g])) for g in data["grades"]}
        taxonomy = load_taxonomy()
        leaves = taxonomy.tier3_keys()
        grades = tuple(data["grades"])
        fields = (
            Field("grade", "Quality", grades, False, "Table 8", tuple(rules[g] for g in grades)),
            Field(
                "category", "Category", tuple(leaves), False, "Table 9: the tertiary category of the problem",
                tuple(taxonomy.node(k).en for k in leaves),
            ),
        )  # fmt: skip
        return TaskKind(
            name, fields, "Grade the role card and pick the category of its problem (paper Tables 8, 9)."
        )
    raise UserError(f"unknown task kind {name!r}; known: {', '.join(KINDS)}")
