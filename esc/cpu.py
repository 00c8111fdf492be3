"""Torch's CPU threads sized to the cores that are free, so a busy machine costs time in proportion.

By default torch runs one thread per core and OpenMP keeps its waiting threads spinning. On 2 cores
with another CPU-bound process beside the job, each parallel operation then waits for a thread the
OS has taken off its core, while the spinning threads take the core from the work: a job slowed
~29x instead of ~2x (docs/benchmarks.md, `benchmarks/bench_busy_machine.py`). At start, an entry
point calls `fit_threads_to_load`: OpenMP threads wait passively, and torch gets as many threads as
cores were free over a short sample (at least one). An explicit `OMP_NUM_THREADS` is left alone.
"""

from __future__ import annotations

import os
import sys
import time

SAMPLE_S = 0.3  # how long the machine's load is sampled at start


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all cores since boot (Linux /proc/stat); None elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def busy_cores(sample_s: float = SAMPLE_S) -> float | None:
    """Cores busy with other work over `sample_s` seconds (this process sleeps meanwhile); None when
    it cannot be read."""
    first = _cpu_times()
    if first is None:
        return None
    time.sleep(sample_s)
    second = _cpu_times()
    if second is None or second[1] <= first[1]:
        return None
    return (second[0] - first[0]) / (second[1] - first[1]) * (os.cpu_count() or 1)


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def fit_threads_to_load() -> int | None:
    """Passive OpenMP waiting, and torch threads for the free cores; the thread count set, or None
    when `OMP_NUM_THREADS` decides. Call it before torch is imported (OpenMP reads its environment
    once), at the top of an entry point."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if os.environ.get("OMP_NUM_THREADS"):
        return None
    total = cores()
    busy = busy_cores() if total > 1 else None
    threads = total if busy is None else max(1, min(total, round(total - busy)))
    import torch

    torch.set_num_threads(threads)
    if threads < total:  # said on stderr: logging is not set up yet at the top of an entry point
        print(
            f"{busy:.1f} of {total} cores are busy with other work: torch uses {threads} "
            f"thread{'' if threads == 1 else 's'} (OMP_NUM_THREADS=N to choose)",
            file=sys.stderr,
        )
    return threads
