"""The compressed layout (codec.py) and its kernels against the brute-force oracle and the codec's own inverse."""
import json

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.index.index_oracle import assert_same_ranking, expected_top_k, random_encoding
from uhdsearch.errors import IndexFormatError
from uhdsearch.index.kernels import ranges
from uhdsearch.index.codec import BLOCK, compress, decompress
from uhdsearch.index.format import file_digest
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex, WeightedIndex
from uhdsearch.index.writer import IndexWriter

ALL_LISTS, ALL_BITMAPS = 1e-9, 1e30


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 3000), dim=st.integers(1, 40), density=st.floats(0, 0.6),
       bias=st.sampled_from([ALL_LISTS, 1.0, 8.0, ALL_BITMAPS]))
def test_codec_round_trip(seed, n, dim, density, bias):
    rng = np.random.default_rng(seed)
    m = sp.random(n, dim, density=density, format="csc", random_state=rng)
    m.sort_indices()
    packed = compress(m.indptr, m.indices, None, n, bias)
    assert np.array_equal(decompress(packed, n), m.indices)
    assert packed.payload.shape[0] == packed.payload_ptr[-1] + 1
    if bias == ALL_BITMAPS:
        assert packed.n_bitmaps() == int((np.diff(m.indptr) > 0).sum())
    if bias == ALL_LISTS:
        assert packed.n_bitmaps() == 0


def test_codec_wide_gaps_and_block_edges():
    n = 2**26  # gaps of up to 26 bits
    rng = np.random.default_rng(0)
    lengths = [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK]
    columns = [np.sort(rng.choice(n, size=k, replace=False)) for k in lengths]
    columns.append(np.array([0, n - 1]))
    indptr = np.concatenate(([0], np.cumsum([len(c) for c in columns])))
    docs = np.concatenate(columns).astype(np.int32)
    packed = compress(indptr, docs, None, n, bitmap_bias=8.0)
    assert packed.n_bitmaps() == 0
    assert np.array_equal(decompress(packed, n), docs)
    assert (packed.blocks[1::2] & 31).max() >= 20


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 500), dim=st.integers(1, 80), n_buckets=st.integers(1, 2),
       density=st.floats(0.0, 0.4), dense_dims=st.integers(0, 6), k=st.integers(1, 600),
       bias=st.sampled_from([ALL_LISTS, 1.0, 8.0, ALL_BITMAPS]), n_threads=st.sampled_from([1, 2]),
       use_deleted=st.booleans())
def test_every_layout_equals_brute_force(seed, n, dim, n_buckets, density, dense_dims, k, bias, n_threads,
                                         use_deleted):
    rng = np.random.default_rng(seed)
    docs = random_encoding(rng, n, dim, n_buckets, density, dense_dims)
    queries = random_encoding(rng, 3, dim, n_buckets, min(1.0, 2 * density + 0.1), dense_dims)
    weights = rng.uniform(-0.5, 2, n_buckets).round(2).tolist()  # negative bucket weights too
    deleted = rng.random(n) < 0.3 if use_deleted else None
    index = WeightedIndex.from_encoding(docs, [str(i) for i in range(n)], None, bitmap_bias=bias)
    for scoring in ("binary", "weighted"):
        got = index.search_encoded(queries, k, weights, scoring, deleted=deleted, n_threads=n_threads)
        assert_same_ranking(got, expected_top_k(docs, queries, k, weights, scoring, deleted))


@pytest.fixture(scope="module")
def many_documents():
    """More documents than one kernel chunk holds, so chunk and thread boundaries fall inside postings."""
    rng = np.random.default_rng(7)
    n = 2 * ranges.CHUNK + 4_321
    docs = random_encoding(rng, n, 48, 2, 0.004, dense_dims=5)
    queries = random_encoding(rng, 4, 48, 2, 0.5, dense_dims=5)
    return docs, queries, rng.random(n) < 0.25


