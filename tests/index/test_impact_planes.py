"""Impact planes: quantized weighted search through the binary kernels, exact against a brute-force level sum."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.index.index_oracle import random_encoding
from uhdsearch.index.inverted import BinaryIndex

from uhdsearch.errors import DimensionMismatchError, UsageError
from uhdsearch.index.impacts import PAIRS, ImpactPlanes, impact_edges, levels, query_levels
from uhdsearch.sparse import SparseEncoding


def brute_force(documents, queries, planes, weights):
    """sum over buckets of weight x sum over shared dims of query level x document level, float64."""
    leveled = query_levels(queries, planes.query_bits)
    total = np.zeros((queries.n, documents.n))
    for w, d, q, edges in zip(weights, documents.buckets, leveled.buckets, planes.edges):
        doc_levels = sp.csr_matrix((levels(d.data, edges).astype(np.float64), d.indices, d.indptr), shape=d.shape)
        total += w * (q.astype(np.float64) @ doc_levels.T).toarray()
    return total


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 300), dim=st.integers(1, 80), n_buckets=st.integers(1, 2),
       density=st.floats(0.01, 0.4), dense_dims=st.integers(0, 4), k=st.integers(1, 50),
       pair=st.sampled_from(PAIRS))
def test_planes_rank_exactly_by_the_level_products(seed, n, dim, n_buckets, density, dense_dims, k, pair):
    rng = np.random.default_rng(seed)
    docs = random_encoding(rng, n, dim, n_buckets, density, dense_dims)
    queries = random_encoding(rng, 4, dim, n_buckets, min(1.0, density * 3 + 0.05))
    weights = [1.0] if n_buckets == 1 else [1.0, 0.5]
    planes = ImpactPlanes.from_encoding(docs, [f"d{i}" for i in range(n)], *pair)
    numbers, scores = planes.search_encoded(queries, k, weights)
    oracle = brute_force(docs, queries, planes, weights)
    for row in range(queries.n):
        hits = np.flatnonzero(oracle[row] > 0)
        want = hits[np.lexsort((hits, -oracle[row, hits]))][:k]
        got = numbers[row][numbers[row] >= 0]
        assert got.tolist() == want.tolist()
        assert scores[row, :got.shape[0]].tolist() == oracle[row, want].tolist()


def test_levels_are_equal_frequency_and_quantize_the_float_scores():
    values = np.linspace(0.01, 1, 300).astype(np.float32)
    counts = np.bincount(levels(values, impact_edges(values, 3)))[1:]
    assert counts.tolist() == [42, 43, 43, 43, 43, 43, 43]  # 7 levels, as equal as 300 values allow
    rng = np.random.default_rng(0)
    docs = random_encoding(rng, 400, 50, 1, 0.2)
    queries = random_encoding(rng, 30, 50, 1, 0.3)
    float_scores = (queries.buckets[0] @ docs.buckets[0].T).toarray()
    agree = {}
    for pair in ((1, 4), (4, 1)):
        planes = ImpactPlanes.from_encoding(docs, [str(i) for i in range(400)], *pair)
        found = planes.search_encoded(queries, 1)[0][:, 0]
        agree[pair] = np.mean(found == float_scores.argmax(axis=1))
    # four bits of document impact find the float top document more often than binary documents do
    assert agree[(4, 1)] > agree[(1, 4)]


def test_bad_bits_and_mismatched_queries_are_named():
    rng = np.random.default_rng(1)
    docs = random_encoding(rng, 5, 10, 1, 0.5)
    with pytest.raises(UsageError, match="doc_bits=3, query_bits=3"):
        ImpactPlanes.from_encoding(docs, list("abcde"), 3, 3)
    planes = ImpactPlanes.from_encoding(docs, list("abcde"))
    assert planes.index.dim == 20 and planes.index.n_postings() >= docs.buckets[0].nnz
    with pytest.raises(DimensionMismatchError, match="dim=11"):
        planes.search_encoded(SparseEncoding([sp.csr_matrix(np.ones((1, 11), np.float32))]), 3)


def test_saved_planes_reopen_and_a_searcher_ranks_with_them(tmp_path, tiny_encoder_session, mini_data,
                                                             mini_encoding):
    from uhdsearch.index import open_index
    from uhdsearch.index.inverted import WeightedIndex
    from uhdsearch.search.searcher import Searcher

    ids = list(mini_data.corpus)
    planes = ImpactPlanes.from_encoding(mini_encoding, ids, encoder_digest=tiny_encoder_session.digest(),
                                        path=tmp_path / "planes")
    opened = open_index(tmp_path / "planes")
    assert isinstance(opened, ImpactPlanes) and (opened.doc_bits, opened.query_bits) == (2, 3)
    assert all(np.array_equal(a, b) for a, b in zip(opened.edges, planes.edges))
    weighted = WeightedIndex.from_encoding(mini_encoding, ids, None)
    for b in range(mini_encoding.n_buckets):  # the original dims' frequencies, for stop dimensions
        assert np.array_equal(opened.document_frequencies(b), weighted.document_frequencies(b))
    searcher = Searcher(tiny_encoder_session, opened, query_k=30, max_df=None)
    run = searcher.search(mini_data.queries, k=5)
    encoded = searcher.encode(mini_data.queries)
    numbers, scores = planes.search_encoded(encoded, 5, tiny_encoder_session.config.weights)
    for row, q in enumerate(mini_data.queries):
        assert run.doc_ids(q.query_id) == [ids[n] for n in numbers[row] if n >= 0]
    assert isinstance(open_index(tmp_path / "planes").index, BinaryIndex)
    weighted.save(tmp_path / "weighted")
    assert isinstance(open_index(tmp_path / "weighted"), WeightedIndex)  # no planes in its manifest


def test_a_damaged_planes_manifest_is_named(tmp_path):
    import json

    from uhdsearch.errors import IndexFormatError
    from uhdsearch.index import open_index

    rng = np.random.default_rng(2)
    ImpactPlanes.from_encoding(random_encoding(rng, 20, 12, 1, 0.3), [str(i) for i in range(20)],
                               path=tmp_path / "p")
    meta_path = tmp_path / "p" / "index_meta.json"
    meta = json.loads(meta_path.read_text())
    meta["impact_planes"]["dim"] = 13
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(IndexFormatError, match="does not match the index's shape"):
        open_index(tmp_path / "p")
    meta["impact_planes"]["doc_bits"] = 7
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(IndexFormatError, match="bad 'impact_planes'"):
        open_index(tmp_path / "p")


def test_the_cli_builds_and_searches_planes(tmp_path, cli, saved_model_and_index, scifact_mini_dir):
    root, model, _ = saved_model_and_index(40)
    code, out, err = cli(["index", "--model", str(root / "model"), "--data", str(scifact_mini_dir), "--out",
                          str(tmp_path / "planes"), "--variant", "planes"])
    assert code == 0, err
    code, out, err = cli(["search", "--model", str(root / "model"), "--index", str(tmp_path / "planes"), "--query",
                          "cancer cells", "--k", "4"])
    assert code == 0, err
    lines = [line.split() for line in out.splitlines()]
    assert len(lines) == 4 and all(float(x[4]) == int(float(x[4])) for x in lines)  # integer level sums
    code, _, err = cli(["index", "--model", str(root / "model"), "--data", str(scifact_mini_dir), "--out",
                        str(tmp_path / "x"), "--variant", "plain"])
    assert code == 2 and "binary, weighted or planes" in err


def test_the_searcher_keeps_every_dim_on_planes_by_default(tmp_path, tiny_encoder_session):
    from uhdsearch.search.searcher import Searcher

    rng = np.random.default_rng(4)
    docs = random_encoding(rng, 1200, tiny_encoder_session.config.dim, tiny_encoder_session.config.n_buckets, 0.01)
    planes = ImpactPlanes.from_encoding(docs, [str(i) for i in range(1200)],
                                        encoder_digest=tiny_encoder_session.digest())
    assert Searcher(tiny_encoder_session, planes).max_df is None  # 1,200 documents: binary would drop at 0.3
    assert Searcher(tiny_encoder_session, planes, max_df=0.3).max_df == 0.3
    binary = BinaryIndex.from_encoding(docs, planes.doc_ids, None, tiny_encoder_session.digest())
    assert Searcher(tiny_encoder_session, binary, max_df="auto").max_df == 0.3


def test_explain_contributions_on_planes_sum_to_the_score():
    from uhdsearch.serving.explain import dim_contributions

    rng = np.random.default_rng(8)
    docs = random_encoding(rng, 80, 30, 2, 0.3, dense_dims=3)
    planes = ImpactPlanes.from_encoding(docs, [str(i) for i in range(80)])
    query = random_encoding(rng, 1, 30, 2, 0.5)
    numbers, scores = planes.search_encoded(query, 5, [1.0, 0.5])
    for number, score in zip(numbers[0], scores[0]):
        parts = dim_contributions(planes, query, int(number), [1.0, 0.5], "weighted")
        assert parts and sum(c for *_, c in parts) == pytest.approx(score, abs=1e-9)
        assert all(c > 0 for *_, c in parts)


def test_sharding_and_milvus_refuse_planes(tmp_path):
    from uhdsearch.scale.shards import open_index as open_for_shards

    rng = np.random.default_rng(9)
    ImpactPlanes.from_encoding(random_encoding(rng, 10, 8, 1, 0.4), [str(i) for i in range(10)], path=tmp_path / "p")
    with pytest.raises(UsageError, match="impact-plane index; sharding takes binary or weighted"):
        open_for_shards(tmp_path / "p")
