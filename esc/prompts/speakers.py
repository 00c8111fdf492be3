"""A conversation as a question prompt shows it: one "<speaker>: <text>" line per turn.

Every question file (the emotion rater's, the safety checklist, the pairwise questions, the role-play
metrics) names its two speakers per language; the lines are (role, text) with role "user" for the
seeker and "assistant" for the supporter (`esc.dialogues.record.Dialogue.lines`). The rubric of the
7 dimensions keeps score.py's own format (`esc.scoring.rubrics.dialogue_text`).
"""

from __future__ import annotations

from collections.abc import Sequence


def speaker_lines(lines: Sequence[tuple[str, str]], seeker: str, supporter: str) -> str:
    return "\n".join(f"{seeker if role == 'user' else supporter}: {text}" for role, text in lines)
