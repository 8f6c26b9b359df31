"""What a Python child process of a test needs to import what the test imports."""
from __future__ import annotations

import os
import sys


def python_path() -> str:
    """This process's import path as a PYTHONPATH value: a child started with it finds uhdsearch and the `tests` and
    `benchmarks` packages as the test does (pytest's `pythonpath` setting reaches only the test process itself)."""
    return os.pathsep.join(sys.path)
