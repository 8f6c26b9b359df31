"""Index tests run on tiny indexes; let them still split one query's documents between threads."""
import pytest


@pytest.fixture(autouse=True, scope="module")  # module, not session: undone before other directories
def split_tiny_indexes_between_threads():
    """Below MIN_DOCUMENTS_PER_THREAD a query stays on one thread; the tests must reach the range merge too."""
    from uhdsearch.index.kernels import dispatch

    saved = dispatch.MIN_DOCUMENTS_PER_THREAD
    dispatch.MIN_DOCUMENTS_PER_THREAD = 1
    yield
    dispatch.MIN_DOCUMENTS_PER_THREAD = saved
