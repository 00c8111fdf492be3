"""docs/bad_inputs.md's rules by key are generated from the settings models, never kept by hand."""

from __future__ import annotations

import subprocess
import sys

from esc.config_docs import BEGIN, END, rules
from esc.paths import REPO_ROOT

DOC = REPO_ROOT / "docs" / "bad_inputs.md"


def test_the_committed_rules_are_the_generated_ones() -> None:
    """A field added, a range or a description changed, a backend or judge registered: the section
    differs until `esc config rules --write docs/bad_inputs.md` is run. The generator runs in a fresh
    process: tests of this one register plugins (modes, judges) that the docs do not list."""
    doc = DOC.read_text(encoding="utf-8")
    assert doc.count(BEGIN) == 1 and doc.count(END) == 1
    made = subprocess.run(
        [sys.executable, "-m", "esc", "config", "rules"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    committed = doc[doc.index(BEGIN) : doc.index(END) + len(END)] + "\n"
    assert made.stdout == committed, "run: esc config rules --write docs/bad_inputs.md"


def test_the_rules_come_from_the_models() -> None:
    """A key's type, range, choices and description as its model declares them; each registry's
    classes with their own keys; the registered modes listed from the registry."""
    text = rules()
    for row in (
        "| evaluate | `dialogue.turns` | integer >= 1 and <= 100 (exchanges per dialogue; the paper plays 5)",
        "| evaluate | `cards.limit` | integer >= 1, or null (the first N cards per language; null: all) |",
        "| evaluate | `engine.wave_size` | `auto` or integer >= 1 (auto: as many as memory allows) |",
        "| `local` | `min_answer_mass` | number >= 0 and <= 1 (less mass on 0-4: invalid) |",
        "| `hf` | `prefix_cache_gb` | number >= 0 (0: off) |",
    ):
        assert row in text, row
    mode = next(line for line in text.splitlines() if line.startswith("| rank | `mode` |"))
    from esc.tasks.task import modes

    assert all(f"`{name}`" in mode for name in modes())


def test_write_refuses_a_doc_without_the_markers_and_changes_nothing(capsys, tmp_path) -> None:
    from tests.helpers import refused

    doc = tmp_path / "notes.md"
    doc.write_text("a person's notes\n")
    assert "has no line" in refused(capsys, ["config", "rules", "--write", str(doc)])
    assert doc.read_text() == "a person's notes\n"
    assert "no such file" in refused(capsys, ["config", "rules", "--write", str(tmp_path / "missing.md")])
