"""Background merges of a SegmentedIndex: the writer goes on meanwhile, and the results equal a fresh build."""
import threading

import numpy as np
import pytest

from tests.index.segments_checks import assert_equals_fresh_build, live_ids, random_add, random_delete, random_encoding
from uhdsearch.errors import IndexLockedError
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.index.live.segments import SegmentedIndex


class Gate:
    """Holds a merge worker inside InvertedIndex.save (before or after the real write) until `release` is set,
    so that a test can act while the merge is certainly still running. The main thread passes straight through."""

    def __init__(self, monkeypatch, after_write):
        self.reached, self.release = threading.Event(), threading.Event()
        real_save = InvertedIndex.save

        def save(index, path, overwrite=False):
            if threading.current_thread() is threading.main_thread():
                return real_save(index, path, overwrite)
            if after_write:
                real_save(index, path, overwrite)
            self.reached.set()
            assert self.release.wait(30)
            if not after_write:
                real_save(index, path, overwrite)

        monkeypatch.setattr(InvertedIndex, "save", save)


def segments_of(rng, path, variant, sizes, **options):
    """An index with one committed segment per size; doc ids "s<segment>-<row>". Returns it and its documents."""
    index = SegmentedIndex.create(path, variant, 60, 2, **options)
    expected = {}
    for i, n in enumerate(sizes):
        encoding = random_encoding(rng, n)
        ids = [f"s{i}-{j}" for j in range(n)]
        index.add(encoding, ids)
        index.commit()
        expected.update({d: encoding[[j]] for j, d in enumerate(ids)})
    return index, expected


def seg_dirs(path):
    return sorted(p.name for p in path.iterdir() if p.name.startswith(("seg_", ".seg_")) and ".del_" not in p.name)


@pytest.mark.parametrize("variant", ["binary", "weighted"])
def test_changes_made_while_a_merge_runs_are_carried_over(tmp_path, monkeypatch, variant):
    rng = np.random.default_rng(20)
    path = tmp_path / "x"
    queries = random_encoding(rng, 6, density=0.3)
    index, expected = segments_of(rng, path, variant, [6, 6, 6, 6])
    index.delete(["s1-0"])  # deleted before the merge starts: not copied at all
    del expected["s1-0"]
    gate = Gate(monkeypatch, after_write=True)
    merge = index.merge_in_background()
    assert merge.sources == ("seg_0", "seg_1", "seg_2", "seg_3") and merge.merged == ("seg_4",)
    assert gate.reached.wait(30) and (path / "seg_4").is_dir()  # written, named by no commit

    def delete(ids):
        assert index.delete(ids) == len(ids)
        for d in ids:
            del expected[d]

    def add(ids, replace=False):
        encoding = random_encoding(rng, len(ids))
        index.add(encoding, ids, replace=replace)
        expected.update({d: encoding[[j]] for j, d in enumerate(ids)})

    delete(["s0-1", "s2-5", "s3-0"])  # inside the segments being merged
    add(["s1-2", "s3-3", "new-0"], replace=True)  # two replaced inside them, one new
    add(["new-1", "new-2"])
    index.commit()  # the merge still runs: not swapped in, and its directory survives the clean-up
    assert merge.state == "running" and index.n_segments == 5 and (path / "seg_4").is_dir()
    assert_equals_fresh_build(index, expected, queries)
    assert_equals_fresh_build(SegmentedIndex.open(path), expected, queries)
    delete(["s0-4", "new-1"])
    gate.release.set()
    assert merge.wait(30) and merge.state == "finished"
    delete(["s2-0"])
    assert index.n_segments == 5  # swapped in by commit only
    index.commit()
    assert merge.state == "applied" and index.background_merge is None
    assert index.n_segments == 2  # seg_4 and the segment of the additions
    merged = index._segments[0]
    # 23 rows copied; s0-1 s2-5 s3-0 s1-2 s3-3 s0-4 s2-0 deleted meanwhile, carried over.
    assert (merged.name, merged.index.n_documents, merged.n_deleted) == ("seg_4", 23, 7)
    assert_equals_fresh_build(index, expected, queries)
    assert_equals_fresh_build(SegmentedIndex.open(path), expected, queries)
    # Live order kept: the merged segments' documents in their old order, then the additions.
    assert live_ids(index) == [d for d in expected if d.startswith("s") and d not in ("s1-2", "s3-3")] + [
        "s1-2", "s3-3", "new-0", "new-2"]
    index.commit()  # the sources were the fallback commit's; now they go
    assert seg_dirs(path) == ["seg_4", "seg_5"]
    index.close()


