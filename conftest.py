"""Root conftest: lets --doctest-modules (pyproject's addopts) collect src/uhdsearch and tests/ together."""
from __future__ import annotations

from pathlib import Path


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    # pytest loads every conftest.py itself; --doctest-modules would import them again as plain modules, and the
    # tests' several files named conftest.py then clash ("import file mismatch"). They hold no examples.
    return True if collection_path.name == "conftest.py" else None
