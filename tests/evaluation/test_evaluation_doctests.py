from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["datasets", "qrels", "runs", "metrics", "experiment"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"uhdsearch.evaluation.{name}")
    result = doctest.testmod(module)
    assert result.attempted > 0, f"uhdsearch.evaluation.{name} has no examples"
    assert result.failed == 0
