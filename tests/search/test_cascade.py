"""The cascade: the exact top-k among the first pass's candidates, exact where every dim is rare, refusals named."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from uhdsearch.errors import UsageError
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.search.cascade import Cascade, cascade_search, split_by_frequency
from uhdsearch.search.options import SearchOptions, auto_cascade
from uhdsearch.search.oracle import brute_force_scores
from uhdsearch.search.searcher import Searcher
from uhdsearch.sparse import SparseEncoding

# Tiny indexes still split a query's documents between threads, as in tests/index.
pytestmark = pytest.mark.usefixtures("split_tiny_indexes_between_threads")


def random_binary(rng, n, dim, n_buckets, density):
    """Rows whose dims have skewed frequencies (dim d active with probability ~ density * 3 / (1 + d / 8))."""
    p = np.minimum(0.9, density * 3 / (1 + np.arange(dim) / 8))
    return SparseEncoding([sp.csr_matrix((rng.random((n, dim)) < p).astype(np.float32)) for _ in range(n_buckets)])


def expected_among_candidates(docs, queries, dfs, k, weights, scoring, cascade, length_norm=0.0):
    """Brute force: the first pass's top-depth by the rare dims' scores, then the full scores' top-k among them."""
    n = docs.n
    rare, _ = split_by_frequency(queries, dfs, cascade.first_max_df * n)
    first = brute_force_scores(docs, rare, weights, scoring, length_norm)
    full = brute_force_scores(docs, queries, weights, scoring, length_norm)
    out = []
    for row in range(queries.n):
        hits = np.flatnonzero(first[row] > 0)
        candidates = hits[np.lexsort((hits, -first[row, hits]))][:max(k, cascade.depth)]
        if candidates.shape[0] < min(k, n):  # the cascade searches such a query exactly
            candidates = np.flatnonzero(full[row] > 0)
        top = candidates[np.lexsort((candidates, -full[row, candidates]))][:k]
        top = top[full[row, top] > 0]  # as exact search, positive scores only (negative bucket weights)
        out.append((top.tolist(), full[row, top].tolist()))
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 400), dim=st.integers(2, 80), n_buckets=st.integers(1, 2),
       density=st.floats(0.02, 0.3), k=st.integers(1, 30), depth=st.integers(1, 60),
       first_max_df=st.sampled_from([0.02, 0.1, 0.3, 1.0]), quantized=st.booleans(), unit_weight=st.booleans(),
       length_norm=st.sampled_from([0.0, 0.0, 0.3, 1.0]), forward=st.booleans())
def test_the_cascade_ranks_its_candidates_exactly(seed, n, dim, n_buckets, density, k, depth, first_max_df,
                                                  quantized, unit_weight, length_norm, forward):
    rng = np.random.default_rng(seed)
    docs = random_binary(rng, n, dim, n_buckets, density)
    queries = random_binary(rng, 5, dim, n_buckets, density * 2)
    if quantized:
        queries = SparseEncoding([sp.csr_matrix((rng.integers(1, 16, m.nnz).astype(np.float32), m.indices,
                                                 m.indptr), shape=m.shape) for m in queries.buckets])
    scoring = "quantized" if quantized else "binary"
    weights = [1.0] * n_buckets if unit_weight else rng.uniform(-1, 2, n_buckets).round(2).tolist()
    index = BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(n)], None)
    dfs = [index.document_frequencies(b) for b in range(n_buckets)]
    cascade = Cascade(first_max_df, depth, forward)  # the second pass from doc-major rows, or by probes
    if forward:
        index.keep_forward(first_max_df)  # as a service's warm-up does (5 query rows alone would not build it)
    numbers, scores = cascade_search(index, queries, dfs, k, weights, scoring, cascade, length_norm=length_norm)
    assert all((store is not None) == forward for store in index._forward.stores)
    assert numbers.shape == scores.shape == (5, min(k, n))
    for row, (want_numbers, want_scores) in enumerate(expected_among_candidates(docs, queries, dfs, k, weights,
                                                                               scoring, cascade, length_norm)):
        got = numbers[row][numbers[row] >= 0]
        assert got.tolist() == want_numbers
        assert np.allclose(scores[row, :got.shape[0]], want_scores, rtol=0, atol=1e-9)


def test_with_every_dim_rare_it_is_exact_and_a_shallow_pass_is_not():
    rng = np.random.default_rng(5)
    docs = random_binary(rng, 300, 60, 1, 0.1)
    queries = random_binary(rng, 8, 60, 1, 0.2)
    index = BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(300)], None)
    dfs = [index.document_frequencies(0)]
    exact = index.search_encoded(queries, 10, [1.0], "binary")
    numbers, scores = cascade_search(index, queries, dfs, 10, [1.0], "binary", Cascade(1.0, 10))
    assert np.array_equal(numbers, exact[0]) and np.array_equal(scores, exact[1])
    shallow = cascade_search(index, queries, dfs, 10, [1.0], "binary", Cascade(0.05, 10))
    assert not np.array_equal(shallow[0], exact[0])  # the cascade is not exact in general


