"""Whether a model should run in bfloat16 on this CPU: a measured check, never an assumption.

CPUs with AVX512_BF16 or AMX multiply bfloat16 matrices about twice as fast as float32 (measured on
the development machine: 458 vs 218 GF/s at SmolLM2's MLP shape); CPUs without them emulate
bfloat16 and are far slower. `measured_speedup` times both on one fixed transformer-sized product
(128 rows x 1024 x 4096: a property of the CPU, so it needs no model, and a backend's identity can
name the choice before its weights are converted or loaded) and `decide_bf16` turns it into a
choice with its reason, which the caller logs: transcripts in bfloat16 differ from float32 ones, so
the choice is recorded in the backend's identity too.

A small product is timed first (`PROBE`, 1/8192 of the work): where bfloat16 is emulated it runs
~150x slower than float32 (an AMD EPYC with AVX2 only: one bfloat16 product of the full shape took
~3 s, the full measurement ~40 s, paid by every SmolLM2 run), and a probe under `EMULATED` settles the
choice in a fraction of a second. Where bfloat16 is native the probe is near or above 1x, and the
full product decides.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

#: bfloat16 is chosen when its matrix products are at least this much faster than float32's
MIN_SPEEDUP = 1.3
#: a probe this far below 1x is emulated bfloat16 (native: near or above 1x; emulated: ~0.007x)
EMULATED = 0.25
#: the probe's shape (hidden, intermediate, rows): 1/8192 of the full product's multiply-adds
PROBE = (128, 512, 8)
BF16_SETTINGS = ("auto", "true", "false")


@dataclass(frozen=True)
class Bf16Choice:
    """The decision and why: `speedup` is None when it was not measured (set by the config)."""

    use: bool
    setting: str
    speedup: float | None

    def reason(self) -> str:
        if self.speedup is None:
            return f"cpu_bf16={self.setting}"
        verdict = ">=" if self.use else "<"
        return (
            f"cpu_bf16=auto: bfloat16 matrix products ran {self.speedup:.2f}x float32's on this CPU "
            f"({verdict} {MIN_SPEEDUP}x)"
        )


@functools.lru_cache(maxsize=8)
def measured_speedup(
    hidden: int = 1024, intermediate: int = 4096, rows: int = 128, repeats: int = 3
) -> float:
    """float32 time / bfloat16 time of (rows x hidden) @ (hidden x intermediate), best of `repeats`
    (once per process and shape: the full one takes about a third of a second where bfloat16 is
    native, ~40 s where it is emulated, which `decide_bf16`'s probe spares)."""
    import torch

    def best(dtype: torch.dtype) -> float:
        a = torch.randn(rows, hidden).to(dtype)
        b = torch.randn(hidden, intermediate).to(dtype)
        torch.matmul(a, b)  # warm-up: kernels chosen, memory touched
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(4):
                torch.matmul(a, b)
            times.append(time.perf_counter() - start)
        return min(times)

    return best(torch.float32) / best(torch.bfloat16)


def decide_bf16(setting: str) -> Bf16Choice:
    """`setting` is ``auto`` (measured: the probe, then the full product unless the probe shows
    emulated bfloat16), ``true`` or ``false``."""
    if setting == "true":
        return Bf16Choice(True, setting, None)
    if setting == "false":
        return Bf16Choice(False, setting, None)
    hidden, intermediate, rows = PROBE
    speedup = measured_speedup(hidden, intermediate, rows=rows)
    if speedup >= EMULATED:
        speedup = measured_speedup()
    return Bf16Choice(speedup >= MIN_SPEEDUP, setting, speedup)
