"""The speed tests reuse the index tests' oracle helpers and their thread split of tiny indexes."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "index"))


@pytest.fixture(autouse=True, scope="module")
def split_tiny_indexes_between_threads():
    from uhdsearch.index.kernels import dispatch

    saved = dispatch.MIN_DOCUMENTS_PER_THREAD
    dispatch.MIN_DOCUMENTS_PER_THREAD = 1
    yield
    dispatch.MIN_DOCUMENTS_PER_THREAD = saved
