"""Writing a chart: matplotlib without a display, and a PNG replaced in one step."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from esc.jsonl import atomic_write_bytes


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed), imported when a chart is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path) -> Path:
    """The figure as `path` (its folder made), replaced in one step: a write that fails (a full
    disk) leaves the chart of the previous run as it was, not half a PNG."""
    plt = pyplot()
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    finally:
        plt.close(fig)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(Path(path), buffer.getvalue())
    return Path(path)
