"""The exact oracle of benchmarks/speed/search_speed.py: streamed accumulation equals brute force; tie rule; recall."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from benchmarks.lib.speed_common import exact_top, recall_vs_exact
from benchmarks.lib.synthetic import DensityProfile, SyntheticPostings
from uhdsearch.topk import top_k


@pytest.fixture(scope="module")
def bench():
    from benchmarks.speed import search_speed

    return search_speed


def test_streamed_oracle_equals_brute_force(bench):
    rng = np.random.default_rng(0)
    dim, n_docs = 300, 2000
    profile = DensityProfile(rng.uniform(0, 0.3, dim), rng.integers(20, 70, 200), np.linspace(0.01, 0.2, 11))
    synth = SyntheticPostings(profile, n_docs, seed=5)
    queries = sp.random(7, dim, density=0.1, format="csr", random_state=1, dtype=np.float32)
    counts = np.zeros((7, n_docs), np.int32)
    dots = np.zeros((7, n_docs))
    parts = []
    for block in synth.blocks(max_postings=5000):  # many ranges, as at scale
        bench._accumulate(block.first_dim, block.indptr, block.docs, block.weights, queries.indptr,
                          queries.indices, queries.data, counts, dots)
        parts.append(sp.csc_matrix((block.weights, block.docs, block.indptr), shape=(n_docs, block.indptr.size - 1)))
    documents = sp.hstack(parts).tocsr()
    expected_dots = (queries.astype(np.float64) @ documents.astype(np.float64).T).toarray()
    binary_q, binary_d = queries.copy(), documents.copy()
    binary_q.data[:], binary_d.data[:] = 1, 1
    np.testing.assert_array_equal(counts, (binary_q @ binary_d.T).toarray())
    np.testing.assert_allclose(dots, expected_dots, rtol=1e-12)


def test_exact_top_follows_the_tie_rule():
    rng = np.random.default_rng(1)
    for _ in range(50):
        scores = rng.integers(0, 6, 200).astype(np.float64)  # many ties, as overlap counts have
        top, ties = exact_top(scores)
        expected, _ = top_k(scores, 10)
        np.testing.assert_array_equal(top[: expected.size], expected)
        kth = np.sort(scores[scores > 0])[::-1][9]
        np.testing.assert_array_equal(ties, np.flatnonzero(scores >= kth))


def test_recall_counts_tied_documents_as_correct():
    ties = [np.arange(12)]  # 12 documents share the 10th best score
    assert recall_vs_exact(np.array([[11, 10, 9, 8, 7, 6, 5, 4, 3, 2]]), ties) == 1.0
    assert recall_vs_exact(np.array([[0, 1, 2, 3, 4, 50, 51, 52, 53, -1]]), ties) == 0.5


def test_cached_indexes_of_another_layout_are_generated_again(bench, tmp_path):
    import json

    from uhdsearch.index.codec import DEFAULT_BITMAP_BIAS
    from uhdsearch.sparse import SparseEncoding

    rng = np.random.default_rng(1)
    profile = DensityProfile(rng.uniform(0, 0.3, 200), rng.integers(20, 60, 100), np.linspace(0.01, 0.2, 11))
    queries = SparseEncoding([sp.random(4, 200, density=0.1, format="csr", random_state=2, dtype=np.float32)])
    directory = bench.build_synthetic(profile, queries, 500, 0, tmp_path, "test", 1e9)
    done = (directory / "done.json").stat().st_mtime_ns
    assert bench.build_synthetic(profile, queries, 500, 0, tmp_path, "test", 1e9) == directory
    assert (directory / "done.json").stat().st_mtime_ns == done  # reused
    meta_path = directory / "uhd-binary" / "index_meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(dict(meta, bitmap_bias=1.0)))  # as an older version wrote it
    bench.build_synthetic(profile, queries, 500, 0, tmp_path, "test", 1e9)
    assert json.loads(meta_path.read_text())["bitmap_bias"] == DEFAULT_BITMAP_BIAS
    assert (directory / "done.json").stat().st_mtime_ns != done


def test_ratios_report_the_machines_own_two_thread_scaling(bench):
    """The 2-thread goal line shows, beside the search's speed-up, what the machine gave the bare adder."""
    base = {"n_docs": 1000, "floor_ms": 2.0, "bytes_per_posting": 1.05}
    rows = [dict(base, method="uhd-binary", threads=1, p50_ms=4.0),
            dict(base, method="uhd-binary", threads=2, p50_ms=2.5, adder_two_thread_speedup=1.7),
            dict(base, method="bm25s", threads=1, p50_ms=40.0)]
    line = bench.ratios(rows)[0]
    assert "p50 / floor = 2.00" in line and "bm25s p50 = 0.100" in line
    assert "2-thread speed-up = 1.60x (goal >= 1.6; the machine's adder alone: 1.70x)" in line
    assert 0.2 < bench.adder_two_thread_speedup(repeats=1) < 5.0
