"""Hand-written lists stay true to what they list (issue 63, item 5): the table of dimensions in
docs/scoring.md, held to the one table it copies."""

from __future__ import annotations

import re
from pathlib import Path

from esc.scoring.rubrics import dimensions

REPO = Path(__file__).resolve().parent.parent


def test_the_dimension_table_in_docs_is_the_one_table() -> None:
    text = (REPO / "docs" / "scoring.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| ([\w.]+) \| (\S+) \| `(\w+)` \|$", text, flags=re.M)
    assert rows == [(d.key, d.paper_name, d.short, d.zh, d.official_key) for d in dimensions()]
