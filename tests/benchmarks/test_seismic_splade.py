"""Helpers of benchmarks/speed/seismic_splade.py: Seismic's input format and the tie-aware recall."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp


@pytest.fixture(scope="module")
def bench():
    from benchmarks.speed import seismic_splade

    return seismic_splade


def test_seismic_documents_are_written_as_length_dims_values(bench, tmp_path):
    docs = sp.csr_matrix(np.array([[0, 1.5, 0, 2.0], [0, 0, 0, 0], [3.0, 0, 0, 0]], np.float32))
    bench.write_seismic_docs(docs, tmp_path / "d.bin")
    raw = (tmp_path / "d.bin").read_bytes()
    words = np.frombuffer(raw, np.uint32)
    assert words[0] == 3 and words[1] == 2 and list(words[2:4]) == [1, 3]
    assert list(np.frombuffer(raw[16:24], np.float32)) == [1.5, 2.0]
    assert words[6] == 0 and words[7] == 1 and words[8] == 0
    assert np.frombuffer(raw[36:40], np.float32)[0] == 3.0
    assert len(raw) == 4 * (1 + 3 + 2 * 3)


def test_recall_counts_documents_tied_with_the_tenth_as_hits(bench):
    exact = np.zeros((2, 20))
    exact[0, :12] = [9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 1, 0.5]  # three documents tie at the 10th score
    exact[1, :3] = [3, 2, 1]  # only three documents score at all
    tied = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 8, 10], [2, 1, 0, -1, -1, -1, -1, -1, -1, -1]])
    assert bench.tie_aware_recall(tied, exact) == 1.0
    worse = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 8, 11], [2, 1, 5, -1, -1, -1, -1, -1, -1, -1]])
    assert bench.tie_aware_recall(worse, exact) == pytest.approx((0.9 + 2 / 3) / 2)
