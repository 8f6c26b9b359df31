"""Encoding on an explicit torch device: the CPU named explicitly equals the default path; missing devices refused."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from uhdsearch.encoder.device import resolve_device
from uhdsearch.errors import UsageError


def _same(a, b) -> None:
    assert a.n == b.n and a.n_buckets == b.n_buckets
    for x, y in zip(a.buckets, b.buckets):
        assert np.array_equal(x.indptr, y.indptr) and np.array_equal(x.indices, y.indices)
        assert np.allclose(x.data, y.data, rtol=1e-6, atol=1e-7)


def test_encoding_on_the_cpu_named_explicitly_equals_the_default(tiny_encoder, mini_data):
    texts = [d.full_text for d in list(mini_data.corpus.values())[:40]]
    queries = [q.text for q in mini_data.queries]
    default = tiny_encoder.encode_document(texts, batch_size=8, show_progress=False)
    default_queries = tiny_encoder.encode_query(queries)
    digest = tiny_encoder.digest()
    assert tiny_encoder.to_device("cpu", "gpus_per_worker") is tiny_encoder
    assert tiny_encoder.device == torch.device("cpu") and tiny_encoder.digest() == digest
    _same(tiny_encoder.encode_document(texts, batch_size=8, show_progress=False), default)
    _same(tiny_encoder.encode_query(queries), default_queries)
    assert default.buckets[0].nnz > 40 and default_queries.buckets[0].nnz > 40  # real vectors, not empty ones


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_a_gpu_that_does_not_exist_is_refused_naming_the_option(tiny_encoder):
    with pytest.raises(UsageError, match=r"--gpus-per-worker='cuda' asks for a CUDA GPU.*is_available\(\) is False"):
        tiny_encoder.to_device("cuda", "--gpus-per-worker")
    assert tiny_encoder.device == torch.device("cpu")  # not half moved


@pytest.mark.parametrize(("name", "words"), [("gpu", "not a torch device name"), ("meta", "'cpu', 'cuda' or 'mps'"),
                                             ("cuda:99", "cuda:99")])
def test_bad_device_names_are_refused(name, words):
    if name == "cuda:99" and not torch.cuda.is_available():
        words = "asks for a CUDA GPU"
    with pytest.raises(UsageError, match=f"^device={name!r}.*{words}"):
        resolve_device(name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here (the CPU torch wheel)")
def test_encoding_on_a_gpu_matches_the_cpu(tiny_encoder, mini_data):  # pragma: no cover - needs a GPU
    texts = [d.full_text for d in list(mini_data.corpus.values())[:40]]
    expected = tiny_encoder.encode_document(texts, batch_size=8, show_progress=False)
    got = tiny_encoder.to_device("cuda").encode_document(texts, batch_size=8, show_progress=False)
    assert got.buckets[0].shape == expected.buckets[0].shape
    for x, y in zip(got.buckets, expected.buckets):  # a near-tied winner may swap; nearly all must agree
        overlap = x.multiply(y.astype(bool)).nnz / max(1, y.nnz)
        assert overlap > 0.99
