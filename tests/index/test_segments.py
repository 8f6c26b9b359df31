"""SegmentedIndex: adds, deletes, replaces, commits and merges give exactly a fresh build's results."""
import json

import numpy as np
import pytest

from tests.index.segments_checks import (DIM, N_BUCKETS, WEIGHTS, assert_equals_fresh_build, live_ids, random_add, random_delete,
                             random_encoding, ranking)
from uhdsearch.errors import DataFormatError, DimensionMismatchError, IndexFormatError
from uhdsearch.errors import IndexLockedError
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.index.live.segments import SegmentedIndex


@pytest.mark.parametrize("seed", range(4))
def test_random_updates_equal_a_fresh_build_of_the_final_corpus(tmp_path, seed):
    rng = np.random.default_rng(seed)
    variant = "weighted" if seed % 2 else "binary"
    queries = random_encoding(rng, 6, density=0.3)
    path = tmp_path / "live"
    index = SegmentedIndex.create(path, variant, DIM, N_BUCKETS, max_segments=4 if seed % 3 == 0 else None)
    expected, committed = {}, {}
    next_id = 0
    for step in range(30):
        op = rng.choice(["add", "add", "replace", "delete", "commit", "merge"], p=[.3, .1, .15, .2, .2, .05])
        if op == "add":
            next_id = random_add(index, rng, expected, next_id)
        elif op == "replace" and expected:
            old = list(rng.choice(sorted(expected), size=min(3, len(expected)), replace=False))
            ids = old + [f"d{next_id}"]
            next_id += 1
            encoding = random_encoding(rng, len(ids))
            index.add(encoding, ids, replace=True)
            expected.update({d: encoding[[i]] for i, d in enumerate(ids)})
        elif op == "delete" and expected:
            random_delete(index, rng, expected)
        elif op in ("commit", "merge"):
            index.commit() if op == "commit" else index.merge(max_segments=int(rng.integers(1, 3)))
            committed = dict(expected)
            if op == "merge":
                assert index.n_segments <= 2
        # The writer sees its own changes at once; a new reader sees only the last commit.
        assert_equals_fresh_build(index, expected, queries)
        if op in ("commit", "merge") or step % 5 == 0:
            assert_equals_fresh_build(SegmentedIndex.open(path), committed, queries)
    index.merge()
    assert index.n_segments == (1 if expected else 0)
    assert_equals_fresh_build(SegmentedIndex.open(path), expected, queries)
    index.close()


def test_deleted_numbers_are_never_returned_and_numbering_is_global(tmp_path):
    rng = np.random.default_rng(1)
    docs = random_encoding(rng, 6, density=0.5)
    index = SegmentedIndex.create(tmp_path / "x", "weighted", DIM, N_BUCKETS)
    index.add(docs[:3], ["a", "b", "c"])
    index.commit()
    index.add(docs[3:], ["d", "e", "f"])
    index.delete(["b", "e"])
    assert index.doc_ids == ["a", None, "c", "d", "f"]  # uncommitted additions are buffered without "e"
    index.commit()
    assert index.doc_ids == ["a", None, "c", "d", "f"]
    numbers, scores = index.search_encoded(docs, 10, WEIGHTS, "weighted")
    assert numbers.shape == (6, 4)  # min(k, live documents)
    assert 1 not in numbers
    # Each query is a document itself; the live ones rank themselves among the best.
    for row, d in [(0, "a"), (2, "c"), (3, "d"), (5, "f")]:
        assert d in [index.doc_ids[n] for n in numbers[row] if n >= 0]
    # A caller's own mask over global numbers hides more.
    mask = np.zeros(len(index.doc_ids), np.bool_)
    mask[0] = True
    numbers, _ = index.search_encoded(docs, 10, WEIGHTS, "weighted", deleted=mask)
    assert 0 not in numbers and 1 not in numbers


