"""OpenMP threads that sleep while they wait, so a busy machine costs time in proportion.

By default torch runs one thread per core and OpenMP keeps a waiting thread spinning for a while.
Beside another CPU-bound process, the spinning threads take cores from the work, and beside another
torch job the two jobs' spinning threads take them from each other. An entry point calls
`wait_passively` before torch loads. It sets `OMP_WAIT_POLICY=PASSIVE` and keeps torch's thread
count (one per core).

Fewer threads, sized to the cores free at start, was measured too (`benchmarks/bench_busy_machine.py`,
setting `fit`). It was 10-20% faster beside single-threaded busy loops, but 1.5x slower beside
another torch job, because a job with fewer threads gets a smaller share of the cores. Passive
waiting was close to the best in every case measured (docs/benchmarks.md).
"""

from __future__ import annotations

import os

PASSIVE = {"OMP_WAIT_POLICY": "PASSIVE"}


def wait_passively() -> bool:
    """Set `OMP_WAIT_POLICY=PASSIVE` unless it is set already; whether it set it. Call it before
    torch is imported (OpenMP reads its environment once), at the top of an entry point."""
    if os.environ.get("OMP_WAIT_POLICY"):
        return False
    os.environ.update(PASSIVE)
    return True
