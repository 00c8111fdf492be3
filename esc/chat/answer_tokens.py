"""Which token ids a model's answer "0".."4" is: one rule for the judge that reads it and the
ESC-RANK training that teaches it.

A local judge reads the next-token distribution right after the chat template's generation prompt;
ESC-RANK training labels the answer as `esc.esc_role_samples.tokenize.encode_chat` encodes an assistant turn
(each piece of the rendered chat tokenized on its own). The two can disagree: a tokenizer that puts
a word-start marker before a piece ("▁3", sentencepiece) learns one id while the judge looks at
another, and a template that writes a space before the answer makes the digit " 3". So each answer
is the set of ids that spell it at that position, merged:

- the id training learns (`encode_chat` of [probe, assistant: "3"], content only);
- the id that follows the generation prompt in the rendered string ("...assistant\\n" + "3");
- the space-prefixed variant (" 3"), where it is one token.

The judge sums the probability over an answer's ids. Each spelling must be one token, and no id
may spell two answers; otherwise the model cannot be scored from one next-token distribution and
the judge stops with one line naming `judge.model`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from esc.errors import ConfigError, UserError
from esc.esc_role_samples.tokenize import encode_chat

PROBE = "Score?"  # the user turn of the probe chat: any text the template renders verbatim


@dataclasses.dataclass(frozen=True)
class AnswerTokens:
    """Per answer (in `choices` order): the ids that spell it, and the one training labels."""

    choices: tuple[str, ...]
    ids: tuple[tuple[int, ...], ...]
    learned: tuple[int, ...]

    def flat(self) -> list[int]:
        """Every id of every answer, answer by answer (for gathering probabilities)."""
        return [i for ids in self.ids for i in ids]


def _render(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def _one_token_after(tokenizer: Any, prefix: str, text: str) -> int | None:
    """The single id `text` adds after `prefix` in the whole string's encoding, or None."""
    base = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    full = tokenizer(prefix + text, add_special_tokens=False)["input_ids"]
    new = full[len(base) :]
    return new[0] if full[: len(base)] == base and len(new) == 1 else None


def answer_tokens(
    tokenizer: Any,
    choices: Sequence[str],
    system: str | None = None,
    where: str = "judge.model",
    name: str = "the judge model",
) -> AnswerTokens:
    """The answer ids of `choices` for this tokenizer and chat template (`system`: the system turn
    the judge sends, which some templates need to render their generation prompt)."""

    probe = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": PROBE}]
    prefix = _render(tokenizer, probe, True)
    ids: list[tuple[int, ...]] = []
    learned: list[int] = []
    for answer in map(str, choices):
        try:
            encoded = encode_chat(
                tokenizer, [*probe, {"role": "assistant", "content": answer}], 10**6, learn_end_of_turn=False
            )
        except UserError as err:
            raise ConfigError(where, f"{name}: {err}") from None
        labels = [t for t in (encoded or {}).get("labels", []) if t != -100]
        in_context = _one_token_after(tokenizer, prefix, answer)
        if len(labels) != 1 or in_context is None:
            how = f"{len(labels)} tokens as training encodes it" if len(labels) != 1 else "not one token"
            raise ConfigError(
                where,
                f"{name}: the answer {answer!r} is {how} after the generation prompt, so it cannot be "
                "scored from one next-token distribution",
            )
        spaced = _one_token_after(tokenizer, prefix, " " + answer)
        variants = tuple(dict.fromkeys(i for i in (in_context, labels[0], spaced) if i is not None))
        ids.append(variants)
        learned.append(labels[0])
    seen: dict[int, str] = {}
    for answer, variants in zip(choices, ids, strict=True):
        for token in variants:
            if token in seen and seen[token] != answer:
                raise ConfigError(where, f"{name}: token {token} spells both {seen[token]!r} and {answer!r}")
            seen[token] = str(answer)
    return AnswerTokens(tuple(map(str, choices)), tuple(ids), tuple(learned))


def answer_probabilities(probs: Any, answers: AnswerTokens) -> Any:
    """[rows, answers]: each answer's probability, summed over its ids, from [rows, vocab] probs."""
    import torch

    columns = [probs[:, list(ids)].sum(dim=-1) for ids in answers.ids]
    return torch.stack(columns, dim=-1)
