"""The evaluation and base-layer modules keep their docstring examples.

pytest runs every `>>>` example of src/uhdsearch as a doctest (pyproject: --doctest-modules, testpaths); this test
only makes sure these modules still have some, so that an example deleted by mistake does not go unnoticed.
"""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["uhdsearch.evaluation.datasets", "uhdsearch.evaluation.qrels", "uhdsearch.types",
           "uhdsearch.evaluation.metrics", "uhdsearch.evaluation.experiment"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_exist(name: str) -> None:
    module = importlib.import_module(name)
    examples = sum(len(test.examples) for test in doctest.DocTestFinder().find(module))
    assert examples > 0, f"{name} has no examples"


def test_doctests_are_collected(pytestconfig) -> None:
    assert pytestconfig.getoption("doctestmodules"), "pyproject's addopts must keep --doctest-modules"