@pytest.mark.parametrize("bias", [ALL_LISTS, 8.0, ALL_BITMAPS])
def test_chunk_and_thread_boundaries(many_documents, bias):
    docs, queries, deleted = many_documents
    index = WeightedIndex.from_encoding(docs, [str(i) for i in range(docs.n)], None, bitmap_bias=bias)
    # [0.0, 1.0]: one bucket scores the query, so the comparator takes over (in blocks of 8,192 documents) once
    # the heap is full, inside the first chunk and across the later ones
    # length_norm: the comparator's per-class thresholds across chunks and thread ranges (kernels/lengths.py)
    for scoring, weights, norm in (("binary", [1.0, 0.5], 0.0), ("weighted", [1.0, 0.5], 0.0),
                                   ("binary", [0.0, 1.0], 0.0), ("binary", [0.0, 1.0], 0.3),
                                   ("binary", [0.0, 1.0], 2.0), ("binary", [1.0, 0.5], 0.5)):
        for n_threads in (1, 2):
            for rows in (slice(0, 1), slice(0, 4)):  # one query splits documents, several split queries
                for mask in (None, deleted):
                    got = index.search_encoded(queries[rows], 300, weights, scoring, deleted=mask,
                                               n_threads=n_threads, length_norm=norm)
                    want = expected_top_k(docs, queries[rows], 300, weights, scoring, mask, norm)
                    assert np.array_equal(got[0], want[0])
                    assert np.allclose(got[1], want[1], rtol=0, atol=1e-9)


def test_bytes_per_posting_of_an_all_bitmap_index():
    rng = np.random.default_rng(0)
    docs = random_encoding(rng, 640, 30, 1, 0.5)
    index = BinaryIndex.from_encoding(docs, [str(i) for i in range(640)], None, bitmap_bias=ALL_BITMAPS)
    bitmap_bytes = 30 * 10 * 8
    offsets = 3 * 31 * 8 + 30 * 4 + 4  # indptr, block_ptr, payload_ptr; bitmap_rows; the payload pad word
    assert index.nbytes() == bitmap_bytes + offsets
    assert index.bytes_per_posting() == pytest.approx((bitmap_bytes + offsets) / docs.buckets[0].nnz)
    assert index.bytes_per_document() == pytest.approx((bitmap_bytes + offsets) / 640)


@pytest.mark.parametrize("mmap", [False, True])
def test_save_load_keeps_arrays_and_results(tmp_path, mmap):
    rng = np.random.default_rng(2)
    docs = random_encoding(rng, 300, 70, 2, 0.05, dense_dims=4)
    queries = random_encoding(rng, 5, 70, 2, 0.3)
    built = WeightedIndex.from_encoding(docs, [f"d{i}" for i in range(300)], tmp_path / "idx", bitmap_bias=2.0)
    loaded = InvertedIndex.load(tmp_path / "idx", mmap=mmap)
    assert loaded.meta["bitmap_bias"] == 2.0 and loaded.meta["format_version"] == 2
    for a, b in zip(built.buckets, loaded.buckets):
        for name in a.ARRAYS + ("weights",):
            assert np.array_equal(getattr(a, name), getattr(b, name))
        if mmap:
            assert isinstance(b.bitmaps.base, np.memmap) or isinstance(b.bitmaps, np.memmap)
    for scoring in ("binary", "weighted"):
        got, want = (i.search_encoded(queries, 20, [1.0, 0.3], scoring) for i in (loaded, built))
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_writer_and_from_encoding_write_the_same_arrays(tmp_path):
    rng = np.random.default_rng(4)
    docs = random_encoding(rng, 500, 90, 1, 0.05, dense_dims=6)
    built = WeightedIndex.from_encoding(docs, [str(i) for i in range(500)], None)
    csc = docs.buckets[0].tocsc()
    csc.sort_indices()
    with IndexWriter(tmp_path / "w", "weighted", 90, 1, 500) as writer:
        for first in range(0, 90, 7):
            last = min(first + 7, 90)
            lo, hi = csc.indptr[first], csc.indptr[last]
            writer.add_postings(0, first, csc.indptr[first:last + 1] - lo, csc.indices[lo:hi], csc.data[lo:hi])
    streamed = InvertedIndex.load(tmp_path / "w", verify=True)
    for name in built.buckets[0].ARRAYS + ("weights",):
        assert np.array_equal(getattr(built.buckets[0], name), getattr(streamed.buckets[0], name)), name


@pytest.fixture
def saved(tmp_path):
    rng = np.random.default_rng(5)
    docs = random_encoding(rng, 200, 40, 1, 0.05, dense_dims=3)
    index = BinaryIndex.from_encoding(docs, [str(i) for i in range(200)], tmp_path / "idx", bitmap_bias=1.0)
    assert 0 < index.buckets[0].n_bitmaps() < 40 and index.buckets[0].blocks.shape[0] > 0  # both kinds stored
    return tmp_path / "idx"


