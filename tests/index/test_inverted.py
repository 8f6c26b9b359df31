import json

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.index.memory_pages import linux_only, resident_mapped_bytes, skip_unless_pages_can_be_populated
from uhdsearch.errors import DataFormatError, IndexFormatError
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex, WeightedIndex
from uhdsearch.index.live.segments import SegmentedIndex
from uhdsearch.io import is_memory_mapped, prefault
from uhdsearch.search.oracle import brute_force_scores, score_query
from uhdsearch.sparse import SparseEncoding


def random_encoding(rng, n, dim, n_buckets, density):
    return SparseEncoding([sp.random(n, dim, density=density, format="csr", dtype=np.float32,
                                     random_state=rng, data_rvs=lambda k: rng.uniform(0.01, 1, k))
                           for _ in range(n_buckets)])


def index_scores(index, queries, weights, scoring):
    return np.stack([score_query(index.postings, queries, r, index.n_documents, weights, scoring)
                     for r in range(queries.n)])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 40), dim=st.integers(1, 300), n_buckets=st.integers(1, 3),
       density=st.floats(0.0, 0.3))
def test_index_scores_equal_brute_force_on_random_vectors(seed, n, dim, n_buckets, density):
    rng = np.random.default_rng(seed)
    docs = random_encoding(rng, n, dim, n_buckets, density)
    queries = random_encoding(rng, 5, dim, n_buckets, density * 2)
    weights = rng.uniform(0, 2, n_buckets).tolist()
    index = WeightedIndex.from_encoding(docs, [f"d{i}" for i in range(n)], None)
    for scoring in ("binary", "weighted"):
        assert np.allclose(index_scores(index, queries, weights, scoring),
                           brute_force_scores(docs, queries, weights, scoring), atol=1e-5)


def test_index_scores_equal_brute_force_on_real_vectors(mini_encoding, mini_data, tiny_encoder_session, tmp_path):
    doc_ids = list(mini_data.corpus)
    queries = tiny_encoder_session.encode_query([q.text for q in mini_data.queries], query_k=50)
    weights = [1.0, 0.5]
    WeightedIndex.from_encoding(mini_encoding, doc_ids, tmp_path / "w")
    BinaryIndex.from_encoding(mini_encoding, doc_ids, tmp_path / "b")
    weighted, binary = InvertedIndex.load(tmp_path / "w"), InvertedIndex.load(tmp_path / "b")
    assert isinstance(weighted, WeightedIndex) and isinstance(binary, BinaryIndex)
    expected_binary = brute_force_scores(mini_encoding, queries, weights, "binary")
    assert np.array_equal(index_scores(binary, queries, weights, "binary"), expected_binary)
    assert np.allclose(index_scores(weighted, queries, weights, "weighted"),
                       brute_force_scores(mini_encoding, queries, weights, "weighted"), atol=1e-6)
    assert expected_binary.max() > 0


def test_save_load_round_trip_and_document_vectors(mini_encoding, mini_data, tmp_path):
    doc_ids = list(mini_data.corpus)
    built = WeightedIndex.from_encoding(mini_encoding, doc_ids, tmp_path / "w", encoder_digest="abc")
    loaded = InvertedIndex.load(tmp_path / "w", mmap=True)
    assert loaded.doc_ids == doc_ids and loaded.encoder_digest == "abc"
    assert loaded.n_postings() == built.n_postings() == sum(m.nnz for m in mini_encoding.buckets)
    back = loaded.document_vectors()
    for a, b in zip(back.buckets, mini_encoding.buckets):
        assert (a != b).nnz == 0
    binary = BinaryIndex.from_encoding(mini_encoding, doc_ids, None)
    assert np.all(binary.document_vectors().buckets[0].data == 1.0)
    meta = json.loads((tmp_path / "w" / "index_meta.json").read_text())
    assert meta["format"] == "uhd-index" and meta["variant"] == "weighted" and meta["n_documents"] == len(doc_ids)


def test_postings_are_sorted_by_doc_number(mini_encoding, mini_data):
    index = BinaryIndex.from_encoding(mini_encoding, list(mini_data.corpus), None)
    p = index.postings[0]
    for d in range(0, index.dim, 97):
        docs = p.docs[p.indptr[d]:p.indptr[d + 1]]
        assert np.all(np.diff(docs) > 0)


