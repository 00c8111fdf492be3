"""The dialogue record: a role-player and a target model in turn, and the two views each side sees.

The role-player plays the help-seeker: in its view it is the *assistant*, the target's replies are
*user* turns, and the conversation opens with the supporter's opener. The target sees the same
dialogue the normal way: the role-player's messages are *user* turns and its own are *assistant*.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from esc.chat.base import Message, Reply
from esc.errors import DataError

Speaker = Literal["roleplayer", "target"]


@dataclasses.dataclass
class Turn:
    speaker: Speaker
    text: str
    finish_reason: str
    latency_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached: bool = False
    context_dropped: int = 0  # earlier messages left out because the context window was full
    # how the seeker feels after this turn (trajectory.enabled: the seeker's first turn, then every
    # target reply): {"value": 0-100 | None, "status", "rating", "expected", "probs", "reason", ...}
    emotion: dict[str, Any] | None = None
    # which server answered, where a backend spreads its requests over several (`base_url` a list)
    server: str | None = None

    @classmethod
    def from_reply(cls, speaker: Speaker, reply: Reply, context_dropped: int = 0) -> Turn:
        return cls(
            speaker,
            reply.text,
            reply.finish_reason,
            round(reply.latency_s, 4),
            reply.prompt_tokens,
            reply.completion_tokens,
            reply.cached,
            context_dropped,
            server=reply.server,
        )


@dataclasses.dataclass
class Dialogue:
    """One role card played against one target. `status` is "complete" or "failed"."""

    card_id: int
    language: str
    roleplayer: str
    target: str
    system_prompt: str
    opener: str
    target_system_prompt: str | None
    turns: list[Turn] = dataclasses.field(default_factory=list)
    status: str = "running"
    error: str | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    stop_reason: str | None = None  # trajectory.stop: success | failure | max_turns

    @property
    def key(self) -> tuple[int, str]:
        return (self.card_id, self.language)

    @property
    def seeker(self) -> dict[str, Any] | None:
        """The seeker profile the role-player played, as the record names it (`meta.seeker`: name,
        version, sha256 of its instruction; esc/prompts/seekers.yaml). None: the cooperative seeker,
        which adds nothing to a record (its records are those made before profiles existed)."""
        return self.meta.get("seeker")

    def seeker_profile(self) -> dict[str, Any] | None:
        """The profile as a run folder's settings record it (name, version; None: cooperative)."""
        return None if self.seeker is None else {k: self.seeker.get(k) for k in ("name", "version")}

    def roleplayer_view(self) -> list[Message]:
        """The conversation as the role-player sees it: it is the assistant."""
        messages: list[Message] = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": self.opener},
        ]
        for turn in self.turns:
            role = "assistant" if turn.speaker == "roleplayer" else "user"
            messages.append({"role": role, "content": turn.text})
        return messages

    def target_view(self) -> list[Message]:
        """The conversation as the target sees it: the role-player is the user. No opener."""
        messages: list[Message] = []
        if self.target_system_prompt:
            messages.append({"role": "system", "content": self.target_system_prompt})
        for turn in self.turns:
            role = "user" if turn.speaker == "roleplayer" else "assistant"
            messages.append({"role": role, "content": turn.text})
        return messages

    def fail(self, reason: str) -> None:
        self.status = "failed"
        self.error = reason

    def to_dict(self) -> dict[str, Any]:
        """The JSON record. The trajectory fields (`Turn.emotion`, `stop_reason`) and `Turn.server` are
        written only when set, so the files of runs without them are what they always were."""
        data = dataclasses.asdict(self)
        for turn in data["turns"]:
            for optional in ("emotion", "server"):
                if turn[optional] is None:
                    del turn[optional]
        if data["stop_reason"] is None:
            del data["stop_reason"]
        return data

    def lines(self) -> list[tuple[str, str]]:
        """What a reader sees, as (role, text): the opener (the supporter's, role "assistant"), then
        the seeker ("user") and the target ("assistant") in turn."""
        lines = [("assistant", self.opener)] if self.opener else []
        return lines + [("user" if t.speaker == "roleplayer" else "assistant", t.text) for t in self.turns]

    def trajectory(self) -> list[tuple[int, dict[str, Any]]]:
        """(turn index, rating) of every rated turn, in order."""
        return [(i, t.emotion) for i, t in enumerate(self.turns) if t.emotion is not None]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Dialogue:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["turns"] = [Turn(**t) for t in data.get("turns", [])]
        return cls(**values)


def profiled_id(path: Path | str, dialogue: Dialogue) -> str:
    """The dialogue's id with its seeker profile: `<file stem>/<card id>` (the id every mode gives a
    dialogue) for the cooperative seeker's, `<file stem>~<profile>/<card id>` for a dialogue a hard
    profile played (`Dialogue.seeker`). rank.py mode=robustness reads a cooperative and a resistant
    folder whose files share their names (`tiny__tiny__en.jsonl`): this is how it, and the report
    site, tell their dialogues apart."""
    profile = (dialogue.seeker or {}).get("name")
    stem = Path(path).stem if not profile else f"{Path(path).stem}~{profile}"
    return f"{stem}/{dialogue.card_id}"


def dialogue_lines(dialogue: Dialogue, path: Path, lineno: int) -> tuple[tuple[str, str], ...]:
    """The (role, text) lines a judge and an annotator read: the opener, then role-player and
    target in turn. A DataError naming file and line when the turns do not alternate."""
    if not dialogue.turns:
        raise DataError(path, f"line {lineno}", f"dialogue of card {dialogue.card_id} has no turns")
    for i, turn in enumerate(dialogue.turns):
        expected = "roleplayer" if i % 2 == 0 else "target"
        if turn.speaker != expected:
            raise DataError(
                path,
                f"line {lineno}",
                f"turn {i} is by {turn.speaker!r}, expected {expected!r} (turns missing?)",
            )
        if not isinstance(turn.text, str) or not turn.text.strip():
            raise DataError(
                path,
                f"line {lineno}",
                f"turn {i} ({turn.speaker}) has no text: a dialogue with an empty reply is never scored "
                "(evaluate.py fails such a dialogue; delete this line and rerun evaluate.py on the folder "
                "to play the card again)",
            )
    return tuple(dialogue.lines())
