"""Benchmark scripts import their helpers (synthetic.py) as top-level modules from benchmarks/, as the tests do."""
from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = str(Path(__file__).resolve().parents[2] / "benchmarks")
if BENCHMARKS not in sys.path:
    sys.path.insert(0, BENCHMARKS)
