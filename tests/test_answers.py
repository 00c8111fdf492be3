"""Strict parsing of judge replies (esc.chat.answers): a table of tricky replies."""

from __future__ import annotations

import pytest

from esc.chat.answers import parse_score

CASES = [
    ("3", 3),
    ("0", 0),
    ("4.", 4),
    ("**3**", 3),
    ("`2`", 2),
    ("Score: 3", 3),
    ("score：1", 1),
    ("The score is 2", 2),
    ("Rating - 4", 4),
    ("3/4", 3),
    ("3 out of 4", 3),
    ("3分", 3),
    ("评分：2", 2),
    ("得分为4分。", 4),
    ("３", 3),  # full-width digit
    ("零", 0),
    ("四", 4),
    ("  \n2\n\nThe assistant comforts the user well.", 2),  # a score line, then an explanation
    ("", None),
    ("   ", None),
    (None, None),
    ("I'd give 2 or 3", None),
    ("2 or 3", None),
    ("3.5", None),
    ("5", None),
    ("-1", None),
    ("34", None),
    ("3-4", None),
    ("3/5", None),
    ("The dialogue is fluent.", None),
    ("Score: 4 on a 0-4 scale", None),  # score.py would read 0 here
    ("As an AI, I cannot rate this.", None),
    ("零点五", None),
]


@pytest.mark.parametrize(("reply", "expected"), CASES)
def test_parse_score(reply: str | None, expected: int | None) -> None:
    assert parse_score(reply) == expected
