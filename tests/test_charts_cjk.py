"""Chinese target names are drawn in the charts (issue 52, item 11): matplotlib falls back to the
system's CJK font (the Makefile installs fonts-wqy-zenhei for the browser tests), not to boxes."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from esc.reports.charts import cjk_fonts
from esc.reports.estimate import Estimate
from esc.scoring.rubrics import TABLE_2_ORDER
from esc.tasks.score.leaderboard import Cell, Row, write_charts


def test_a_chinese_target_name_has_every_glyph(tmp_path: Path) -> None:
    if not cjk_fonts():
        pytest.skip(
            "no CJK font on this system (apt-get install fonts-wqy-zenhei): Chinese is drawn as boxes"
        )
    cell = Cell(Estimate(50.0, 40.0, 60.0, 4, "role card"), 2)
    rows = [
        Row("心理咨询师", "tiny", "zh", "j", 2, dict.fromkeys(TABLE_2_ORDER, cell), cell),
        Row("ChatGLM", "tiny", "zh", "j", 2, dict.fromkeys(TABLE_2_ORDER, cell), cell),
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        paths = write_charts(rows, tmp_path)
    assert [p.name for p in paths] == ["radar_zh.png", "average_zh.png"]
    missing = [str(w.message) for w in caught if "missing from font" in str(w.message)]
    assert missing == []
