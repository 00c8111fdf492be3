"""Strict parsing of a model's constrained answer -- a score 0-4 (a judge's reply) or one of N choices
(a card grade, a category) -- into a number, or None (invalid).

The official score.py takes the lowest of "0".."4" found *anywhere* in the reply ("Score: 4 on a
0-4 scale" becomes 0, "3 or 2" becomes 2) and writes -1 when none is found. Here a reply counts only
when its first non-empty line is the score and nothing else, up to formatting:

- an optional label: "Score:", "Rating -", "The score is", "评分：", "得分为" ...;
- markdown emphasis or quotes around it: "**3**", "`3`", "「3」";
- the scale after it: "3/4", "3 out of 4", "3分", "3 points";
- closing punctuation: "4.", "3!", "3。";
- full-width digits (３) and the Chinese numerals 零 〇 一 二 三 四.

Anything else ("I'd give 2 or 3", "3.5", "5", "-1", "", "The dialogue is fluent") is invalid: the
caller keeps the raw reply and counts it, and it never enters a mean.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

_NUMERALS = {"零": 0, "〇": 0, "一": 1, "二": 2, "三": 3, "四": 4}
_LABEL = (
    r"(?:(?:the\s+|my\s+|final\s+|overall\s+)*(?:score|rating|grade|answer)"
    r"(?:\s+(?:is|would\s+be|of))?\s*[:：=\-]?\s*"
    r"|(?:评分|分数|得分|打分|评分为|得分为|分数为)\s*(?:是|为)?\s*[:：]?\s*)?"
)
_SCALE = r"(?:\s*(?:/\s*4|out\s+of\s+4|分|points?|pts?))?"
_LINE = re.compile(rf"^{_LABEL}(?P<score>[0-4零〇一二三四]){_SCALE}\s*[.。!！]*$", re.IGNORECASE)
_DECORATION = re.compile(r"[*_`\"'“”‘’「」『』\[\]()（）]")


def parse_score(reply: str | None) -> int | None:
    """The score a judge's reply states, or None when it is not exactly one score 0-4."""
    if not reply:
        return None
    text = unicodedata.normalize("NFKC", reply)  # full-width digits and colons become ASCII
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = _DECORATION.sub("", first).strip()
    match = _LINE.match(first)
    if not match:
        return None
    value = match.group("score")
    return _NUMERALS[value] if value in _NUMERALS else int(value)


_ANSWER_LABEL = re.compile(
    r"^(?:(?:the\s+|my\s+|final\s+)*(?:answer|choice)\s*(?:is)?\s*[:：=\-]?\s*|(?:答案|选择)\s*(?:是|为)?\s*[:：]?\s*)",
    re.IGNORECASE,
)


def parse_choice(reply: str | None, choices: tuple[str, ...]) -> int | None:
    """The index of the answer a reply states, for questions with their own answers (the
    role-play metrics' "0".."2", the pairwise test's "A"/"B"), or None when it is not exactly one.

    Digit answers are read as `parse_score` reads scores and must be among `choices`; other answers
    must be the whole first line (an optional "Answer:" label, decoration, closing punctuation and
    case aside)."""
    if all(c.isdigit() for c in choices):
        score = parse_score(reply)
        return choices.index(str(score)) if score is not None and str(score) in choices else None
    if not reply:
        return None
    text = unicodedata.normalize("NFKC", reply)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = _ANSWER_LABEL.sub("", _DECORATION.sub("", first).strip()).rstrip(".。!！").strip()
    folded = [c.casefold() for c in choices]
    return folded.index(first.casefold()) if first.casefold() in folded else None


def stated_answer_probabilities(
    logprobs: list[dict[str, Any]] | None, score: int, choices: tuple[str, ...] = ("0", "1", "2", "3", "4")
) -> list[float] | None:
    """P(each answer) ("0".."4", or `choices`) at the first generated token that is the stated
    answer, from the top log-probs. None when there are no log-probabilities, or no generated token
    is the answer (e.g. "三")."""
    index = {c.casefold(): i for i, c in enumerate(choices)}
    for step in logprobs or []:
        if step["token"].strip().casefold() == choices[score].casefold():
            probs = [0.0] * len(choices)
            for token, logprob in step["top"].items():
                answer = index.get(token.strip().casefold())
                if answer is not None:
                    probs[answer] += math.exp(logprob)
            return probs if sum(probs) > 0 else None
    return None
