from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["uhdsearch.evaluation.datasets", "uhdsearch.evaluation.qrels", "uhdsearch.types",
           "uhdsearch.evaluation.metrics", "uhdsearch.evaluation.experiment"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
