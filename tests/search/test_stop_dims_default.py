"""The stop-dimension default: max_df 0.3 from 1,000 documents on, nothing below; the CLI's and the service's
searches follow it, and `none` turns it off."""
from __future__ import annotations

import numpy as np
import pytest

from tests.index.index_oracle import random_encoding
from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.errors import DimensionMismatchError, UsageError
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.search.searcher import Searcher
from uhdsearch.search.options import SearchOptions, auto_max_df
from uhdsearch.search.stopdims import DEFAULT_MAX_DF, MIN_DOCUMENTS
from uhdsearch.types import format_run

# Tiny indexes still split a query's documents between threads, as in tests/index.
pytestmark = pytest.mark.usefixtures("split_tiny_indexes_between_threads")

QUERY = "vitamin D deficiency and bone fractures in older women"


@pytest.fixture(scope="module")
def model(tiny_backbone_dir):
    return UHDEncoder.new(tiny_backbone_dir, EncoderConfig(dim=512, wta_k=16, query_k=None))


def _index(model, n: int, path=None) -> BinaryIndex:
    # dims 0-127 are active in ~60 % of the documents: stop dimensions at 0.3; the rest in ~5 %
    docs = random_encoding(np.random.default_rng(n), n, 512, 1, 0.05, dense_dims=128)
    return BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(n)], path, model.digest())


def test_resolve_max_df_floor_and_refusals():
    assert auto_max_df(MIN_DOCUMENTS) == DEFAULT_MAX_DF == 0.3
    assert auto_max_df(MIN_DOCUMENTS - 1) is None and auto_max_df(10**6, stop_dimensions=False) is None
    with pytest.raises(UsageError, match="max_df='often'"):
        SearchOptions(max_df="often")


def test_default_drops_stop_dims_on_large_indexes_only(model):
    large, small = _index(model, MIN_DOCUMENTS), _index(model, MIN_DOCUMENTS - 1)
    default = Searcher(model, large)
    assert default.max_df == 0.3 and default.name == "uhd-binary-norm"
    q_default = default.encode([_q()]).buckets[0]
    q_all = Searcher(model, large, max_df=None).encode([_q()]).buckets[0]
    assert set(q_default.indices) < set(q_all.indices)  # some query dims dropped, none added
    df = large.document_frequencies(0)
    assert np.all(df[q_default.indices] <= 0.3 * MIN_DOCUMENTS)
    assert np.any(df[np.setdiff1d(q_all.indices, q_default.indices)] > 0.3 * MIN_DOCUMENTS)
    assert format_run(default.search({"q": QUERY}, 20)) == \
        format_run(Searcher(model, large, max_df=0.3, name="uhd-binary-norm").search({"q": QUERY}, 20))
    below = Searcher(model, small)
    assert below.max_df is None and below.weighting is None
    # frequencies handed in (as the service does per snapshot) give the same search
    given = Searcher(model, large, document_frequencies=[large.document_frequencies(0)])
    assert format_run(given.search({"q": QUERY}, 20)) == format_run(default.search({"q": QUERY}, 20))
    every = np.full(512, MIN_DOCUMENTS, np.int64)  # frequencies that call every dim a stop dim: nothing left
    assert Searcher(model, large, document_frequencies=[every]).encode([_q()]).buckets[0].nnz == 0
    with pytest.raises(DimensionMismatchError, match="document_frequencies"):
        Searcher(model, large, document_frequencies=[every[:10]])


def _q():
    from uhdsearch.types import Query

    return Query("q", QUERY)


def test_cli_default_is_auto_and_none_turns_it_off(model, tmp_path, cli):
    model.save_pretrained(tmp_path / "model")
    index = _index(model, MIN_DOCUMENTS, tmp_path / "index")
    args = ["search", "--model", str(tmp_path / "model"), "--index", str(tmp_path / "index"), "--query", QUERY,
            "--k", "10"]
    code, auto, err = cli(args)
    assert code == 0, err
    assert auto == format_run(Searcher(model, index, max_df=0.3, name="uhd-binary-norm").search({"q1": QUERY}, 10))
    code, none, err = cli(args + ["--max-df", "none"])
    assert code == 0, err
    assert none == format_run(Searcher(model, index, max_df=None).search({"q1": QUERY}, 10)) and none != auto
    code, out, err = cli(args + ["--max-df", "often"])
    assert code == 2 and out == "" and "--max-df 'often'" in err


def test_the_service_searches_with_the_default(model, tmp_path):
    from uhdsearch.serving.service import SearchOptions, SearchService
    from uhdsearch.types import Document, Query

    index = _index(model, MIN_DOCUMENTS, tmp_path / "index")
    corpus = {d: Document(d, f"text {d}") for d in index.doc_ids}
    service = SearchService.open(model, tmp_path / "index", corpus)
    run, _ = service.search([Query("q", QUERY)], 10, SearchOptions())
    assert format_run(run) == format_run(Searcher(model, index, max_df=0.3, name=run.name).search({"q": QUERY}, 10))
    assert format_run(run) != format_run(Searcher(model, index, max_df=None, name=run.name).search({"q": QUERY}, 10))


def test_http_requests_choose_the_threshold(model, tmp_path):
    from fastapi.testclient import TestClient

    from uhdsearch.serving.app import ServeSettings, create_app
    from uhdsearch.serving.service import SearchService
    from uhdsearch.types import Document

    index = _index(model, MIN_DOCUMENTS, tmp_path / "index")
    service = SearchService.open(model, tmp_path / "index", {d: Document(d, "") for d in index.doc_ids})

    def want(max_df):
        run = Searcher(model, index, max_df=max_df).search({"q1": QUERY}, 10)
        return [(h.doc_id, round(h.score, 4)) for h in run["q1"]]

    with TestClient(create_app(service, ServeSettings()), base_url="http://localhost") as client:
        def got(**params):
            response = client.get("/search", params={"q": QUERY, "k": 10, **params})
            assert response.status_code == 200, response.text
            return [(h["doc_id"], round(h["score"], 4)) for h in response.json()["results"][0]["hits"]]

        assert got() == want(0.3) and got(max_df="none") == want(None) and got(max_df="0.1") == want(0.1)
        assert want(None) != want(0.3)
        body = {"queries": [{"query_id": "q1", "text": QUERY}], "k": 10, "max_df": "none"}
        hits = client.post("/search", json=body).json()["results"][0]["hits"]
        assert [(h["doc_id"], round(h["score"], 4)) for h in hits] == want(None)
        bad = client.get("/search", params={"q": QUERY, "max_df": "often"})
        assert bad.status_code == 422 and "max_df='often'" in bad.json()["error"]