def test_nothing_is_visible_to_a_new_reader_before_commit(tmp_path):
    rng = np.random.default_rng(2)
    index = SegmentedIndex.create(tmp_path / "x", "binary", DIM, N_BUCKETS)
    index.add(random_encoding(rng, 4), ["a", "b", "c", "d"])
    assert SegmentedIndex.open(tmp_path / "x").n_documents == 0
    assert index.commit() == 2
    index.delete(["a"])
    index.add(random_encoding(rng, 1), ["e"])
    reader = SegmentedIndex.open(tmp_path / "x")
    assert (reader.generation, live_ids(reader)) == (2, ["a", "b", "c", "d"])
    index.commit()
    assert live_ids(SegmentedIndex.open(tmp_path / "x")) == ["b", "c", "d", "e"]
    assert live_ids(reader) == ["a", "b", "c", "d"]  # an open reader keeps its snapshot


def test_reopen_shares_unchanged_segments_and_sees_the_newest_commit(tmp_path):
    rng = np.random.default_rng(12)
    path = tmp_path / "x"
    writer = SegmentedIndex.create(path, "weighted", DIM, N_BUCKETS)
    writer.add(random_encoding(rng, 5), [f"a{i}" for i in range(5)])
    writer.commit()
    reader = SegmentedIndex.open(path)
    assert reader.reopen() is reader and writer.reopen() is writer
    writer.delete(["a1"])
    writer.add(random_encoding(rng, 3), ["b0", "b1", "b2"])
    writer.commit()
    newer = reader.reopen()
    assert newer.generation == 3 and reader.generation == 2
    assert newer._segments[0].index is reader._segments[0].index  # not loaded again
    assert live_ids(newer) == live_ids(SegmentedIndex.open(path)) == ["a0", "a2", "a3", "a4", "b0", "b1", "b2"]
    assert live_ids(reader) == [f"a{i}" for i in range(5)]
    queries = random_encoding(rng, 4, density=0.3)
    assert ranking(newer, queries, WEIGHTS, "weighted") == ranking(SegmentedIndex.open(path), queries, WEIGHTS,
                                                                    "weighted")


def test_merge_rewrites_live_documents_and_removes_old_segments_one_commit_later(tmp_path):
    rng = np.random.default_rng(3)
    path = tmp_path / "x"
    index = SegmentedIndex.create(path, "weighted", DIM, N_BUCKETS)
    for i in range(3):
        index.add(random_encoding(rng, 5), [f"s{i}-{j}" for j in range(5)])
        index.commit()
    index.delete(["s0-1", "s2-4"])
    index.commit()
    assert sorted(p.name for p in path.iterdir() if p.name.startswith("seg_")) == [
        "seg_0", "seg_0.del_5.npy", "seg_1", "seg_2", "seg_2.del_5.npy"]
    index.merge()
    assert index.n_segments == 1 and index.doc_ids == live_ids(index)
    assert [d for d in index.doc_ids] == [f"s{i}-{j}" for i in range(3) for j in range(5)
                                          if (i, j) not in ((0, 1), (2, 4))]
    # The commit before the merge is the fallback, so its segments stay until the next commit.
    assert (path / "seg_0").is_dir()
    index.commit()
    assert sorted(p.name for p in path.iterdir()) == ["commit_6.json", "commit_7.json", "seg_3", "write.lock"]


def test_merge_policy_on_commit_keeps_at_most_max_segments(tmp_path):
    rng = np.random.default_rng(4)
    index = SegmentedIndex.create(tmp_path / "x", "binary", DIM, N_BUCKETS, max_segments=2)
    sizes = [5, 1, 1, 4]
    for i, n in enumerate(sizes):
        index.add(random_encoding(rng, n), [f"s{i}-{j}" for j in range(n)])
        index.commit()
        assert index.n_segments <= 2
    # Cheapest contiguous run merged: [5] + [1+1 ...] + [4] kept in global order.
    assert live_ids(index) == [f"s{i}-{j}" for i, n in enumerate(sizes) for j in range(n)]
    assert SegmentedIndex.open(tmp_path / "x").n_segments == 2


def test_fully_deleted_segments_are_dropped(tmp_path):
    rng = np.random.default_rng(5)
    index = SegmentedIndex.create(tmp_path / "x", "binary", DIM, N_BUCKETS)
    index.add(random_encoding(rng, 2), ["a", "b"])
    index.commit()
    index.delete(["a", "b"])
    index.commit()
    assert index.n_segments == 0 and index.doc_ids == []
    reader = SegmentedIndex.open(tmp_path / "x")
    numbers, scores = reader.search_encoded(random_encoding(rng, 2), 3, WEIGHTS, "binary")
    assert numbers.shape == (2, 0) and scores.shape == (2, 0)