def _rewrite(path, name, array):
    np.save(path / name, array)
    meta = json.loads((path / "index_meta.json").read_text())
    meta["files"][name] = {"bytes": (path / name).stat().st_size, "sha256": file_digest(path / name)}
    (path / "index_meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("name", ["bucket_0.bitmaps.npy", "bucket_0.payload.npy", "bucket_0.blocks.npy"])
def test_truncation_is_caught_by_sizes_even_without_checksums(saved, name):
    path = saved / name
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(IndexFormatError, match=f"{name} has .* bytes, the manifest says"):
        InvertedIndex.load(saved, verify=False)


def test_bit_flip_is_caught_by_checksum_when_verifying(saved):
    path = saved / "bucket_0.bitmaps.npy"
    data = bytearray(path.read_bytes())
    data[-8 * 4] ^= 0x10  # document 4 of the last bitmap (4 words a row); a padding bit is refused even unverified
    path.write_bytes(bytes(data))
    assert InvertedIndex.load(saved, verify=False).n_documents == 200  # big indexes skip the checksum pass
    with pytest.raises(IndexFormatError, match="bucket_0.bitmaps.npy fails its checksum"):
        InvertedIndex.load(saved, verify=True)
    with pytest.raises(IndexFormatError, match="fails its checksum"):
        InvertedIndex.load(saved)  # small indexes are verified by default


def test_inconsistent_arrays_are_named(saved):
    blocks = np.load(saved / "bucket_0.blocks.npy")
    bad = blocks.copy()
    bad[1::2] = (np.uint32(10**6) << np.uint32(5)) | np.uint32(3)  # offsets far outside the payload
    _rewrite(saved, "bucket_0.blocks.npy", bad)
    with pytest.raises(IndexFormatError, match="blocks.npy points outside its payload"):
        InvertedIndex.load(saved)
    _rewrite(saved, "bucket_0.blocks.npy", blocks)
    rows = np.load(saved / "bucket_0.bitmap_rows.npy")
    rows[rows >= 0] = 0
    _rewrite(saved, "bucket_0.bitmap_rows.npy", rows)
    with pytest.raises(IndexFormatError, match="bitmap_rows.npy does not number its bitmaps"):
        InvertedIndex.load(saved)


def test_wrong_dtype_is_named(saved):
    _rewrite(saved, "bucket_0.payload.npy", np.load(saved / "bucket_0.payload.npy").astype(np.int64))
    with pytest.raises(IndexFormatError, match="payload.npy should be 1-D uint32"):
        InvertedIndex.load(saved)


def test_version_1_index_asks_for_a_rebuild(saved):
    meta = json.loads((saved / "index_meta.json").read_text())
    meta["format_version"] = 1
    (saved / "index_meta.json").write_text(json.dumps(meta))
    with pytest.raises(IndexFormatError, match="format_version 1 .* rebuild the index"):
        InvertedIndex.load(saved)


@pytest.mark.parametrize("bias", [ALL_BITMAPS, ALL_LISTS, 0.5])
def test_deep_bit_sliced_counts_equal_brute_force(bias):
    """Hundreds of dense dims per query: counts carry through every plane of the bit-sliced adder, whether the
    bitmaps' adder or the lists' posting-by-posting adds (bias 0.5 mixes both) fill the planes."""
    rng = np.random.default_rng(3)
    docs = random_encoding(rng, 1_000, 400, 1, 0.5, dense_dims=0)
    queries = random_encoding(rng, 3, 400, 1, 0.9, dense_dims=0)
    index = BinaryIndex.from_encoding(docs, [str(i) for i in range(1_000)], None, bitmap_bias=bias)
    if bias == 0.5:
        assert 0 < index.buckets[0].n_bitmaps() < 400
    for k in (50, 1_000):  # 1,000: every document offered; 50: the comparator on exact whole counts
        got = index.search_encoded(queries, k, [1.0], "binary")
        assert got[1][:, 0].min() > 150  # top counts need 8 planes
        assert_same_ranking(got, expected_top_k(docs, queries, k, [1.0], "binary", None))
