"""`engine.wave_size: auto` (issue 25): waves as large as the sides keep conversations between turns."""

from __future__ import annotations

from esc.chat.base import ChatBackend, GenerationSettings


class _Kept(ChatBackend):
    """A backend that keeps `budget` tokens of conversations (or any number: None)."""

    def __init__(self, budget: int | None) -> None:
        self.budget = budget
        self.asked: list[int] = []

    def generate(self, batch, settings):  # pragma: no cover - not called
        raise AssertionError

    def identity(self):
        return {"kind": "kept"}

    def count_tokens(self, messages):
        return 10 * len(messages[0]["content"])

    def kept_conversations(self, tokens):
        self.asked.append(tokens)
        return None if self.budget is None else self.budget // tokens


class _Opened:
    def __init__(self, text: str) -> None:
        self.text = text

    def roleplayer_view(self):
        return [{"role": "system", "content": self.text}]


def test_auto_waves_take_all_pending_cards_that_the_kept_prefixes_hold():
    """The longest card's prompt plus every turn at both sides' max_new_tokens (and the template's
    tokens per message) is what each side must keep per dialogue; the smaller bound wins, never
    more than the pending cards or AUTO_WAVE_MAX."""
    from esc.chat.cost import MESSAGE_TOKENS
    from esc.evaluate.engine import Side
    from esc.evaluate.run import AUTO_WAVE_MAX, auto_wave_size

    settings = GenerationSettings(max_new_tokens=20)
    cards = ["x" * 10, "x" * 30, "x" * 5]  # prompts of 100, 300 and 50 tokens
    tokens = 300 + 5 * (20 + 20 + 2 * MESSAGE_TOKENS)
    roleplayer, target = _Kept(budget=10 * tokens), _Kept(budget=4 * tokens)
    size = auto_wave_size(
        cards * 4, _Opened, Side("rp", roleplayer, settings), Side("t", target, settings), turns=5
    )
    assert size == 4 and roleplayer.asked == target.asked == [tokens]
    unbounded = Side("api", _Kept(budget=None), settings)
    assert auto_wave_size(cards, _Opened, unbounded, unbounded, turns=5) == 3  # all pending
    assert auto_wave_size(cards * 200, _Opened, unbounded, unbounded, turns=5) == AUTO_WAVE_MAX
    assert auto_wave_size(cards, _Opened, Side("rp", _Kept(budget=1), settings), unbounded, turns=5) == 1
