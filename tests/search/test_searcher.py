import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.errors import DimensionMismatchError
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
from uhdsearch.search.oracle import brute_force_scores
from uhdsearch.search.searcher import Searcher
from uhdsearch.topk import top_k
from uhdsearch.types import Query, Run, ScoredDoc


@settings(max_examples=60, deadline=None)
@given(scores=st.lists(st.integers(-2, 5), min_size=1, max_size=60), k=st.integers(1, 70))
def test_top_k_equals_head_of_full_sort_under_the_tie_rule(scores, k):
    values = np.array(scores, dtype=np.float64)
    docs, got = top_k(values, k)
    expected = sorted((i for i in range(len(values)) if values[i] > 0), key=lambda i: (-values[i], i))[:k]
    assert docs.tolist() == expected
    assert got.tolist() == [values[i] for i in expected]


def test_top_k_rejects_non_positive_k():
    with pytest.raises(ValueError, match="k=0 must be positive"):
        top_k(np.ones(3), 0)


@pytest.fixture(scope="module")
def indexes(tiny_encoder_session, mini_data, mini_encoding):
    ids = list(mini_data.corpus)
    return (BinaryIndex.from_encoding(mini_encoding, ids, None, tiny_encoder_session.digest()),
            WeightedIndex.from_encoding(mini_encoding, ids, None, tiny_encoder_session.digest()))


@pytest.mark.parametrize("scoring", ["binary", "weighted"])
def test_search_equals_brute_force_ranking(tiny_encoder_session, indexes, mini_data, mini_encoding, scoring):
    searcher = Searcher(tiny_encoder_session, indexes[1], scoring=scoring, query_k=30, length_norm=None)
    run = searcher.search(mini_data.queries, k=10)
    encoded = tiny_encoder_session.encode_query([q.text for q in mini_data.queries], query_k=30)
    oracle = brute_force_scores(mini_encoding, encoded, tiny_encoder_session.config.weights, scoring)
    ids = list(mini_data.corpus)
    for row, q in enumerate(mini_data.queries):
        expected = sorted(np.flatnonzero(oracle[row] > 0), key=lambda i: (-oracle[row, i], i))[:10]
        assert run.doc_ids(q.query_id) == [ids[i] for i in expected]
        assert np.allclose([h.score for h in run[q.query_id]], oracle[row, expected], atol=1e-6)


def test_bucket_weights_apply_at_query_time(tiny_encoder_session, indexes, mini_data):
    only_first = Searcher(tiny_encoder_session, indexes[0], bucket_weights=[1.0, 0.0], length_norm=None).search(mini_data.queries[:3], k=5)
    encoded = tiny_encoder_session.encode_query([q.text for q in mini_data.queries[:3]])
    for row, q in enumerate(mini_data.queries[:3]):
        m = encoded.buckets[0]
        dims = set(m.indices[m.indptr[row]:m.indptr[row + 1]])
        assert only_first[q.query_id][0].score == max(
            len(dims & set(indexes[0].document_vectors().buckets[0][d].indices)) for d in range(indexes[0].n_documents))


def test_edges_empty_query_list_empty_text_and_k(tiny_encoder_session, indexes, caplog):
    searcher = Searcher(tiny_encoder_session, indexes[0])
    assert len(searcher.search([], k=5)) == 0
    with caplog.at_level(logging.WARNING):
        run = searcher.search({"a": "   ", "b": "vitamin d"}, k=3)
    assert run["a"] == [] and len(run["b"]) == 3
    assert sum("empty or whitespace-only" in r.message for r in caplog.records) == 1
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="must be a positive integer"):
            searcher.search({"b": "x"}, k=bad)
    assert len(searcher.search({"b": "vitamin d"}, k=10_000)["b"]) <= indexes[0].n_documents


def test_over_long_query_is_truncated_with_one_warning(tiny_encoder_session, indexes, caplog):
    searcher = Searcher(tiny_encoder_session, indexes[0])
    with caplog.at_level(logging.WARNING):
        run = searcher.search({"long": "protein " * 100_000}, k=3)
    assert len(run["long"]) == 3
    assert sum("truncated" in r.message for r in caplog.records) == 1


