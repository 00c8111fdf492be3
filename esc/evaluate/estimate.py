"""What the dialogues of an `evaluate.py` run would cost, before it starts (`esc.chat.cost`).

For every card not yet done in the run folder, each side gets one request per turn
(`dialogue.turns`), and a rater that writes its answer (`trajectory.method` parse or constrained;
a distribution generates nothing) one after the seeker's first message and one after every reply.
A prompt grows turn by turn: the role-player's is its card prompt and opener plus the turns so far,
the target's its system prompt plus the turns so far, the rater's its question plus the turns so
far; every earlier turn counts at its side's `max_new_tokens` (plus the template's tokens per
message), as does every reply. So the estimate is an upper bound: dialogues that stop early, replies
shorter than `max_new_tokens`, prompts cut to a context window and cached requests only lower it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from esc.cards import RoleCard
from esc.chat.base import ChatBackend
from esc.chat.cost import MESSAGE_TOKENS, CostEstimate, CostPart, count_prompt, in_estimate, priced_part
from esc.dialogues.record import Dialogue
from esc.dialogues.store import completed_keys, dialogue_file
from esc.evaluate.emotion import EmotionRater
from esc.evaluate.engine import Side
from esc.prompts.emotion import observer_messages, roleplayer_messages


def estimate_dialogues(
    out: Path, cards: Sequence[RoleCard], open_dialogue: Callable[[RoleCard], Dialogue],
    roleplayer: Side, target: Side, turns: int, rater: EmotionRater | None = None,
) -> CostEstimate | None:  # fmt: skip
    """The cost of playing the cards of `cards` not yet complete in `out` (`open_dialogue` gives a
    card's prompts, as the run opens it); None when no side that would be sent requests has a price
    or sends them to a server (`esc.chat.cost.in_estimate`: a local run costs nothing, nothing to print)."""
    writes = rater if rater is not None and rater.question.method != "distribution" else None
    backends = [roleplayer.backend, target.backend, *([writes.question.backend] if writes else [])]
    if not any(in_estimate(backend) for backend in backends):
        return None
    done: set[tuple[int, str]] = set()
    for language in sorted({card.language for card in cards}):
        done |= completed_keys(dialogue_file(out, target.name, roleplayer.name, language))
    pending = [card for card in cards if (card.id, card.language) not in done]
    parts = {  # each at its price, refused when it is another model's (`esc.chat.settings.BackendSettings`)
        "roleplayer": priced_part(
            f"role-player {roleplayer.name}", roleplayer.backend, "roleplayer.backend.price"
        ),
        "target": priced_part(f"target {target.name}", target.backend, "target.backend.price"),
    }
    if writes is not None:
        who = f"role-player {roleplayer.name}" if writes.rater == "roleplayer" else "observer"
        key = (
            "roleplayer.backend.price"
            if writes.rater == "roleplayer"
            else "trajectory.observer.backend.price"
        )
        parts["rater"] = priced_part(f"emotion ratings ({who})", writes.question.backend, key)
    seeker = roleplayer.settings.max_new_tokens + MESSAGE_TOKENS  # what a turn adds to a later prompt
    reply = target.settings.max_new_tokens + MESSAGE_TOKENS
    for card in pending:
        dialogue = open_dialogue(card)
        base, counted = count_prompt(roleplayer.backend, dialogue.roleplayer_view())
        target_base, target_counted = count_prompt(target.backend, dialogue.target_view())
        for k in range(1, turns + 1):
            parts["roleplayer"].add(
                _fit(roleplayer, base + (k - 1) * (seeker + reply)),
                roleplayer.settings.max_new_tokens,
                counted=counted,
            )
            parts["target"].add(
                _fit(target, target_base + k * seeker + (k - 1) * reply),
                target.settings.max_new_tokens,
                counted=target_counted,
            )
        if writes is not None:
            _ratings(parts["rater"], writes, dialogue, turns, seeker, reply)
    skipped = len(cards) - len(pending)
    what = f"{len(pending)} dialogue{'' if len(pending) == 1 else 's'} x {turns} turns"
    what += f", {skipped} already done" if skipped else ""
    return CostEstimate(
        list(parts.values()), what, "every dialogue plays all its turns, each earlier turn at max_new_tokens"
    )


def _ratings(
    part: CostPart, rater: EmotionRater, dialogue: Dialogue, turns: int, seeker: int, reply: int
) -> None:
    """The rater's written answers: after the seeker's first message, then after every reply."""
    backend = rater.question.backend
    if rater.rater == "roleplayer":
        messages = roleplayer_messages(dialogue.roleplayer_view(), dialogue.language)
    else:
        card = rater.cards.get(dialogue.key, "")
        messages = observer_messages(card, dialogue.lines(), dialogue.language)
    base, counted = count_prompt(backend, messages)
    answer = rater.question.settings.max_new_tokens
    part.add(_fit_backend(backend, answer, base + seeker), answer, counted=counted)
    for k in range(1, turns + 1):
        part.add(_fit_backend(backend, answer, base + k * (seeker + reply)), answer, counted=counted)


def _fit(side: Side, prompt: int) -> int:
    return _fit_backend(side.backend, side.settings.max_new_tokens, prompt)


def _fit_backend(backend: ChatBackend, reserve: int, prompt: int) -> int:
    """A prompt is never sent over the context window with room for the reply (older turns are
    dropped, `esc.evaluate.context`): at most that many tokens."""
    window = backend.context_window
    return min(prompt, max(window - reserve, 0)) if window else prompt
