"""Run a repo script as `python SCRIPT ARGS...` would, then print the peak GPU memory it allocated.

    python benchmarks/gpu_peak.py train.py +exp=train/esc_role ...

The entry points are separate processes, so `torch.cuda.max_memory_allocated` has to be read inside
each of them: this runs SCRIPT in this process (`runpy`, as `__main__`, with SCRIPT's folder first on
`sys.path`) and prints one `peak GPU memory:` line when it exits, whatever its exit code. Without
CUDA the line says so. `ESC_IMPORTED_DISTRIBUTIONS=FILE` appends the distributions whose modules
were imported (what a machine must have to run SCRIPT: benchmarks/gpu_carry.py reads it).
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys
from pathlib import Path


def peak_line() -> str:
    """One line: the peak allocated and reserved GPU memory of this process, or why there is none."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return "peak GPU memory: no CUDA in this process"
    if not torch.cuda.is_initialized():
        return "peak GPU memory: 0.00 GiB (CUDA never used)"
    allocated = max(torch.cuda.max_memory_allocated(d) for d in range(torch.cuda.device_count()))
    reserved = max(torch.cuda.max_memory_reserved(d) for d in range(torch.cuda.device_count()))
    return f"peak GPU memory: {allocated / 2**30:.2f} GiB allocated, {reserved / 2**30:.2f} GiB reserved"


def imported_distributions() -> set[str]:
    """The installed distributions that provide the top-level modules imported so far, one entry a
    module: a namespace package several distributions share (google, hydra_plugins) is one entry of
    its owners joined by "|" (any of them provides it)."""
    from importlib.metadata import packages_distributions

    owners = packages_distributions()
    tops = {name.split(".")[0] for name in list(sys.modules)}
    return {"|".join(sorted(set(owners[top]))) for top in tops if top in owners}


def report() -> None:
    print(peak_line(), flush=True)
    target = os.environ.get("ESC_IMPORTED_DISTRIBUTIONS")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.writelines(f"{dist}\n" for dist in sorted(imported_distributions()))


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python benchmarks/gpu_peak.py SCRIPT [ARGS...]")
    script = Path(sys.argv[1]).resolve()
    sys.argv = [str(script), *sys.argv[2:]]
    sys.path[0] = str(script.parent)
    atexit.register(report)
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
