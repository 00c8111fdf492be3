"""Torch threads fitted to the free cores at start (esc.cpu), so a busy machine costs time in proportion."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from esc import cpu


@pytest.fixture()
def threads_restored(monkeypatch: pytest.MonkeyPatch):
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu, "cores", lambda: 2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(("busy", "threads"), [(0.1, 2), (0.7, 1), (1.2, 1), (5.0, 1), (None, 2)])
def test_threads_are_the_free_cores_and_at_least_one(
    threads_restored, monkeypatch, busy, threads, capsys
) -> None:
    monkeypatch.setattr(cpu, "busy_cores", lambda sample_s=cpu.SAMPLE_S: busy)
    assert cpu.fit_threads_to_load() == threads == torch.get_num_threads()
    said = capsys.readouterr().err
    assert (f"cores are busy with other work: torch uses {threads} thread" in said) == (threads < 2)


def test_an_explicit_thread_count_is_left_alone(threads_restored, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(cpu, "busy_cores", lambda sample_s=cpu.SAMPLE_S: pytest.fail("sampled"))
    assert cpu.fit_threads_to_load() is None


def test_a_busy_neighbour_is_seen_as_a_busy_core() -> None:
    """The sample reads /proc/stat: one busy loop beside this process is about one busy core."""
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = cpu.busy_cores(0.5)
    finally:
        loop.kill()
        loop.wait()
    assert busy is not None and 0.6 <= busy <= (cpu.cores() + 0.1)