def test_the_doc_major_rows_are_built_after_enough_searches(monkeypatch):
    from uhdsearch.search import cascade as module

    rng = np.random.default_rng(2)
    docs = random_binary(rng, 200, 40, 1, 0.1)
    queries = random_binary(rng, 6, 40, 1, 0.2)
    index = BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(200)], None)
    dfs = [index.document_frequencies(0)]
    monkeypatch.setattr(module, "FORWARD_AFTER", 10)
    first = cascade_search(index, queries, dfs, 5, [1.0], "binary", Cascade(0.1, 20))
    assert index._forward.stores == [None]  # 6 query rows of 10
    second = cascade_search(index, queries, dfs, 5, [1.0], "binary", Cascade(0.1, 20))
    assert index._forward.stores[0] is not None and index._forward.stores[0].min_count == 20
    third = cascade_search(index, queries, dfs, 5, [1.0], "binary", Cascade(0.1, 20))
    assert np.array_equal(first[0], third[0]) and np.array_equal(first[1], third[1])
    assert np.array_equal(second[0], third[0])


def test_a_query_without_rare_dims_is_searched_exactly():
    docs = SparseEncoding([sp.csr_matrix(np.array([[1, 1, 0], [1, 0, 1], [1, 1, 1], [0, 0, 1]], np.float32))])
    index = BinaryIndex.from_encoding(docs, list("abcd"), None)
    query = SparseEncoding([sp.csr_matrix(np.array([[1, 1, 0]], np.float32))])  # dfs 3 and 2 of 4: both frequent
    numbers, scores = cascade_search(index, query, [index.document_frequencies(0)], 3, [1.0], "binary",
                                     Cascade(0.25, 1))
    assert numbers.tolist() == [[0, 2, 1]] and scores.tolist() == [[2.0, 2.0, 1.0]]


def test_the_searcher_turns_it_on_from_100k_documents_and_refuses_what_it_cannot_cascade(tiny_encoder_session,
                                                                                          mini_data, mini_encoding):
    assert auto_cascade(100_000, True) == Cascade() and auto_cascade(99_999, True) is None
    assert auto_cascade(10**6, False) is None
    assert auto_cascade(100_000, True, 0.3) == Cascade(0.1, 300)  # length-normalized scores
    ids = list(mini_data.corpus)
    binary = BinaryIndex.from_encoding(mini_encoding, ids, None, tiny_encoder_session.digest())
    assert Searcher(tiny_encoder_session, binary).cascade is None  # the mini corpus is far below 100k
    searcher = Searcher(tiny_encoder_session, binary, cascade=Cascade(0.2, 5), max_df=None, query_k=30)
    assert searcher.name == "uhd-binary-cascade0.2x5"
    run = searcher.search(mini_data.queries, k=3)
    encoded = searcher.encode(mini_data.queries)
    dfs = [binary.document_frequencies(b) for b in range(binary.n_buckets)]
    assert searcher.length_norm == 0.3  # the default, which the cascade applies in both passes
    numbers, _ = cascade_search(binary, encoded, dfs, 3, searcher.bucket_weights, "binary", Cascade(0.2, 5),
                                length_norm=0.3)
    assert [run.doc_ids(q.query_id) for q in mini_data.queries] == [[ids[i] for i in row if i >= 0]
                                                                     for row in numbers]
    weighted = WeightedIndex.from_encoding(mini_encoding, ids, None, tiny_encoder_session.digest())
    with pytest.raises(UsageError, match="needs binary scoring"):
        Searcher(tiny_encoder_session, weighted, scoring="weighted", cascade=Cascade())
    with pytest.raises(UsageError, match="cascade depth=0"):
        Cascade(0.1, 0)
    def parse_cascade(text):
        return SearchOptions.parse({"cascade": text}).cascade

    with pytest.raises(UsageError, match="auto, none \(exact\), or FIRST_MAX_DF:DEPTH"):
        parse_cascade("0.1")
    assert parse_cascade("0.1:100:probe") == Cascade(0.1, 100, forward=False)
    with pytest.raises(UsageError, match=r"FIRST_MAX_DF:DEPTH\[:probe\]"):
        parse_cascade("0.1:100:fast")


