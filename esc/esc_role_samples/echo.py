"""Seeker turns that recite the role card: kept in the context, never learned.

ESC-Role must *gradually reveal* the worry on its card (Figure 11). A training turn that is the
card's text teaches the opposite: to recite the card. This happens wherever a card is made from the
dialogue itself: a Smile card is the client's first message (no metadata exists to build a card
from), and some ESConv seekers paste their pre-chat `situation` as their first message. Such a turn
stays in the conversation (the supporter's next reply answers it) but gets no labels
(`Sample.hold_out`), so the model never learns to produce it.

A turn *echoes* the card when the text it shares with the card's problem (the text after
"Problem:" / "问题：", case and whitespace folded; the stretches of at least `BLOCK_CHARS`
characters that `difflib` matches in order, so a lightly edited copy still counts) is

- at least `ECHO_SHARE` of the turn, and at least `ECHO_MIN_CHARS` characters (the turn is mostly
  card text), or
- at least `ECHO_SHARE` of the problem (the turn carries most of the card, however short), or
- at least `ECHO_CHARS` characters (a long passage copied from the card).

A turn that names the same worry in its own words, or shares a short phrase, is not an echo.

`difflib` is slow (about 1.7 ms a pair; ESConv's 15,067 seeker turns took 25 s, paid by every
training run's data preparation): `echoes_card` first counts the turn's characters that lie in any
`BLOCK_CHARS`-long stretch the problem has too (`covered_chars`, linear). Every matched block is made
of such characters, so this bounds `shared_chars` from above; a turn whose bound cannot make an
echo is none, and `difflib` runs only for the rest (331 of ESConv's turns; the decisions are the
same, tests/test_esc_role_fidelity.py checks it on the whole corpus).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from difflib import SequenceMatcher

ECHO_SHARE = 0.5
ECHO_MIN_CHARS = 16  # shorter shared stretches ("yes", "my boyfriend") are not recitation
ECHO_CHARS = 80  # about 15 English words, a long Chinese sentence
BLOCK_CHARS = 8  # shorter matching stretches are chance (common words, single characters)
_PROBLEM_LABEL = re.compile(r"(?:Problems?\s*:|问题\s*[：:])", re.IGNORECASE)


def _fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def card_problem(card: str) -> str:
    """The problem a card describes: the text after its last "Problem:" / "问题：" label, or the
    whole card if it has none."""
    parts = _PROBLEM_LABEL.split(card)
    return parts[-1].strip() if len(parts) > 1 and parts[-1].strip() else card


def shared_chars(text: str, turn: str) -> int:
    """Characters of `turn` in stretches of at least `BLOCK_CHARS` that `text` has too, matched in
    order (case and whitespace folded)."""
    return _matched(_fold(text), _fold(turn))


def covered_chars(text: str, turn: str) -> int:
    """Characters of `turn` inside some `BLOCK_CHARS`-long stretch that `text` has too (folded): an
    upper bound of `shared_chars(text, turn)`, in linear time."""
    return _covered(_fold(text), _fold(turn))


def _matched(a: str, b: str) -> int:  # `shared_chars` of folded texts
    if not a or not b:
        return 0
    blocks = SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
    return sum(block.size for block in blocks if block.size >= BLOCK_CHARS)


def _covered(a: str, b: str) -> int:  # `covered_chars` of folded texts
    stretches = {a[i : i + BLOCK_CHARS] for i in range(len(a) - BLOCK_CHARS + 1)}
    covered = [False] * len(b)
    for j in range(len(b) - BLOCK_CHARS + 1):
        if b[j : j + BLOCK_CHARS] in stretches:
            covered[j : j + BLOCK_CHARS] = [True] * BLOCK_CHARS
    return sum(covered)


def is_echo(shared: int, problem_chars: int, turn_chars: int) -> bool:
    """The rule on a shared count, given the folded problem's and turn's lengths."""
    return (
        shared >= ECHO_CHARS
        or (shared >= ECHO_MIN_CHARS and shared >= ECHO_SHARE * turn_chars)
        or (shared > 0 and shared >= ECHO_SHARE * problem_chars)
    )


@functools.lru_cache(maxsize=1 << 16)  # the data again in one process: a sweep's jobs, a test worker
def echoes_card(card: str, turn: str) -> bool:
    """Whether `turn` recites `card` (see the module docstring for the rule): the rule holds for
    `shared_chars`, checked only where it holds for its upper bound `covered_chars`. Remembered for
    the process: ESConv and Smile hold 26,522 seeker turns."""
    a, b = _fold(card_problem(card)), _fold(turn)
    return is_echo(_covered(a, b), len(a), len(b)) and is_echo(_matched(a, b), len(a), len(b))


def card_echo_turns(card: str, messages: Sequence[Mapping[str, str]]) -> tuple[int, ...]:
    """Indices of the assistant (seeker) messages that echo `card`."""
    return tuple(
        i for i, m in enumerate(messages) if m["role"] == "assistant" and echoes_card(card, m["content"])
    )
