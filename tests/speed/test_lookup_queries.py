"""Inference-free queries: table rows are the model's own token vectors; queries max-pool them."""
from __future__ import annotations

import numpy as np
import pytest

from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.lookup import LookupEncoder
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.errors import ModelFormatError, UsageError
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.search.oracle import brute_force_scores
from uhdsearch.search.searcher import Searcher

WORDS = "vitamin bone heart surgery genome mouse density failure"


@pytest.fixture(scope="module")
def model(tiny_backbone_dir):
    return UHDEncoder.new(tiny_backbone_dir, EncoderConfig(dim=2048, wta_k=16, query_k=None))


@pytest.fixture(scope="module")
def lookup(model):
    ids = model.backbone.tokenizer(WORDS, add_special_tokens=False)["input_ids"]
    return LookupEncoder.from_model(model, token_ids=ids)


def test_rows_are_the_tokens_own_winners(model, lookup):
    tokenizer = model.backbone.tokenizer
    for word in ("bone", "heart"):
        (token,) = tokenizer(word, add_special_tokens=False)["input_ids"]
        row = lookup.tables[0][token]
        assert row.nnz == 16  # wta_k winners of the token alone
        full = model.encode([word], "query").buckets[0]  # [CLS] word [SEP] pooled: the token's winners are in it
        assert set(row.indices) <= set(full.indices)
    unbuilt = tokenizer("zebra", add_special_tokens=False)["input_ids"][0]
    assert lookup.tables[0][unbuilt].nnz == 0


def test_query_is_the_max_pool_of_its_tokens(model, lookup):
    tokenizer = model.backbone.tokenizer
    a, b = (tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in ("bone", "heart"))
    q = lookup.encode(["bone heart", ""], "query").buckets[0]
    want = lookup.tables[0][a].maximum(lookup.tables[0][b])
    assert np.allclose(q[0].toarray(), want.toarray()) and q[1].nnz == 0


def test_save_load_and_digest_check(model, lookup, tmp_path, tiny_backbone_dir):
    lookup.save(tmp_path)
    loaded = LookupEncoder.load(tmp_path, model)
    assert (loaded.tables[0] != lookup.tables[0]).nnz == 0
    other = UHDEncoder.new(tiny_backbone_dir, EncoderConfig(dim=2048, wta_k=16, query_k=None, seed=1))
    with pytest.raises(ModelFormatError, match="built for model"):
        LookupEncoder.load(tmp_path, other)
    with pytest.raises(UsageError, match="queries only"):
        lookup.encode(["a document"], "document")


def test_searcher_with_lookup_queries_equals_oracle(model, lookup):
    texts = ["vitamin d and bone density", "the mouse genome", "heart failure after surgery", "bone surgery"]
    docs = model.encode_document(texts, show_progress=False)
    index = BinaryIndex.from_encoding(docs, [f"d{i}" for i in range(len(texts))], None, model.digest())
    searcher = Searcher(lookup, index)
    queries = {"q1": "bone density vitamin", "q2": "heart surgery"}
    run = searcher.search(queries, k=4)
    oracle = brute_force_scores(docs, lookup.encode(list(queries.values())), [1.0], "binary")
    for row, qid in enumerate(queries):
        assert {h.doc_id: h.score for h in run[qid]} == {f"d{i}": s for i, s in enumerate(oracle[row]) if s > 0}
    assert run["q1"][0].doc_id in ("d0", "d3")
