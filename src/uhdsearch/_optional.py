"""Optional dependencies (pyproject's extras), imported where they are used, with the install line when missing."""
from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, extra: str) -> ModuleType:
    """Import `module`, or raise ImportError naming the extra that installs it.

    Examples:
        >>> require("json", "dev").dumps([1])
        '[1]'
        >>> require("no_such_module_xyz", "dense")
        Traceback (most recent call last):
        ...
        ImportError: no_such_module_xyz is not installed: pip install "uhdsearch[dense]"
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f'{module} is not installed: pip install "uhdsearch[{extra}]"') from exc