def test_adding_a_document_never_changes_another_documents_score():
    rng = np.random.default_rng(0)
    docs = random_encoding(rng, 20, 100, 1, 0.1)
    queries = random_encoding(rng, 4, 100, 1, 0.2)
    small = WeightedIndex.from_encoding(docs[:19], [str(i) for i in range(19)], None)
    large = WeightedIndex.from_encoding(docs, [str(i) for i in range(20)], None)
    for scoring in ("binary", "weighted"):
        assert np.allclose(index_scores(small, queries, [1.0], scoring),
                           index_scores(large, queries, [1.0], scoring)[:, :19])


@pytest.fixture
def saved_index(mini_encoding, mini_data, tmp_path):
    WeightedIndex.from_encoding(mini_encoding, list(mini_data.corpus), tmp_path / "idx")
    return tmp_path / "idx"


def _edit_meta(path, **changes):
    meta = json.loads((path / "index_meta.json").read_text())
    meta.update(changes)
    (path / "index_meta.json").write_text(json.dumps(meta))


def test_missing_directory_and_missing_meta(tmp_path):
    with pytest.raises(FileNotFoundError, match="no index directory"):
        InvertedIndex.load(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(IndexFormatError, match="not a uhdsearch index: .* has no index_meta.json"):
        InvertedIndex.load(tmp_path / "empty")


def test_foreign_and_newer_formats(saved_index):
    _edit_meta(saved_index, format="lucene")
    with pytest.raises(IndexFormatError, match="format is 'lucene'; this version reads 'uhd-index'"):
        InvertedIndex.load(saved_index)
    _edit_meta(saved_index, format="uhd-index", format_version=7)
    with pytest.raises(IndexFormatError, match="format_version 7 is not supported"):
        InvertedIndex.load(saved_index)


def test_meta_that_is_not_json(saved_index):
    (saved_index / "index_meta.json").write_text("{")
    with pytest.raises(IndexFormatError, match="not valid JSON"):
        InvertedIndex.load(saved_index)


def test_truncated_file_is_detected(saved_index):
    path = saved_index / "bucket_0.payload.npy"
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(IndexFormatError, match="bucket_0.payload.npy has .* bytes, the manifest says"):
        InvertedIndex.load(saved_index)


def test_bit_flip_is_detected_by_checksum(saved_index):
    path = saved_index / "bucket_1.weights.npy"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(IndexFormatError, match="fails its checksum"):
        InvertedIndex.load(saved_index)


def test_missing_file_is_detected(saved_index):
    (saved_index / "bucket_1.indptr.npy").unlink()
    with pytest.raises(IndexFormatError, match="bucket_1.indptr.npy is missing"):
        InvertedIndex.load(saved_index)


def test_pickled_array_is_refused_without_unpickling(saved_index):
    path = saved_index / "bucket_0.payload.npy"
    np.save(path, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    from uhdsearch.index.format import file_digest

    meta = json.loads((saved_index / "index_meta.json").read_text())
    meta["files"]["bucket_0.payload.npy"] = {"bytes": path.stat().st_size, "sha256": file_digest(path)}
    (saved_index / "index_meta.json").write_text(json.dumps(meta))
    with pytest.raises(IndexFormatError, match="not a valid .npy array"):
        InvertedIndex.load(saved_index)


def test_weighted_index_class_refuses_a_binary_index(mini_encoding, mini_data, tmp_path):
    BinaryIndex.from_encoding(mini_encoding, list(mini_data.corpus), tmp_path / "b")
    with pytest.raises(IndexFormatError, match="is a binary index"):
        WeightedIndex.load(tmp_path / "b")


def test_duplicate_doc_ids_and_count_mismatch():
    enc = random_encoding(np.random.default_rng(1), 3, 10, 1, 0.5)
    with pytest.raises(DataFormatError, match="duplicate doc_id 'a'"):
        BinaryIndex.from_encoding(enc, ["a", "b", "a"], None)
    with pytest.raises(ValueError, match="2 doc_ids for 3 encoded documents"):
        BinaryIndex.from_encoding(enc, ["a", "b"], None)


def test_build_rejects_empty_corpus_and_existing_target(tiny_encoder_session, mini_data, tmp_path):
    with pytest.raises(ValueError, match="the corpus is empty"):
        BinaryIndex.build(tiny_encoder_session, [], tmp_path / "x")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    docs = list(mini_data.corpus.values())[:3]
    with pytest.raises(FileExistsError, match="overwrite=True"):
        BinaryIndex.build(tiny_encoder_session, docs, tmp_path / "x", show_progress=False)
    assert (tmp_path / "x" / "keep.txt").read_text() == "mine"
    built = BinaryIndex.build(tiny_encoder_session, docs, tmp_path / "x", overwrite=True, show_progress=False)
    assert built.n_documents == 3 and not (tmp_path / "x" / "keep.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["x"]  # no temporary directories left behind


def test_failed_write_leaves_no_half_index(mini_encoding, tmp_path):
    with pytest.raises(ValueError, match=r"doc_id .bad\\nid. \(document 1\) is empty or contains whitespace"):
        BinaryIndex.from_encoding(mini_encoding[:2], ["ok", "bad\nid"], tmp_path / "idx")
    assert list(tmp_path.iterdir()) == []


def test_malformed_manifest_entry_and_offsets(saved_index):
    meta = json.loads((saved_index / "index_meta.json").read_text())
    meta["files"]["doc_ids.txt"] = "big"
    (saved_index / "index_meta.json").write_text(json.dumps(meta))
    with pytest.raises(IndexFormatError, match="the entry for doc_ids.txt is malformed"):
        InvertedIndex.load(saved_index)


def test_decreasing_offsets_are_detected(saved_index):
    from uhdsearch.index.format import file_digest

    path = saved_index / "bucket_0.indptr.npy"
    indptr = np.load(path)
    indptr[5] = indptr[6] + 1
    np.save(path, indptr)
    meta = json.loads((saved_index / "index_meta.json").read_text())
    meta["files"]["bucket_0.indptr.npy"]["sha256"] = file_digest(path)
    (saved_index / "index_meta.json").write_text(json.dumps(meta))
    with pytest.raises(IndexFormatError, match="not a valid postings offset array"):
        InvertedIndex.load(saved_index)


@linux_only
@pytest.mark.parametrize("background", [False, True])
def test_warm_up_maps_a_memory_mapped_index_into_the_process(tmp_path, background):
    rng = np.random.default_rng(0)
    docs = random_encoding(rng, 40_000, 128, 1, 0.3)  # dense dims: stored as bitmaps, ~5 KB each
    BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(docs.n)], None).save(tmp_path / "idx")
    queries = random_encoding(rng, 3, 128, 1, 0.2)
    expected = BinaryIndex.load(tmp_path / "idx", mmap=False).search_encoded(queries, 10, [1.0], "binary")

    index = BinaryIndex.load(tmp_path / "idx", mmap=True)
    bitmaps = index.buckets[0].bitmaps
    assert is_memory_mapped(bitmaps) and bitmaps.nbytes > 500_000
    skip_unless_pages_can_be_populated(tmp_path)
    before = resident_mapped_bytes()
    thread = index.warm_up(background=background)
    if background:
        thread.join(timeout=30)
        assert not thread.is_alive()
    assert resident_mapped_bytes() - before >= 0.9 * bitmaps.nbytes
    got = index.search_encoded(queries, 10, [1.0], "binary")
    assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])


