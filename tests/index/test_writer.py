import numpy as np
import pytest

from tests.index.index_oracle import expected_top_k, random_encoding
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.index.writer import IndexWriter


def _write_in_ranges(encoding, path, variant, step):
    ids = [f"d{i}" for i in range(encoding.n)]
    with IndexWriter(path, variant, encoding.dim, encoding.n_buckets, encoding.n, ids, "digest") as writer:
        for b, m in enumerate(encoding.buckets):
            csc = m.tocsc()
            csc.sort_indices()
            for first in range(0, encoding.dim, step):
                last = min(first + step, encoding.dim)
                lo, hi = csc.indptr[first], csc.indptr[last]
                writer.add_postings(b, first, csc.indptr[first:last + 1] - lo, csc.indices[lo:hi],
                                    csc.data[lo:hi] if variant == "weighted" else None)
    return ids


@pytest.mark.parametrize("variant", ["binary", "weighted"])
def test_streamed_index_equals_one_built_in_memory(tmp_path, variant):
    rng = np.random.default_rng(1)
    docs = random_encoding(rng, 200, 90, 2, 0.1, dense_dims=4)
    queries = random_encoding(rng, 5, 90, 2, 0.3)
    ids = _write_in_ranges(docs, tmp_path / "streamed", variant, step=17)
    streamed = InvertedIndex.load(tmp_path / "streamed", verify=True)
    assert streamed.variant == variant and streamed.doc_ids == ids and streamed.encoder_digest == "digest"
    for a, b in zip(streamed.document_vectors().buckets, docs.buckets):
        expected = b if variant == "weighted" else (b != 0).astype(np.float32)
        assert (a != expected).nnz == 0
    numbers, scores = streamed.search_encoded(queries, 10, [1.0, 0.5], "binary")
    want = expected_top_k(docs, queries, 10, [1.0, 0.5], "binary")
    assert np.array_equal(numbers, want[0]) and np.array_equal(scores, want[1])


def test_writer_rejects_out_of_order_ranges_and_bad_postings(tmp_path):
    writer = IndexWriter(tmp_path / "idx", "weighted", dim=10, n_buckets=1, n_documents=5)
    with pytest.raises(ValueError, match="expected the range starting at dim 0, got first_dim=3"):
        writer.add_postings(0, 3, np.array([0, 1]), np.array([0]), np.ones(1))
    with pytest.raises(ValueError, match="strictly ascending"):
        writer.add_postings(0, 0, np.array([0, 2]), np.array([3, 1]), np.ones(2))
    with pytest.raises(ValueError, match=r"doc numbers must lie in 0..4"):
        writer.add_postings(0, 0, np.array([0, 1]), np.array([5]), np.ones(1))
    with pytest.raises(ValueError, match="needs posting weights"):
        writer.add_postings(0, 0, np.array([0, 1]), np.array([1]))
    with pytest.raises(ValueError, match="exceed dim=10"):
        writer.add_postings(0, 0, np.zeros(12, np.int64), np.array([], np.int32), np.ones(0))
    writer.add_postings(0, 0, np.array([0, 2, 3]), np.array([1, 4, 0]), np.ones(3))  # dims may step down
    writer.abort()
    assert list(tmp_path.iterdir()) == []  # nothing half-written is left


def test_writer_failure_inside_with_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with IndexWriter(tmp_path / "idx", "binary", dim=4, n_buckets=1, n_documents=3) as writer:
            writer.add_postings(0, 0, np.array([0, 1]), np.array([2]))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with IndexWriter(tmp_path / "idx", "binary", dim=4, n_buckets=1, n_documents=3) as writer:
        writer.add_postings(0, 0, np.array([0, 1]), np.array([2]))  # dims 1..3 stay empty
    index = InvertedIndex.load(tmp_path / "idx")
    assert index.document_frequencies(0).tolist() == [1, 0, 0, 0]
    with pytest.raises(FileExistsError, match="overwrite=True"):
        IndexWriter(tmp_path / "idx", "binary", dim=4, n_buckets=1, n_documents=3)