def test_add_errors(tmp_path):
    rng = np.random.default_rng(6)
    index = SegmentedIndex.create(tmp_path / "x", "binary", DIM, N_BUCKETS)
    index.add(random_encoding(rng, 2), ["a", "b"])
    with pytest.raises(DataFormatError, match=r"1 doc_ids are already in the index, e.g. \['b'\]; pass replace=True"):
        index.add(random_encoding(rng, 2), ["b", "c"])
    with pytest.raises(DataFormatError, match=r"duplicate doc_ids in one add: \['c'\]"):
        index.add(random_encoding(rng, 2), ["c", "c"])
    with pytest.raises(DimensionMismatchError, match="dim=61 and 2 buckets but the index has dim=60 and 2"):
        index.add(random_encoding(rng, 1, dim=61), ["c"])
    with pytest.raises(DimensionMismatchError, match="dim=60 and 1 buckets"):
        index.add(random_encoding(rng, 1, n_buckets=1), ["c"])
    with pytest.raises(ValueError, match="2 doc_ids for 1 encoded documents"):
        index.add(random_encoding(rng, 1), ["c", "d"])
    with pytest.raises(TypeError, match="SparseEncoding"):
        index.add(np.zeros((1, DIM)), ["c"])
    assert live_ids(index) == ["a", "b"]  # failed adds change nothing


def test_delete_errors_list_unknown_ids_or_ignore_them(tmp_path):
    rng = np.random.default_rng(7)
    index = SegmentedIndex.create(tmp_path / "x", "binary", DIM, N_BUCKETS)
    index.add(random_encoding(rng, 3), ["a", "b", "c"])
    index.commit()
    with pytest.raises(ValueError, match=r"2 doc_ids are not in the index: \['x', 'y'\]; pass missing_ok=True"):
        index.delete(["a", "x", "y"])
    assert live_ids(index) == ["a", "b", "c"]
    assert index.delete(["a", "x"], missing_ok=True) == 1
    with pytest.raises(ValueError, match=r"\['a'\]"):
        index.delete(["a"])  # already deleted
    with pytest.raises(TypeError, match="not one string"):
        index.delete("b")


def test_single_writer_lock_and_read_only_instances(tmp_path):
    path = tmp_path / "x"
    writer = SegmentedIndex.create(path, "binary", DIM, N_BUCKETS)
    with pytest.raises(IndexLockedError, match="being written by another writer.*writable=False"):
        SegmentedIndex.open(path, writable=True)
    reader = SegmentedIndex.open(path)
    with pytest.raises(IndexLockedError, match=r"open read-only.*writable=True"):
        reader.add(random_encoding(np.random.default_rng(0), 1), ["a"])
    with pytest.raises(IndexLockedError, match="read-only"):
        reader.commit()
    writer.add(random_encoding(np.random.default_rng(0), 1), ["a"])
    with pytest.warns(UserWarning, match="discards uncommitted changes"):
        writer.close()
    with SegmentedIndex.open(path, writable=True) as again:
        assert again.n_documents == 0
        again.add(random_encoding(np.random.default_rng(0), 1), ["a"])
        again.commit()
    assert SegmentedIndex.open(path).n_documents == 1


