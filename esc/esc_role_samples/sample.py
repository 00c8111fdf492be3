"""The `Sample` record shared by all readers, and helpers to read files and shape dialogues."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypedDict

from esc.esc_role_samples.echo import card_echo_turns
from esc.prompts import role_player_system_prompt, supporter_opener

Role = Literal["system", "user", "assistant"]


class Message(TypedDict):
    """One chat message in the Hugging Face chat-template format."""

    role: Role
    content: str


@dataclass(frozen=True)
class Sample:
    """One training dialogue: a system prompt, then alternating user/assistant turns.

    `id` is stable across machines and runs (e.g. "esconv/train/17"); `assistant` turns are the
    ones the model learns (the seeker in ESC data, the character in role-play data), except those
    whose message index is in `hold_out`: they stay in the context but carry no labels (a seeker
    turn that recites the role card, `esc.esc_role_samples.echo`). `group` names the dialogue a sample comes
    from when several samples share one (CharacterEval scenes, RoleBench sessions); the train/val
    split keeps a group together. None means the sample is its own group.
    `learn_end_of_turn=False` learns an assistant turn's content without its end-of-turn token (an
    ESC-RANK answer is the digit alone); `weight` is the sample's share in weighted sampling or a
    weighted loss (ESC-RANK's class balance; 1 everywhere else).
    """

    id: str
    source: str
    language: Literal["en", "zh"]
    split_hint: str | None
    messages: list[Message] = field(default_factory=list)
    group: str | None = None
    hold_out: tuple[int, ...] = ()
    learn_end_of_turn: bool = True
    weight: float = 1.0

    @property
    def split_key(self) -> str:
        """The id the train/val split is decided on (the dialogue, not the sample)."""
        return self.group or self.id

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for `datasets.Dataset.from_list` or JSON); `hold_out` as a list."""
        out = asdict(self)
        out["hold_out"] = list(self.hold_out)
        return out

    def learned_turns(self) -> list[int]:
        """Indices of the messages the model learns: assistant turns not held out."""
        return [i for i, m in enumerate(self.messages) if m["role"] == "assistant" and i not in self.hold_out]


def merge_turns(turns: Iterable[tuple[Role, str]]) -> list[Message]:
    """Merge consecutive turns of the same role with a newline; blank turns are dropped."""
    merged: list[Message] = []
    for role, text in turns:
        text = text.strip()
        if not text:
            continue
        if merged and merged[-1]["role"] == role:
            merged[-1]["content"] += "\n" + text
        else:
            merged.append({"role": role, "content": text})
    return merged


def shape_dialogue(
    system: str, turns: Iterable[tuple[Role, str]], first_user: str | None
) -> list[Message] | None:
    """Build system + alternating user/assistant messages ending with an assistant turn.

    `turns` are (role, text) with role "user" or "assistant". When the assistant speaks first,
    `first_user` is inserted as the opening user turn (or, if None, the leading assistant turns
    are dropped). Trailing user turns are dropped (nothing to learn after them). Returns None if
    no assistant turn is left.
    """
    body = merge_turns(turns)
    if body and body[0]["role"] == "assistant":
        if first_user is None:
            body = body[1:]
        else:
            body.insert(0, {"role": "user", "content": first_user})
    while body and body[-1]["role"] == "user":
        body.pop()
    if not body:
        return None
    return [{"role": "system", "content": system}, *body]


def esc_sample(
    sample_id: str,
    source: str,
    language: Literal["en", "zh"],
    split_hint: str | None,
    card: str,
    turns: Iterable[tuple[Role, str]],
) -> Sample | None:
    """An ESC-Role sample: the training prompt with `card` as system message, the supporter opener
    of that prompt before a seeker-first dialogue, and every seeker turn that recites the card held
    out of the learned turns (`esc.esc_role_samples.echo`). None if the seeker never speaks."""
    system = role_player_system_prompt(card, language)
    messages = shape_dialogue(system, turns, supporter_opener(language))
    if messages is None:
        return None
    return Sample(sample_id, source, language, split_hint, messages, hold_out=card_echo_turns(card, messages))