def test_the_cli_takes_a_cascade_and_names_a_bad_one(cli, saved_model_and_index):
    root, model, index = saved_model_and_index(60)
    base = ["search", "--model", str(root / "model"), "--index", str(root / "index"), "--query",
            "cancer cells", "--k", "5"]
    code, exact, _ = cli(base + ["--cascade", "none"])
    assert code == 0 and len(exact.splitlines()) == 5
    code, deep, _ = cli(base + ["--cascade", "1:5"])  # every dim in the first pass: the exact ranking
    assert code == 0 and [line.split()[2] for line in deep.splitlines()] == \
        [line.split()[2] for line in exact.splitlines()]
    code, shallow, _ = cli(base + ["--cascade", "0.1:5"])
    want = Searcher(model, index, cascade=Cascade(0.1, 5)).search({"q1": "cancer cells"}, 5).doc_ids("q1")
    assert code == 0 and [line.split()[2] for line in shallow.splitlines()] == want
    for bad, words in (("0.1", "FIRST_MAX_DF:DEPTH"), ("0:100", "first_max_df=0.0"), ("0.1:0", "depth=0")):
        code, _, err = cli(base + ["--cascade", bad])
        assert code == 2 and f"--cascade '{bad}'" in err and words in err


def test_http_requests_choose_the_cascade(saved_model_and_index):
    from fastapi.testclient import TestClient

    from uhdsearch.serving.app import ServeSettings, create_app
    from uhdsearch.serving.service import SearchService
    from uhdsearch.types import Document

    root, model, index = saved_model_and_index(60)
    service = SearchService.open(model, root / "index", {d: Document(d, "") for d in index.doc_ids})
    query = "cancer cells and tumour growth"

    def want(cascade):
        run = Searcher(model, index, cascade=cascade).search({"q1": query}, 8)
        return [h.doc_id for h in run["q1"]]

    with TestClient(create_app(service, ServeSettings()), base_url="http://localhost") as client:
        def got(method, **params):
            if method == "get":
                response = client.get("/search", params={"q": query, "k": 8, **params})
            else:
                response = client.post("/search", json={"queries": [{"query_id": "q1", "text": query}], "k": 8,
                                                         **params})
            assert response.status_code == 200, response.text
            return [h["doc_id"] for h in response.json()["results"][0]["hits"]]

        assert got("get") == want(None)  # 60 documents: "auto" searches exactly
        shallow = Cascade(0.1, 8)
        assert want(shallow) != want(None)
        assert got("get", cascade="0.1:8") == want(shallow) == got("post", cascade="0.1:8")
        assert got("post", cascade="none") == want(None)
        response = client.get("/search", params={"q": query, "cascade": "deep"})
        assert response.status_code == 422 and "cascade='deep'" in response.text
        response = client.get("/search", params={"q": query, "cascade": "0.1:5000"})  # deeper than max_k
        assert response.status_code == 422 and "max_k=1000" in response.text


def test_a_segmented_index_with_deletions_cascades_over_its_live_documents(tmp_path):
    from uhdsearch.index.live.segments import SegmentedIndex

    rng = np.random.default_rng(11)
    docs = random_binary(rng, 120, 40, 1, 0.1)
    queries = random_binary(rng, 6, 40, 1, 0.2)
    index = SegmentedIndex.create(tmp_path / "live", "binary", 40, 1)
    index.add(docs[:70], [f"a{i}" for i in range(70)])
    index.commit()
    index.add(docs[70:], [f"b{i}" for i in range(50)])
    index.commit()
    gone = [f"a{i}" for i in range(0, 70, 3)] + ["b4", "b5"]
    index.delete(gone)
    index.commit()
    live = np.array([d is not None for d in index.doc_ids])
    assert live.shape == (120,) and (~live).sum() == len(gone)
    dfs = [index.document_frequencies(0)]
    numbers, scores = cascade_search(index, queries, dfs, 5, [1.0], "binary", Cascade(0.15, 12))
    full = brute_force_scores(docs, queries, [1.0], "binary")
    rare = brute_force_scores(docs, split_by_frequency(queries, dfs, 0.15 * index.n_documents)[0], [1.0], "binary")
    for row in range(queries.n):
        hits = np.flatnonzero((rare[row] > 0) & live)
        candidates = hits[np.lexsort((hits, -rare[row, hits]))][:12]
        if candidates.shape[0] < 5:
            candidates = np.flatnonzero((full[row] > 0) & live)
        top = candidates[np.lexsort((candidates, -full[row, candidates]))][:5]
        assert numbers[row][numbers[row] >= 0].tolist() == top.tolist()
        assert scores[row, :top.shape[0]].tolist() == full[row, top].tolist()
    assert not any(index.doc_ids[n] is None for n in numbers.ravel() if n >= 0)
    counts = index.overlap_counts(queries[:1], np.flatnonzero(live))
    assert counts[0].tolist() == full[0, live].astype(int).tolist()