@pytest.mark.parametrize("seed", [0, 2, 3])  # seeds whose runs swap merges in before the end (1 never merges)
def test_random_changes_with_background_merges_equal_a_fresh_build(tmp_path, seed):
    rng = np.random.default_rng(100 + seed)
    variant = "weighted" if seed % 2 else "binary"
    queries = random_encoding(rng, 6, density=0.3)
    path = tmp_path / "live"
    index = SegmentedIndex.create(path, variant, 60, 2, max_segments=2 if seed else None, background_merges=True)
    expected, committed = {}, {}
    next_id, n_applied = 0, 0
    for step in range(50):
        op = rng.choice(["add", "replace", "delete", "commit", "background", "wait"], p=[.25, .1, .2, .25, .1, .1])
        merge = index.background_merge
        if op == "add":
            next_id = random_add(index, rng, expected, next_id)
        elif op == "replace" and expected:
            ids = list(rng.choice(sorted(expected), size=min(3, len(expected)), replace=False))
            encoding = random_encoding(rng, len(ids))
            index.add(encoding, ids, replace=True)
            expected.update({d: encoding[[i]] for i, d in enumerate(ids)})
        elif op == "delete" and expected:
            random_delete(index, rng, expected)
        elif op == "commit":
            index.commit()
            committed = dict(expected)
            n_applied += merge is not None and merge.state == "applied"
        elif op == "background" and merge is None:
            index.merge_in_background(max_segments=int(rng.integers(1, 3)))
        elif op == "wait" and merge is not None:
            assert merge.wait(30) and merge.state == "finished"
        assert_equals_fresh_build(index, expected, queries)
        if op == "commit" or step % 5 == 0:
            assert_equals_fresh_build(SegmentedIndex.open(path), committed, queries)
    index.commit()
    while index.background_merge is not None:  # each commit may start the next merge
        index.background_merge.wait(30)
        index.commit()
    assert n_applied > 0
    if seed:
        assert index.n_segments <= 2
    assert_equals_fresh_build(SegmentedIndex.open(path), expected, queries)
    index.close()


def test_commit_in_background_mode_merges_without_blocking_and_keeps_the_order(tmp_path):
    rng = np.random.default_rng(21)
    index, expected = segments_of(rng, tmp_path / "x", "binary", [5, 1, 1], max_segments=2, background_merges=True)
    merge = index.background_merge  # the third commit started it: two segments of one document are cheapest
    assert merge is not None and merge.sources == ("seg_1", "seg_2")
    assert index.n_segments == 3  # that commit did not wait for it
    merge.wait(30)
    index.commit()
    assert merge.state == "applied" and index.n_segments == 2 and index.background_merge is None
    assert live_ids(index) == list(expected)
    assert_equals_fresh_build(SegmentedIndex.open(tmp_path / "x"), expected, random_encoding(rng, 6, density=0.3))


