"""One command line: `esc` lists the file tools and runs each; no module reads `sys.argv` outside
argument parsing; the jobs are the Hydra entry points."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from esc.cards import load_cards
from esc.cli import TOOLS, main
from tests.helpers import REPO_ROOT, requires_data


def test_esc_help_lists_every_tool() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "esc", "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    listed = re.findall(r"^    (\w+)", done.stdout, flags=re.MULTILINE)
    assert (
        listed
        == list(TOOLS)
        == [
            "cards",
            "dialogues",
            "annotate",
            "scores",
            "cache",
            "fetch",
            "models",
            "ablation",
            "report",
            "runs",
            "config",
            "export",
        ]
    )
    assert "build_cards.py" in done.stdout


@pytest.mark.parametrize("tool", list(TOOLS))
def test_each_tool_has_its_own_help(tool: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as done:
        main([tool, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: esc {tool}")


def test_an_unknown_tool_is_one_error_line(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as done:
        main(["cardz"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: argument TOOL: invalid choice: 'cardz'")


@requires_data
def test_a_tool_runs_the_library(capsys: pytest.CaptureFixture) -> None:
    card = next(c for c in load_cards(None) if c.id == 32025)
    assert main(["cards", "show", "32025"]) == 0
    assert capsys.readouterr().out == card.to_text() + "\n"


def test_sys_argv_is_read_only_by_argument_parsing_and_the_masked_command_record() -> None:
    readers = sorted(
        path.relative_to(REPO_ROOT).as_posix()
        for path in (REPO_ROOT / "esc").rglob("*.py")
        if "sys.argv" in path.read_text(encoding="utf-8")
    )
    # esc/lifecycle.py: Hydra's refusal of `judge=null` names no key; the override it read does
    assert readers == [
        "esc/cli/__init__.py",
        "esc/lifecycle.py",
        "esc/masking.py",
        "esc/secrets/redaction.py",
    ]


def test_no_package_has_its_own_main_module() -> None:
    """`python -m esc` is the one module command: tools live in esc/cli/, jobs are the entry points."""
    mains = sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "esc").rglob("__main__.py"))
    assert mains == ["esc/__main__.py"]
    scripts = {p.name for p in REPO_ROOT.glob("*.py")}
    assert {"train.py", "evaluate.py", "rank.py", "build_cards.py"} <= scripts
