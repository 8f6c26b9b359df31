"""Stop dimensions and IDF weighting: exact against the oracle on the same transformed query, static and live."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.index.index_oracle import assert_same_ranking, expected_top_k, random_encoding
from uhdsearch.errors import UsageError
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.index.live.segments import SegmentedIndex
from uhdsearch.search.stopdims import QueryWeighting, idf
from uhdsearch.sparse import SparseEncoding

# Tiny indexes still split a query's documents between threads, as in tests/index.
pytestmark = pytest.mark.usefixtures("split_tiny_indexes_between_threads")


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 300), dim=st.integers(1, 50), density=st.floats(0.0, 0.4),
       dense_dims=st.integers(0, 20), k=st.integers(1, 400), max_df=st.sampled_from([None, 0.05, 0.2, 0.5, 1.0]),
       use_idf=st.booleans())
def test_transformed_queries_equal_brute_force(seed, n, dim, density, dense_dims, k, max_df, use_idf):
    rng = np.random.default_rng(seed)
    docs = random_encoding(rng, n, dim, 1, density, dense_dims)
    queries = random_encoding(rng, 3, dim, 1, min(1.0, 2 * density + 0.1), dense_dims)
    index = WeightedIndex.from_encoding(docs, [str(i) for i in range(n)], None)
    weighting = QueryWeighting.of_index(index, max_df, use_idf)
    kept = weighting.drop(queries)
    df = np.diff(docs.buckets[0].tocsc().indptr)
    limit = n * (max_df if max_df is not None else 1.0)
    assert np.all(df[kept.buckets[0].indices] <= limit) and np.all(df[kept.buckets[0].indices] > 0)
    # every query dim under the limit is kept, with its value
    expected_kept = queries.buckets[0].multiply(((df > 0) & (df <= limit))[None, :]).tocsr()
    assert abs(kept.buckets[0] - expected_kept).sum() == 0
    if use_idf:
        for scoring, q in (("quantized", weighting.quantize(kept)), ("weighted", weighting.scale(kept))):
            got = index.search_encoded(q, k, [1.0], scoring)
            assert_same_ranking(got, expected_top_k(docs, q, k, [1.0], scoring), atol=1e-6)
    else:
        got = index.search_encoded(kept, k, [1.0], "binary")
        assert_same_ranking(got, expected_top_k(docs, kept, k, [1.0], "binary"))


def test_segmented_index_counts_live_documents_only(tmp_path):
    rng = np.random.default_rng(1)
    docs = random_encoding(rng, 60, 30, 1, 0.2, dense_dims=8)
    live = SegmentedIndex.create(tmp_path / "live", "binary", 30, 1)
    live.add(docs[:40], [str(i) for i in range(40)])
    live.commit()
    live.add(docs[40:], [str(i) for i in range(40, 60)])
    live.delete([str(i) for i in range(0, 60, 3)])
    live.commit()
    keep = np.array([i % 3 != 0 for i in range(60)])
    weighting = QueryWeighting.of_index(live, max_df=0.5, idf=True)
    assert weighting.n_documents == int(keep.sum())
    want = np.diff(docs.buckets[0][np.flatnonzero(keep)].tocsc().indptr)
    assert np.array_equal(weighting.document_frequencies[0], want)
    queries = weighting.quantize(weighting.drop(random_encoding(rng, 4, 30, 1, 0.6, dense_dims=8)))
    numbers, scores = live.search_encoded(queries, 10, [1.0], "quantized")
    static = BinaryIndex.from_encoding(docs, [str(i) for i in range(60)], None)
    want_numbers, want_scores = static.search_encoded(queries, 10, [1.0], "quantized", deleted=~keep)
    assert np.array_equal(scores, want_scores)
    ids = [[live.doc_ids[d] for d in row if d >= 0] for row in numbers]  # segments number documents their own way
    want_ids = [[static.doc_ids[d] for d in row if d >= 0] for row in want_numbers]
    for got_row, want_row, row_scores in zip(ids, want_ids, scores):  # ties may order by another numbering
        assert {(d, s) for d, s in zip(got_row, row_scores) if s > row_scores[-1]} == \
            {(d, s) for d, s in zip(want_row, row_scores) if s > row_scores[-1]}


def test_idf_orders_rare_dimensions_first():
    weights = idf(np.array([1, 10, 100, 1000]), 1000)
    assert np.all(np.diff(weights) < 0) and weights[-1] > 0


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_bad_max_df_is_a_usage_error(bad):
    with pytest.raises(UsageError, match="max_df"):
        QueryWeighting([np.zeros(3, np.int64)], 10, max_df=bad)


def test_searcher_with_stop_dims_and_idf_equals_oracle():
    from uhdsearch.encoder.config import EncoderConfig
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.search.oracle import brute_force_scores
    from uhdsearch.search.searcher import Searcher

    model = UHDEncoder.new(config=EncoderConfig(dim=512, wta_k=8, query_k=None))
    texts = ["vitamin d and bone density", "the mouse genome", "heart failure after surgery",
             "bone fractures in the elderly", "genome wide association of heart disease", "surgery outcomes"]
    docs = model.encode_document(texts, show_progress=False)
    index = BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(len(texts))], None, model.digest())
    plain = Searcher(model, index)
    searcher = Searcher(model, index, max_df=0.5, idf=True)
    queries = {"q1": "vitamin d bone surgery", "q2": "heart genome"}
    encoded = searcher.encode([type("Q", (), {"text": t})() for t in queries.values()])
    assert encoded.active_per_row().sum() < plain.encode(
        [type("Q", (), {"text": t})() for t in queries.values()]).active_per_row().sum()
    assert set(np.unique(encoded.buckets[0].data)) <= set(range(1, 16))
    oracle = brute_force_scores(docs, encoded, [1.0], "quantized")
    run = searcher.search(queries, k=6)
    for row, qid in enumerate(queries):
        got = {h.doc_id: h.score for h in run[qid]}
        want = {f"d{i}": s for i, s in enumerate(oracle[row]) if s > 0}
        assert got == pytest.approx(want)
    assert searcher.name == "uhd-binary-idf-df0.5"
