"""The Searcher's length normalization: "auto" resolution, search and rerank against the oracle, CLI and HTTP."""
import numpy as np
import pytest

from uhdsearch.errors import UsageError
from uhdsearch.index.impacts import ImpactPlanes
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.search.lengthnorm import LENGTH_NORM
from uhdsearch.search.options import SearchOptions
from uhdsearch.search.oracle import brute_force_scores
from uhdsearch.search.searcher import Searcher


@pytest.fixture(scope="module")
def indexes(tiny_encoder_session, mini_data, mini_encoding):
    ids = list(mini_data.corpus)
    return (BinaryIndex.from_encoding(mini_encoding, ids, None, tiny_encoder_session.digest()),
            WeightedIndex.from_encoding(mini_encoding, ids, None, tiny_encoder_session.digest()))


def test_auto_normalizes_plain_binary_scoring_only(tiny_encoder_session, indexes, mini_encoding, mini_data):
    binary, weighted = indexes
    assert Searcher(tiny_encoder_session, binary).length_norm == LENGTH_NORM == 0.3
    assert Searcher(tiny_encoder_session, weighted, scoring="binary").length_norm == LENGTH_NORM
    assert Searcher(tiny_encoder_session, weighted).length_norm == 0.0  # weighted: L2-normalized already
    assert Searcher(tiny_encoder_session, binary, idf=True).length_norm == 0.0
    assert Searcher(tiny_encoder_session, binary, length_norm=None).length_norm == 0.0
    planes = ImpactPlanes.from_encoding(mini_encoding, list(mini_data.corpus), 2, 3)
    assert Searcher(tiny_encoder_session, planes).length_norm == 0.0
    searcher = Searcher(tiny_encoder_session, binary, length_norm=0.5)
    assert searcher.length_norm == 0.5 and searcher.name == "uhd-binary-ln0.5"
    assert Searcher(tiny_encoder_session, binary).name == "uhd-binary-norm"  # SearchOptions.default()
    assert Searcher(tiny_encoder_session, binary, max_df=None, cascade=None, length_norm=None).name == "uhd-binary"
    with pytest.raises(UsageError, match="weighted scoring already uses L2-normalized"):
        Searcher(tiny_encoder_session, weighted, length_norm=0.3)
    with pytest.raises(UsageError, match="ImpactPlanes does not support length_norm"):
        Searcher(tiny_encoder_session, planes, length_norm=0.3)
    with pytest.raises(UsageError, match="length_norm='often'"):
        Searcher(tiny_encoder_session, binary, length_norm="often")


def test_search_and_rerank_score_as_the_oracle(tiny_encoder_session, indexes, mini_data, mini_encoding):
    binary, _ = indexes
    queries = mini_data.queries[:8]
    searcher = Searcher(tiny_encoder_session, binary, max_df=None, query_k=30)
    run = searcher.search(queries, k=10)
    oracle = brute_force_scores(mini_encoding, searcher.encode(queries), searcher.bucket_weights, "binary",
                                LENGTH_NORM)
    plain = Searcher(tiny_encoder_session, binary, max_df=None, query_k=30, length_norm=None).search(queries, k=10)
    ids = list(mini_data.corpus)
    for row, query in enumerate(queries):
        hits = run[query.query_id]
        assert [h.score for h in hits] == pytest.approx(sorted(oracle[row][oracle[row] > 0], reverse=True)[:10],
                                                        abs=1e-12)
        assert all(h.score == oracle[row, ids.index(h.doc_id)] for h in hits)
        assert all(float(h.score).is_integer() for h in plain[query.query_id])
    assert any(run.doc_ids(q.query_id) != plain.doc_ids(q.query_id) for q in queries)  # it changes rankings here
    reranked = searcher.rerank(queries, plain, k=10)
    shared = 0
    for query in queries:
        want = {h.doc_id: h.score for h in run[query.query_id]}
        got = {h.doc_id: h.score for h in reranked[query.query_id]}
        assert all(got[d] == s for d, s in want.items() if d in got)  # equal scores for every shared document
        shared += len(set(want) & set(got))
    assert shared >= 20


def test_the_cli_and_the_service_take_it(cli, saved_model_and_index):
    from fastapi.testclient import TestClient

    from uhdsearch.serving.app import ServeSettings, create_app
    from uhdsearch.serving.service import SearchService
    from uhdsearch.types import Document

    root, model, index = saved_model_and_index(60)
    query = "cancer cells and tumour growth"
    base = ["search", "--model", str(root / "model"), "--index", str(root / "index"), "--query", query, "--k", "5"]

    def lines(out):
        return [(line.split()[2], float(line.split()[4])) for line in out.splitlines()]

    def want(alpha):
        return [(h.doc_id, h.score) for h in Searcher(model, index, length_norm=alpha).search({"q1": query}, 5)["q1"]]

    code, out, _ = cli(base)
    assert code == 0 and lines(out) == want("auto") == want(0.3)
    code, out, _ = cli(base + ["--length-norm", "none"])
    assert code == 0 and lines(out) == want(None) and all(s.is_integer() for _, s in lines(out))
    code, out, _ = cli(base + ["--length-norm", "1"])
    assert code == 0 and lines(out) == want(1.0) != want(None)
    for bad in ("-1", "much"):
        code, _, err = cli(base + ["--length-norm", bad])
        assert code == 2 and f"--length-norm '{bad}'" in err
    service = SearchService.open(model, root / "index", {d: Document(d, "") for d in index.doc_ids})
    with TestClient(create_app(service, ServeSettings()), base_url="http://localhost") as client:
        for params, alpha in (({}, 0.3), ({"length_norm": "none"}, None), ({"length_norm": "1"}, 1.0)):
            response = client.get("/search", params={"q": query, "k": 5, **params})
            assert response.status_code == 200, response.text
            assert [(h["doc_id"], h["score"]) for h in response.json()["results"][0]["hits"]] == want(alpha)
        response = client.post("/search", json={"queries": [{"query_id": "q1", "text": query}], "k": 5,
                                                 "length_norm": 1.0})
        assert [(h["doc_id"], h["score"]) for h in response.json()["results"][0]["hits"]] == want(1.0)
        response = client.get("/search", params={"q": query, "length_norm": "9"})
        assert response.status_code == 422 and "length_norm='9'" in response.text
        for params, alpha in (({}, 0.3), ({"length_norm": "none"}, None)):  # /explain adds up to /search's score
            doc_id, score = want(alpha)[0]
            data = client.get("/explain", params={"q": query, "doc_id": doc_id, **params}).json()
            assert data["score"] == pytest.approx(score, rel=1e-9)
            assert all(d["contribution"] == pytest.approx(score / data["buckets"][0]["n_matched"], rel=1e-9)
                       for d in data["buckets"][0]["dims"])


def test_parse_length_norm():
    def parse_length_norm(text):
        return SearchOptions.parse({"length_norm": text}).length_norm

    assert parse_length_norm(" None ") is None and parse_length_norm("AUTO") == "auto"
    assert parse_length_norm("0") == 0.0 and np.isclose(parse_length_norm("1.5"), 1.5)
    with pytest.raises(UsageError, match="a number in"):
        parse_length_norm("3")
