"""OpenMP threads that sleep while they wait (esc.cpu), so a busy machine costs time in proportion."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from esc import cpu

REPO = Path(__file__).resolve().parents[1]


def test_passive_waiting_is_set_unless_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert cpu.wait_passively() is True
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert cpu.wait_passively() is False
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


@pytest.mark.parametrize("entry", ["train.py", "evaluate.py", "rank.py", "build_cards.py"])
def test_each_entry_point_sets_it_before_torch_loads(entry: str) -> None:
    """Loading the entry point's module (not running its main) sets the policy, and torch is not
    imported before it: OpenMP reads its environment once, when torch loads."""
    code = (
        "import runpy, sys, os\n"
        f"runpy.run_path({entry!r}, run_name='loaded')\n"
        "print(os.environ.get('OMP_WAIT_POLICY'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    probe = (
        "import sys, os\n"
        "class Watch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' and os.environ.get('OMP_WAIT_POLICY') != 'PASSIVE':\n"
        "            raise SystemExit('torch imported before OMP_WAIT_POLICY was set')\n"
        "sys.meta_path.insert(0, Watch())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe + code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "PASSIVE"