def test_create_and_open_errors(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("x")
    with pytest.raises(FileExistsError, match="already exists and is not empty"):
        SegmentedIndex.create(tmp_path / "full", "binary", DIM, N_BUCKETS)
    with pytest.raises(ValueError, match="variant='dense'"):
        SegmentedIndex.create(tmp_path / "y", "dense", DIM, N_BUCKETS)
    with pytest.raises(ValueError, match="dim=0 must be a positive integer"):
        SegmentedIndex.create(tmp_path / "y", "binary", 0, N_BUCKETS)
    with pytest.raises(FileNotFoundError, match="no index directory"):
        SegmentedIndex.open(tmp_path / "missing")
    with pytest.raises(IndexFormatError, match="not a segmented uhdsearch index: .* has no commit_"):
        SegmentedIndex.open(tmp_path / "full")
    index = SegmentedIndex.create(tmp_path / "z", "binary", DIM, N_BUCKETS)
    with pytest.raises(ValueError, match="max_segments=0 must be a positive integer"):
        index.merge(max_segments=0)
    queries = random_encoding(np.random.default_rng(0), 1)
    with pytest.raises(ValueError, match="weighted scoring needs a weighted index"):
        index.search_encoded(queries, 5, WEIGHTS, "weighted")
    with pytest.raises(ValueError, match="k=0 must be a positive integer"):
        index.search_encoded(queries, 0, WEIGHTS, "binary")
    with pytest.raises(DimensionMismatchError, match="queries have dim=61"):
        index.search_encoded(random_encoding(np.random.default_rng(0), 1, dim=61), 5, WEIGHTS, "binary")


# ---------------------------------------------------------------------- corruption and leftovers
def three_commits(path, rng):
    """Generation 2: a b c; 3: c deleted; 4: d added. Returns the index, closed."""
    index = SegmentedIndex.create(path, "weighted", DIM, N_BUCKETS)
    index.add(random_encoding(rng, 3, density=0.5), ["a", "b", "c"])
    index.commit()
    index.delete(["c"])
    index.commit()
    index.add(random_encoding(rng, 1, density=0.5), ["d"])
    index.commit()
    index.close()
    return index


def flip_byte(path, position):
    data = bytearray(path.read_bytes())
    data[position % len(data)] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["truncate", "flip-json", "flip-value"])
def test_a_damaged_commit_file_falls_back_to_the_previous_commit(tmp_path, damage):
    path = tmp_path / "x"
    three_commits(path, np.random.default_rng(8))
    newest = path / "commit_4.json"
    if damage == "truncate":
        newest.write_bytes(newest.read_bytes()[:-40])
    elif damage == "flip-json":
        flip_byte(newest, 1)
    else:  # still valid JSON, only the checksum can tell
        text = newest.read_text()
        assert '"n_documents": 3' in text
        newest.write_text(text.replace('"n_documents": 3', '"n_documents": 2'))
        assert json.loads(newest.read_text())["n_documents"] == 2
    with pytest.warns(UserWarning, match=r"commit_4.json: .*(not valid JSON|fails its checksum).*opened generation 3"):
        reader = SegmentedIndex.open(path)
    assert reader.generation == 3 and live_ids(reader) == ["a", "b"]
    with pytest.warns(UserWarning, match="opened generation 3"):
        writer = SegmentedIndex.open(path, writable=True)
    writer.add(random_encoding(np.random.default_rng(0), 1), ["e"])
    assert writer.commit() == 5  # past the damaged generation, which is then removed
    writer.close()
    assert sorted(p.name for p in path.glob("commit_*")) == ["commit_3.json", "commit_5.json"]
    assert live_ids(SegmentedIndex.open(path)) == ["a", "b", "e"]


def test_a_damaged_deletion_file_falls_back_and_no_valid_commit_is_an_error(tmp_path):
    path = tmp_path / "x"
    three_commits(path, np.random.default_rng(9))
    deletions = path / "seg_0.del_3.npy"  # named by commits 3 and 4
    flip_byte(deletions, -1)
    with pytest.raises(IndexFormatError, match=r"no valid commit in .*seg_0.del_3.npy fails its checksum"):
        SegmentedIndex.open(path)
    deletions.write_bytes(b"")  # truncated
    with pytest.raises(IndexFormatError, match="deletion file .* fails its checksum: truncated or altered"):
        SegmentedIndex.open(path)


def test_a_damaged_segment_file_is_detected(tmp_path):
    path = tmp_path / "x"
    three_commits(path, np.random.default_rng(10))
    victim = sorted((path / "seg_1").glob("bucket_0.*"))[0]  # seg_1 is only in commit 4
    flip_byte(victim, -1)
    with pytest.warns(UserWarning, match=r"commit_4.json: .*seg_1.*opened generation 3"):
        reader = SegmentedIndex.open(path)
    assert live_ids(reader) == ["a", "b"]
    (path / "seg_0" / "index_meta.json").write_text("{}")
    with pytest.raises(IndexFormatError, match="index_meta.json is not the one commit_"):
        SegmentedIndex.open(path)


