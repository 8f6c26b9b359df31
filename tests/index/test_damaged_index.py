"""Well-formed files with wrong contents (checksums re-computed over the damage): refused at load with the file named,
and the kernels themselves never read or write out of bounds when handed such arrays anyway."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from tests.child_process import python_path
from tests.hardening.fuzz_mutations import reseal
from uhdsearch.errors import IndexFormatError
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex
from uhdsearch.sparse import SparseEncoding


N_DOCS = 1000  # not a multiple of 64: the last bitmap word has 24 padding bits


def _encoding(n: int = N_DOCS, dim: int = 512, seed: int = 0, density: float = 0.05) -> SparseEncoding:
    rng = np.random.default_rng(seed)
    m = sp.random(n, dim, density=density, format="csr", dtype=np.float32, random_state=rng)
    m.data[:] = 1.0
    return SparseEncoding([m])


def _set_padding_bits(path: Path) -> None:
    bitmaps = np.load(path / "bucket_0.bitmaps.npy").reshape(-1, (N_DOCS + 63) // 64)
    bitmaps[:, -1] |= ~np.uint64((1 << (N_DOCS % 64)) - 1)
    np.save(path / "bucket_0.bitmaps.npy", bitmaps.reshape(-1))
    reseal(path)


@pytest.fixture
def padded_index(tmp_path) -> Path:
    path = tmp_path / "index"
    BinaryIndex.from_encoding(_encoding(), [f"d{i}" for i in range(N_DOCS)], path)
    _set_padding_bits(path)
    return path


def test_padding_bits_sigabrt_regression_refused_at_load(padded_index):
    """Issue 37: bitmaps with bits set past the last document, checksums re-computed, made document_lengths write
    past its buffer (SIGABRT "corrupted size vs. prev_size" in Searcher.search). Load now names the file."""
    with pytest.raises(IndexFormatError, match=r"bucket_0\.bitmaps\.npy sets bits past the last document \(1000\)"):
        InvertedIndex.load(padded_index)


def test_memory_mapped_padded_index_searches_like_the_clean_one(padded_index):
    """A memory-mapped load skips the padding check (a page fault per bitmap row); the kernels mask the bits."""
    clean = BinaryIndex.from_encoding(_encoding(), [f"d{i}" for i in range(N_DOCS)], None)
    damaged = InvertedIndex.load(padded_index, mmap=True)
    query = _encoding(5, seed=2)
    for scoring, alpha in (("binary", 0.0), ("binary", 0.5), ("quantized", 0.0)):
        got = damaged.search_encoded(query, 10, [1.0], scoring, length_norm=alpha)
        want = clean.search_encoded(query, 10, [1.0], scoring, length_norm=alpha)
        assert np.array_equal(got[0], want[0]) and np.allclose(got[1], want[1])
    numbers = np.arange(0, N_DOCS, 7)
    damaged.keep_forward(0.01)
    assert np.array_equal(damaged.overlap_counts(query[0:1], numbers), clean.overlap_counts(query[0:1], numbers))
    assert np.array_equal(damaged.document_lengths(0), clean.document_lengths(0))


KERNELS_ON_PADDED_BITMAPS = """
import sys, numpy as np
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.index.codec import CompressedPostings
from uhdsearch.errors import IndexFormatError
from tests.index.test_damaged_index import _encoding, N_DOCS
clean = BinaryIndex.from_encoding(_encoding(), [f"d{i}" for i in range(N_DOCS)], None)
c = clean.buckets[0]
bitmaps = c.bitmaps.copy().reshape(-1, (N_DOCS + 63) // 64)
bitmaps[:, -1] |= ~np.uint64((1 << (N_DOCS % 64)) - 1)
arrays = {name: getattr(c, name) for name in c.ARRAYS}
arrays["bitmaps"] = bitmaps.reshape(-1)
damaged = BinaryIndex([CompressedPostings(weights=None, **arrays)], clean.doc_ids, clean.dim, clean.meta, None)
assert np.array_equal(damaged.document_lengths(0), clean.document_lengths(0))
query = _encoding(3, seed=1)
for alpha in (0.0, 0.5):
    numbers, _ = damaged.search_encoded(query, 10, [1.0], "binary", length_norm=alpha)
    assert numbers.max() < N_DOCS
try:
    damaged.document_vectors()
except IndexFormatError as exc:
    print("refused:", exc)
"""


def test_kernels_bound_padding_bits_that_bypass_load(tmp_path):
    """The kernels' own bound: arrays that skip load's checks (built in memory) still never write out of bounds.
    In a subprocess, so that a regression is a failed test and not a dead test run."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(KERNELS_ON_PADDED_BITMAPS)], capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).parent,
                          env={"PYTHONPATH": python_path(), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert "refused: bucket 0: its postings disagree with their counts" in proc.stdout


def test_search_command_on_padded_index_is_one_error_line(padded_index, saved_model_and_index, cli):
    root, _, _ = saved_model_and_index(20)
    code, out, err = cli(["search", "--model", str(root / "model"), "--index", str(padded_index),
                          "--query", "bone density"])
    assert code == 2 and out == ""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "bucket_0.bitmaps.npy sets bits past the last document" in lines[0], err
    assert "Traceback" not in err


def _edit(path: Path, name: str, edit) -> None:
    array = np.load(path / name).copy()
    edit(array)
    np.save(path / name, array)
    reseal(path)


@pytest.fixture
def saved(tmp_path) -> Path:
    path = tmp_path / "index"
    # every dim a packed list (bias 0.01) of two blocks or more (~300 postings)
    BinaryIndex.from_encoding(_encoding(density=0.3), [f"d{i}" for i in range(N_DOCS)], path, bitmap_bias=0.01)
    return path


def test_block_first_documents_must_ascend(saved):
    def swap_first_docs(blocks):
        ptr = np.load(saved / "bucket_0.block_ptr.npy")
        d = int(np.flatnonzero(np.diff(ptr) >= 2)[0])
        a, b = 2 * ptr[d], 2 * ptr[d] + 2
        blocks[a], blocks[b] = blocks[b], blocks[a]

    _edit(saved, "bucket_0.blocks.npy", swap_first_docs)
    with pytest.raises(IndexFormatError, match=r"bucket_0\.blocks\.npy .*first documents do not ascend"):
        InvertedIndex.load(saved)


def test_doc_ids_with_invalid_utf8_name_file_and_line(saved):
    raw = (saved / "doc_ids.txt").read_bytes().replace(b"d3\n", b"d\xff3\n", 1)
    (saved / "doc_ids.txt").write_bytes(raw)
    reseal(saved)
    with pytest.raises(IndexFormatError, match=r"doc_ids\.txt:4: byte 0xff is not valid UTF-8"):
        InvertedIndex.load(saved)


def test_huge_bucket_count_is_refused_before_listing_files(saved):
    meta = json.loads((saved / "index_meta.json").read_text())
    meta["n_buckets"] = 10 ** 12
    (saved / "index_meta.json").write_text(json.dumps(meta))
    with pytest.raises(IndexFormatError, match=r"n_buckets is 1000000000000 but 'files' lists"):
        InvertedIndex.load(saved)


def test_deletion_bitset_padding_bits_are_refused(tmp_path):
    from uhdsearch.index.live.segments import SegmentedIndex

    path = tmp_path / "segmented"
    with SegmentedIndex.create(path, "binary", 512, 1) as index:
        index.add(_encoding(13), [f"d{i}" for i in range(13)])  # 13 documents: 3 padding bits in the last byte
        index.commit()
        index.delete(["d2"])
        index.commit()
    (deletions,) = path.glob("seg_*.del_*.npy")
    packed = np.load(deletions)
    packed[-1] |= 0b111
    np.save(deletions, packed)
    reseal(path)
    with pytest.warns(UserWarning, match=r"deletion file .*\.npy sets bits past the last document \(13\)"):
        reader = SegmentedIndex.open(path)
    assert reader.doc_ids[2] == "d2"  # the commit before the damaged one: d2 not yet deleted


def test_an_npy_header_promising_terabytes_is_refused_before_reading(saved):
    path = saved / "bucket_0.indptr.npy"
    data = path.read_bytes()
    offset = len(data) - np.load(path).nbytes
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<i8", "fortran_order": False, "shape": (2 ** 40,)})
        f.write(data[offset:])
    reseal(saved)
    with pytest.raises(IndexFormatError, match=r"bucket_0\.indptr\.npy is not a valid \.npy array: its header promises "
                                               r"8796093022208 bytes of int64 data"):
        InvertedIndex.load(saved, mmap=False)


def test_a_commit_field_of_the_wrong_type_is_named(tmp_path):
    from uhdsearch.index.live.segments import SegmentedIndex

    path = tmp_path / "segmented"
    with SegmentedIndex.create(path, "binary", 512, 1) as index:
        index.add(_encoding(13), [f"d{i}" for i in range(13)])
        index.commit()
    commit = path / "commit_2.json"
    body = json.loads(commit.read_text())
    body["next_segment"] = {}
    commit.write_text(json.dumps(body))
    reseal(path)
    with pytest.warns(UserWarning, match=r"commit_2\.json: next_segment should be an integer >= 0, not \{\}"):
        assert SegmentedIndex.open(path).n_documents == 0  # generation 1, the empty index
