"""Figures for the studies: matplotlib on the Agg backend (no display), one PNG per figure."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from uhdsearch._optional import require


def pyplot():
    """matplotlib.pyplot on the Agg backend (extra: plots)."""
    matplotlib = require("matplotlib", "plots")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def subplots(n: int = 1, width: float = 5.0, height: float = 3.8, **options: Any):
    """A row of `n` axes (a list even for one)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, n, figsize=(width * n, height), squeeze=False, **options)
    return fig, list(axes[0])


def save(fig, path: Path) -> str:
    """Write `fig` as PNG at `path` (dpi 110) and close it; returns the file name, for the result JSON."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return Path(path).name