@pytest.mark.parametrize("how", ["source fully deleted", "foreground merge"])
def test_a_merge_whose_source_is_gone_is_discarded(tmp_path, monkeypatch, how):
    rng = np.random.default_rng(22)
    path = tmp_path / "x"
    queries = random_encoding(rng, 6, density=0.3)
    index, expected = segments_of(rng, path, "weighted", [4, 4, 4])
    gate = Gate(monkeypatch, after_write=True)
    merge = index.merge_in_background()
    assert gate.reached.wait(30)
    if how == "source fully deleted":
        index.delete([f"s1-{j}" for j in range(4)])
        for j in range(4):
            del expected[f"s1-{j}"]
        index.commit()  # drops seg_1
    else:
        index.delete(["s0-0"])
        del expected["s0-0"]
        index.merge()  # a foreground merge of the same segments into seg_4
    n_segments = index.n_segments
    gate.release.set()
    assert merge.wait(30)
    index.commit()
    assert merge.state == "discarded" and index.background_merge is None
    assert index.n_segments == n_segments and "seg_3" not in seg_dirs(path)  # removed by that commit
    assert_equals_fresh_build(index, expected, queries)
    assert_equals_fresh_build(SegmentedIndex.open(path), expected, queries)
    index.close()


@pytest.mark.parametrize("after_write", [False, True])
def test_close_during_a_merge_cancels_it_and_leaves_a_loadable_index(tmp_path, monkeypatch, after_write):
    rng = np.random.default_rng(23)
    path = tmp_path / "x"
    queries = random_encoding(rng, 6, density=0.3)
    index, expected = segments_of(rng, path, "binary", [4, 4, 4])
    gate = Gate(monkeypatch, after_write=after_write)
    merge = index.merge_in_background()
    assert gate.reached.wait(30)
    threading.Timer(0.2, gate.release.set).start()  # close waits for the worker's step in progress
    index.close()
    assert merge.state == "cancelled" and merge.done()
    assert seg_dirs(path) == ["seg_0", "seg_1", "seg_2"]  # nothing of seg_3, not even its temporary directory
    assert_equals_fresh_build(SegmentedIndex.open(path), expected, queries)
    with SegmentedIndex.open(path, writable=True) as again:
        again.merge()
        assert again.n_segments == 1
        assert_equals_fresh_build(again, expected, queries)


def test_a_failed_merge_warns_at_commit_and_changes_nothing(tmp_path, monkeypatch):
    rng = np.random.default_rng(24)
    path = tmp_path / "x"
    index, expected = segments_of(rng, path, "binary", [3, 3])
    gate = Gate(monkeypatch, after_write=False)
    merge = index.merge_in_background()
    assert gate.reached.wait(30)
    (path / "seg_2").mkdir()  # taken by someone else: the worker's write fails
    (path / "seg_2" / "stray").write_text("x")
    gate.release.set()
    assert merge.wait(30) and merge.state == "failed" and isinstance(merge.error, FileExistsError)
    failed = r"background merge of seg_0, seg_1 failed \(FileExistsError.*discarded"
    with pytest.warns(UserWarning, match=failed) as caught:
        index.commit()
    assert caught[0].filename == __file__  # points at the caller's commit(), not into uhdsearch
    assert index.n_segments == 2 and not (path / "seg_2").exists()
    assert_equals_fresh_build(index, expected, random_encoding(rng, 6, density=0.3))
    index.close()


def test_merge_in_background_errors_and_nothing_to_merge(tmp_path, monkeypatch):
    rng = np.random.default_rng(25)
    path = tmp_path / "x"
    index, _ = segments_of(rng, path, "binary", [3])
    nothing = index.merge_in_background()  # one segment without deletions
    assert (nothing.state, nothing.sources, index.background_merge) == ("applied", (), None)
    index.add(random_encoding(rng, 2), ["a", "b"])
    index.commit()
    gate = Gate(monkeypatch, after_write=False)
    merge = index.merge_in_background()
    with pytest.raises(RuntimeError, match=r"BackgroundMerge\(seg_0, seg_1 -> seg_2, state='running'\) is still "
                                           r"under way; call its wait\(\) and then commit\(\)"):
        index.merge_in_background()
    with pytest.raises(ValueError, match="max_segments=0 must be a positive integer"):
        index.merge_in_background(max_segments=0)
    with pytest.raises(IndexLockedError, match="read-only"):
        SegmentedIndex.open(path).merge_in_background()
    gate.release.set()
    merge.wait(30)
    index.commit()
    assert merge.state == "applied" and index.n_segments == 1
    index.close()
