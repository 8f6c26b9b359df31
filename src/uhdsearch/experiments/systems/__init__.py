"""The registered systems, one module per family; importing this package registers them all.

The modules load in this order, which is the order of ``--list`` and of "all": BM25 first, fusions last.
"""
from __future__ import annotations

import importlib

FAMILIES = ("lexical", "dense", "uhd", "hybrid")

for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")