def test_dimension_and_bucket_mismatch(tiny_backbone_dir, indexes):
    other = UHDEncoder.new(tiny_backbone_dir, EncoderConfig(dim=1024, wta_k=8, query_k=None, bucket_layers=(1, 2)))
    with pytest.raises(DimensionMismatchError, match="encoder has dim=1024 but the index has dim=2048"):
        Searcher(other, indexes[0])
    one = UHDEncoder.new(tiny_backbone_dir, EncoderConfig(dim=2048, wta_k=8, query_k=None, bucket_layers=(2,)))
    with pytest.raises(DimensionMismatchError, match="1 buckets but the index has 2"):
        Searcher(one, indexes[0])


def test_other_encoder_with_same_shape_warns(tiny_backbone_dir, indexes, caplog, tiny_config):
    other = UHDEncoder.new(tiny_backbone_dir, tiny_config.replace(seed=5))
    with caplog.at_level(logging.WARNING):
        Searcher(other, indexes[0])
    assert any("was built by encoder" in r.message for r in caplog.records)


def test_weighted_scoring_needs_weighted_index(tiny_encoder_session, indexes):
    with pytest.raises(ValueError, match="weighted scoring needs a weighted index"):
        Searcher(tiny_encoder_session, indexes[0], scoring="weighted")


def test_rerank_orders_candidates_by_uhd_score(tiny_encoder_session, indexes, mini_data):
    searcher = Searcher(tiny_encoder_session, indexes[1], scoring="weighted")
    q = mini_data.queries[0]
    full = searcher.search([q], k=50)
    pool = list(reversed(full[q.query_id][:20]))
    reranked = searcher.rerank([q], Run({q.query_id: [ScoredDoc(h.doc_id, 0.0) for h in pool]}), k=5)
    assert reranked.doc_ids(q.query_id) == full.doc_ids(q.query_id)[:5]
    with pytest.raises(ValueError, match="candidate doc_ids not in the index"):
        searcher.rerank([q], Run({q.query_id: [ScoredDoc("nope", 1.0)]}), k=5)


def test_shuffling_documents_moves_ids_not_scores(tiny_encoder_session, mini_data, mini_encoding):
    ids = list(mini_data.corpus)
    perm = np.random.default_rng(0).permutation(len(ids))
    a = Searcher(tiny_encoder_session, WeightedIndex.from_encoding(mini_encoding, ids, None), "weighted")
    b = Searcher(tiny_encoder_session, WeightedIndex.from_encoding(mini_encoding[perm], [ids[i] for i in perm], None),
                 "weighted")
    qs = mini_data.queries[:5]
    ra, rb = a.search(qs, k=400), b.search(qs, k=400)
    for q in qs:
        assert {h.doc_id: round(h.score, 5) for h in ra[q.query_id]} == {h.doc_id: round(h.score, 5) for h in rb[q.query_id]}


def test_value_idf_query_selection_prefers_rare_dimensions(tiny_encoder_session, indexes, mini_data):
    index = indexes[0]
    plain = Searcher(tiny_encoder_session, index, query_k=20)
    by_idf = Searcher(tiny_encoder_session, index, query_k=20, query_selection="value-idf")
    qs = mini_data.queries[:10]
    a, b = plain.encode(qs), by_idf.encode(qs)
    assert np.all(b.active_per_row() == 20)
    df = index.document_frequencies(0)
    mean_df_plain = np.mean([df[a.buckets[0][r].indices].mean() for r in range(10)])
    mean_df_idf = np.mean([df[b.buckets[0][r].indices].mean() for r in range(10)])
    assert mean_df_idf < mean_df_plain
    full = tiny_encoder_session.encode([q.text for q in qs], "query")  # every active dimension
    for r in range(10):  # selected dims are a subset of the query's active dims, values unchanged
        row = full.buckets[0][r].toarray().ravel()
        kept = b.buckets[0][r]
        assert np.allclose(row[kept.indices], kept.data)
    with pytest.raises(ValueError, match="query_selection='tfidf'"):
        Searcher(tiny_encoder_session, index, query_selection="tfidf")


