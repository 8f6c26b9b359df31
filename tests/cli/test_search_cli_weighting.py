"""`uhdsearch search --max-df --idf`: the same run as the Searcher with those options; bad values exit 2."""
from __future__ import annotations

import pytest

from uhdsearch.search.searcher import Searcher
from uhdsearch.types import format_run

# Tiny indexes still split a query's documents between threads, as in tests/index.
pytestmark = pytest.mark.usefixtures("split_tiny_indexes_between_threads")


@pytest.fixture(scope="module")
def built(saved_model_and_index):
    return saved_model_and_index(120)


def test_search_max_df_idf_matches_the_searcher(built, cli):
    root, model, index = built
    text = "vitamin D deficiency and bone fractures"
    code, out, err = cli(["search", "--model", str(root / "model"), "--index", str(root / "index"),
                         "--query", text, "--k", "8", "--max-df", "0.2", "--idf"])
    assert code == 0, err
    want = format_run(Searcher(model, index, max_df=0.2, idf=True).search({"q1": text}, k=8))
    assert out == want and out
    plain = format_run(Searcher(model, index).search({"q1": text}, k=8))
    assert out != plain  # the options change the ranking or at least its scores


@pytest.mark.parametrize("bad", ["0", "1.5", "-0.2"])
def test_bad_max_df_exits_2(built, bad, cli):
    root, _, _ = built
    code, out, err = cli(["search", "--model", str(root / "model"), "--index", str(root / "index"),
                         "--query", "x", "--max-df", bad])
    assert code == 2 and out == "" and "--max-df" in err
