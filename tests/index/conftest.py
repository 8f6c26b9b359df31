"""Index tests run on tiny indexes; let them still split one query's documents between threads."""
import pytest


@pytest.fixture(autouse=True, scope="module")
def index_tests_split_between_threads(split_tiny_indexes_between_threads):
    """tests/conftest.py's split_tiny_indexes_between_threads, for every test module of this folder."""
    yield
