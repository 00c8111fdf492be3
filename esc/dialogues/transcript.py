"""A dialogue as a transcript a person can read: who said what, and why each turn ended.

Used by ``esc dialogues show``. rich does the wrapping: it measures display width (a
Chinese character takes two columns) and keeps the line breaks inside a message.
"""

from __future__ import annotations

import io

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.text import Text

from esc.dialogues.record import Dialogue
from esc.prompts.seekers import described

INDENT = 4


def _body(text: str) -> Padding:
    return Padding(Text(text.strip() or "(empty)"), (0, 0, 0, INDENT), expand=False)


def _label(text: str) -> Text:
    return Text(f"\n{text}")


def transcript(dialogue: Dialogue, prompts: bool = True) -> Group:
    """A header, the role-player's instructions and opener (when `prompts`), then every turn as
    ``[role · model] (finish reason)`` followed by its text."""
    exchanges = sum(turn.speaker == "roleplayer" for turn in dialogue.turns)
    status = dialogue.status + (f": {dialogue.error}" if dialogue.error else "")
    prompt = dialogue.meta.get("prompt") or {}
    parts: list[RenderableType] = [
        Rule(f"card {dialogue.card_id} ({dialogue.language})", align="left"),
        Text(
            f"{dialogue.roleplayer} (role-player) × {dialogue.target} (target) · {exchanges} exchanges, "
            f"{len(dialogue.turns)} messages"
            + (f" · prompt {prompt.get('id')} v{prompt.get('version')}" if prompt else "")
            + (f" · seeker {described(dialogue.seeker)}" if dialogue.seeker else "")  # none: cooperative
        ),
        Text(f"status: {status}"),
    ]
    if prompts:
        parts += [_label("[role-player's instructions (system)]"), _body(dialogue.system_prompt)]
        parts += [_label("[opener, said to the role-player]"), _body(dialogue.opener)]
        if dialogue.target_system_prompt:
            parts += [_label("[target's system prompt]"), _body(dialogue.target_system_prompt)]
    names = {"roleplayer": f"role-player · {dialogue.roleplayer}", "target": f"target · {dialogue.target}"}
    for turn in dialogue.turns:
        notes = [turn.finish_reason]
        if turn.context_dropped:
            notes.append(f"{turn.context_dropped} oldest messages left out of its context")
        if turn.cached:
            notes.append("cached")
        label = f"[{names.get(turn.speaker, turn.speaker)}] ({', '.join(notes)})"
        parts += [_label(label), _body(turn.text)]
        if turn.emotion is not None:
            parts.append(Padding(Text(_emotion(turn.emotion)), (0, 0, 0, INDENT), expand=False))
    if dialogue.stop_reason:
        parts.append(_label(f"[ended: {dialogue.stop_reason}]"))
    return Group(*parts)


def _emotion(rating: dict) -> str:
    """The seeker's rating after a turn: "-> seeker feels 61/100 (reason)", or why it is unread."""
    if rating.get("status") != "valid":
        return f"-> seeker's emotion: {rating.get('status')} ({rating.get('error') or rating.get('raw')})"
    reason = f" ({rating['reason']})" if rating.get("reason") else ""
    return f"-> seeker feels {rating['value']:.0f}/100{reason}"


def render_transcript(dialogue: Dialogue, width: int = 100, prompts: bool = True) -> str:
    """The transcript as plain text, at most `width` display columns a line."""
    out = io.StringIO()
    Console(file=out, width=width, no_color=True, highlight=False).print(transcript(dialogue, prompts))
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())