@pytest.mark.parametrize("scoring", ["binary", "weighted"])
def test_rerank_scores_equal_the_index_kernels(tiny_encoder_session, indexes, mini_data, scoring):
    """Candidates scored from document vectors get the kernel's scores exactly (masked search_encoded)."""
    searcher = Searcher(tiny_encoder_session, indexes[1], scoring=scoring, bucket_weights=[1.0, 0.5])
    ids = list(mini_data.corpus)
    rng = np.random.default_rng(1)
    for q in mini_data.queries[:5]:
        numbers = rng.permutation(len(ids))[:300]
        encoded = searcher.encode([q])
        assert np.array_equal(searcher._candidate_scores(encoded, numbers),
                              searcher._candidate_scores_by_search(encoded, numbers))


def test_empty_queries_are_never_encoded(tiny_encoder_session, indexes, monkeypatch):
    searcher = Searcher(tiny_encoder_session, indexes[0])
    seen = []
    encode = tiny_encoder_session.encode
    monkeypatch.setattr(tiny_encoder_session, "encode", lambda texts, kind: seen.extend(texts) or encode(texts, kind))
    run = searcher.search({"a": "", "b": "vitamin d", "c": " \t"}, k=3)
    reranked = searcher.rerank({"a": "", "b": "vitamin d"}, Run({"a": run["b"], "b": run["b"]}), k=3)
    assert seen == ["vitamin d", "vitamin d"]
    assert list(run) == ["a", "b", "c"] and run["a"] == run["c"] == [] and len(run["b"]) == 3
    assert reranked["a"] == [] and reranked.doc_ids("b") == run.doc_ids("b")


def test_truncation_is_counted_from_one_tokenization(tiny_encoder_session, indexes, caplog, monkeypatch):
    encoded = tiny_encoder_session.encode(["short", "word " * 100, "tiny"], "query")
    assert encoded.truncated.tolist() == [False, True, False] and encoded.n_truncated == 1
    assert encoded[1:].truncated.tolist() == [True, False]
    searcher = Searcher(tiny_encoder_session, indexes[0])
    calls = []
    tokenizer = tiny_encoder_session.backbone.tokenizer
    monkeypatch.setattr(tiny_encoder_session.backbone, "tokenizer",
                        type("Counting", (), {"__call__": lambda self, *a, **kw: calls.append(1) or tokenizer(*a, **kw),
                                              "pad": lambda self, *a, **kw: tokenizer.pad(*a, **kw)})())
    with caplog.at_level(logging.WARNING):
        searcher.search({"a": "word " * 100, "b": "x" * 20_000, "c": "vitamin d"}, k=3)
    assert len(calls) == 1
    messages = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
    assert messages == [f"2 queries are longer than {tiny_encoder_session.config.query_max_length} tokens "
                        "and were truncated"]


def test_query_k_is_resolved_once_at_construction(tiny_encoder_session, indexes, tiny_backbone_dir, tiny_config):
    assert Searcher(tiny_encoder_session, indexes[0]).query_k is None  # the config's
    assert Searcher(tiny_encoder_session, indexes[0], query_k=12).query_k == 12
    truncating = UHDEncoder.new(tiny_backbone_dir, tiny_config.replace(query_k=7))
    searcher = Searcher(truncating, indexes[0])
    assert searcher.query_k == 7
    assert np.all(searcher.encode([Query("q", "vitamin d and bone density")]).active_per_row() <= 7)
    assert Searcher(truncating, indexes[0], query_k=0).query_k is None  # 0 keeps every dim, as --query-k 0
    with pytest.raises(ValueError, match="query_k=-1"):
        Searcher(tiny_encoder_session, indexes[0], query_k=-1)