def test_warm_up_covers_weights_and_skips_an_index_in_memory(mini_encoding, mini_data):
    index = WeightedIndex.from_encoding(mini_encoding, list(mini_data.corpus), None)
    arrays = index.arrays()
    assert any(a is index.buckets[0].weights for a in arrays)
    assert len(arrays) == index.n_buckets * (len(index.buckets[0].ARRAYS) + 1)
    assert {prefault(a) for a in arrays} == {"skipped"}


@linux_only
def test_warm_up_of_a_segmented_index_maps_every_segment(tmp_path):
    rng = np.random.default_rng(1)
    index = SegmentedIndex.create(tmp_path / "seg", "binary", dim=128, n_buckets=1)
    for part in range(2):
        # 64 x 312 documents: no padding bits, so load's padding check (it reads each bitmap's last word, which
        # faults every page when a row is shorter than one) leaves the pages to warm_up
        docs = random_encoding(rng, 19_968, 128, 1, 0.3)
        index.add(docs, [f"p{part}-{i}" for i in range(docs.n)])
        index.commit()
    index.close()
    opened = SegmentedIndex.open(tmp_path / "seg", mmap=True)
    bitmaps = [s.index.buckets[0].bitmaps for s in opened._segments]
    assert len(bitmaps) == 2 and all(is_memory_mapped(b) for b in bitmaps)
    skip_unless_pages_can_be_populated(tmp_path)
    before = resident_mapped_bytes()
    assert opened.warm_up() is None
    assert resident_mapped_bytes() - before >= 0.9 * sum(b.nbytes for b in bitmaps)

