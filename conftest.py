"""Root conftest: lets --doctest-modules (pyproject's addopts) collect src/uhdsearch and tests/ together."""
from __future__ import annotations

from pathlib import Path


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    # pytest loads every conftest.py itself; --doctest-modules would import them again as plain modules, and the
    # tests' several files named conftest.py then clash ("import file mismatch"). They hold no examples.
    if collection_path.name == "conftest.py":
        return True
    # A deprecated alias module replaces itself by the module it moved to: collecting it would import that one
    # under the alias's path ("import file mismatch"); tests/encoder/test_query_encoders.py imports them.
    if collection_path.suffix == ".py" and "src" in collection_path.parts and _is_alias(collection_path):
        return True
    return None


def _is_alias(path: Path) -> bool:
    try:
        return "sys.modules[__name__] = _moved" in path.read_text(encoding="utf-8")
    except OSError:
        return False