def test_leftovers_of_an_interrupted_write_are_ignored_then_removed_by_the_next_writer(tmp_path):
    path = tmp_path / "x"
    rng = np.random.default_rng(11)
    three_commits(path, rng)
    before = sorted(p.name for p in path.iterdir())
    BinaryIndex.from_encoding(random_encoding(rng, 2), ["z1", "z2"], path / "seg_7")  # flushed, never committed
    (path / "seg_1.del_5.npy").write_bytes(b"half")
    (path / ".commit_5.json.tmp-abc").write_text("{")
    (path / "notes.txt").write_text("not ours")
    reader = SegmentedIndex.open(path)
    assert reader.generation == 4 and live_ids(reader) == ["a", "b", "d"]
    writer = SegmentedIndex.open(path, writable=True)
    assert sorted(p.name for p in path.iterdir()) == sorted(before + ["notes.txt"])
    writer.add(random_encoding(rng, 1), ["e"])
    writer.commit()
    assert live_ids(SegmentedIndex.open(path)) == ["a", "b", "d", "e"]
    assert (path / "seg_2").is_dir() and not (path / "seg_7").exists()  # the leftover's number is free again


def test_searcher_over_a_segmented_index_equals_one_over_a_fresh_build(
        tmp_path, tiny_encoder_session, mini_data, mini_encoding):
    from uhdsearch.search.searcher import Searcher

    doc_ids = list(mini_data.corpus)
    digest = tiny_encoder_session.digest()
    index = SegmentedIndex.create(tmp_path / "x", "binary", mini_encoding.dim, mini_encoding.n_buckets,
                                  encoder_digest=digest)
    for start in range(0, 400, 150):
        index.add(mini_encoding[start:start + 150], doc_ids[start:start + 150])
        index.commit()
    index.delete(doc_ids[100:120])
    index.add(mini_encoding[[5, 6]], doc_ids[5:7], replace=True)  # moved to the end of the numbering
    index.commit()
    order = live_ids(index)
    assert len(order) == 380 and order[-2:] == doc_ids[5:7]
    rows = [doc_ids.index(d) for d in order]
    fresh = BinaryIndex.from_encoding(mini_encoding[rows], order, None, encoder_digest=digest)
    reader = SegmentedIndex.open(tmp_path / "x")
    got = Searcher(tiny_encoder_session, reader).search(mini_data.queries, k=50)
    want = Searcher(tiny_encoder_session, fresh).search(mini_data.queries, k=50)
    assert got.results == want.results
    assert sum(len(r) for r in got.results.values()) > 0
    assert not any(d in doc_ids[100:120] for r in got.results.values() for d in (h.doc_id for h in r))


def test_searcher_rerank_over_a_segmented_index_with_deletions(tmp_path, tiny_encoder_session, mini_data,
                                                               mini_encoding):
    from uhdsearch.search.searcher import Searcher
    from uhdsearch.types import Run, ScoredDoc

    doc_ids = list(mini_data.corpus)
    index = SegmentedIndex.create(tmp_path / "x", "binary", mini_encoding.dim, mini_encoding.n_buckets)
    index.add(mini_encoding, doc_ids)
    index.commit()
    index.delete(doc_ids[:10])  # deleted numbers stay in the global numbering until a merge
    index.commit()
    assert len(index.doc_ids) == 400 and index.n_documents == 390
    fresh = BinaryIndex.from_encoding(mini_encoding[10:], doc_ids[10:], None)
    candidates = Run({q.query_id: [ScoredDoc(d, 1.0) for d in doc_ids[10:60]] for q in mini_data.queries})
    got = Searcher(tiny_encoder_session, index).rerank(mini_data.queries, candidates, k=20)
    want = Searcher(tiny_encoder_session, fresh).rerank(mini_data.queries, candidates, k=20)
    assert got.results == want.results
