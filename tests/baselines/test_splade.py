"""SPLADE-tiny: the representation against a direct computation, search against brute force."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from uhdsearch.baselines.splade import SpladeEncoder, SpladeRetriever
from uhdsearch.errors import ModelFormatError
from uhdsearch.search.oracle import brute_force_scores


@pytest.fixture(scope="module")
def encoder(tiny_backbone_dir):
    return SpladeEncoder.from_pretrained(tiny_backbone_dir)


@pytest.fixture(scope="module")
def retriever(mini_data, encoder):
    corpus = dict(list(mini_data.corpus.items())[:64])
    return SpladeRetriever.build(corpus, max_length=64, encoder=encoder)


def test_representation_equals_direct_computation(encoder):
    text = "vitamin d deficiency increases fracture risk"
    enc = encoder.tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        logits = encoder.model(**enc).logits[0]  # (tokens, vocab), no padding in a batch of one
    expected = torch.log1p(torch.relu(logits)).max(dim=0).values.numpy()
    # Batched with a longer text: padding must not leak into the max.
    got = encoder.encode(["a much longer text about bone mineral density in older women and men", text])
    assert got.dim == encoder.vocab_size == 30522
    np.testing.assert_allclose(got.buckets[0][1].toarray()[0], expected, rtol=1e-5, atol=1e-6)
    # Hand-checked: the query's own terms carry the largest weights.
    vocab = encoder.tokenizer.get_vocab()
    top = set(np.argsort(-expected)[:6].tolist())
    assert {vocab["vitamin"], vocab["deficiency"], vocab["fracture"]} <= top
    assert expected.min() == 0.0 and 5 < np.count_nonzero(expected) < 200


def test_search_equals_brute_force(retriever, mini_data):
    queries = mini_data.queries[:6]
    run = retriever.search(queries, k=10)
    docs = retriever.index.document_vectors()
    encoded = retriever.encoder.encode([q.text for q in queries], retriever.query_max_length)
    scores = brute_force_scores(docs, encoded, [1.0], "weighted")
    for row, q in enumerate(queries):
        order = np.lexsort((np.arange(scores.shape[1]), -scores[row].astype(np.float32)))[:10]
        assert run.doc_ids(q.query_id) == [retriever.index.doc_ids[i] for i in order]
        np.testing.assert_allclose([h.score for h in run[q.query_id]], scores[row, order], rtol=1e-5)


def test_edges(retriever, tmp_path):
    run = retriever.search({"q1": "  ", "q2": "insulin"}, k=3)
    assert run["q1"] == [] and len(run["q2"]) == 3
    assert len(retriever.search([], k=3)) == 0
    with pytest.raises(ValueError, match="k=0 must be a positive integer"):
        retriever.search({"q": "x"}, k=0)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        SpladeEncoder.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelFormatError, match="no .safetensors"):
        SpladeEncoder.from_pretrained(tmp_path)
