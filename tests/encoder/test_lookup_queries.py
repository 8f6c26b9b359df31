"""Inference-free queries: table rows are the model's own token vectors; queries max-pool them."""
from __future__ import annotations

import numpy as np
import pytest

from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.query.table import LookupEncoder
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.errors import ModelFormatError, UsageError
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.search.oracle import brute_force_scores
from uhdsearch.search.searcher import Searcher

# Tiny indexes still split a query's documents between threads, as in tests/index.
pytestmark = pytest.mark.usefixtures("split_tiny_indexes_between_threads")

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
    searcher = Searcher(lookup, index, length_norm=None)
    queries = {"q1": "bone density vitamin", "q2": "heart surgery"}
    run = searcher.search(queries, k=4)
    oracle = brute_force_scores(docs, lookup.encode(list(queries.values())), [1.0], "binary")
    for row, qid in enumerate(queries):
        assert {h.doc_id: h.score for h in run[qid]} == {f"d{i}": s for i, s in enumerate(oracle[row]) if s > 0}
    assert run["q1"][0].doc_id in ("d0", "d3")


# ---------------------------------------------------------------- tables learned from a corpus (lookup_corpus.py)
CORPUS = ["vitamin d and bone density in older women", "the mouse genome", "heart attack after bone surgery"]


@pytest.fixture(scope="module")
def corpus_table(model):
    from uhdsearch.encoder.query.corpus_table import CorpusTable

    states = model.token_states(CORPUS, show_progress=False)
    ids = model.backbone.tokenizer(CORPUS, truncation=True, max_length=model.config.document_max_length)["input_ids"]
    return CorpusTable.from_states(model, states, np.concatenate(ids)), states, ids


def test_corpus_rows_are_the_tokens_winners_in_context(model, corpus_table):
    import torch

    table, states, ids = corpus_table
    tokenizer = model.backbone.tokenizer
    (genome,) = tokenizer("genome", add_special_tokens=False)["input_ids"]  # once, in the second text
    position = int(states.offsets[1]) + ids[1].index(genome)
    with torch.no_grad():
        values, dims = model.buckets.wta[str(model.layers[0])](states.layer(model.layers[0])[position:position + 1]
                                                              .float(), 16, torch.float32)
    positive = values[0] > 0
    for summary in ("winners", "mean-state"):  # one occurrence: its mean state is its state
        row = table.tables(summary)[0][genome]
        assert set(row.indices) == set(dims[0][positive].tolist()), summary
        assert np.isclose(np.linalg.norm(row.data), 1.0)
    (bone,) = tokenizer("bone", add_special_tokens=False)["input_ids"]
    assert table.occurrences[bone] == 2 and table.occurrences[tokenizer.cls_token_id] == 3
    assert table.tables("winners", keep=5)[0][bone].nnz == 5
    assert table.tables("winners")[0][tokenizer("zebra", add_special_tokens=False)["input_ids"][0]].nnz == 0
    with pytest.raises(UsageError, match="summary"):
        table.tables("median")


def test_corpus_lookup_adds_cls_and_sep_and_falls_back_to_context_free_rows(model, corpus_table, lookup, tmp_path):
    table, _, _ = corpus_table
    tokenizer = model.backbone.tokenizer
    tables = table.tables("winners", fallback=lookup.tables)
    encoder = LookupEncoder(tables, tokenizer, model.config, model.digest(), specials=True)
    (bone,) = tokenizer("bone", add_special_tokens=False)["input_ids"]
    (heart,) = tokenizer("heart", add_special_tokens=False)["input_ids"]
    (failure,) = tokenizer("failure", add_special_tokens=False)["input_ids"]
    assert (tables[0][bone] != table.tables("winners")[0][bone]).nnz == 0  # seen: the corpus row
    assert table.occurrences[failure] == 0 and lookup.tables[0][failure].nnz > 0
    assert (tables[0][failure] != lookup.tables[0][failure]).nnz == 0  # unseen: the context-free row
    q = encoder.encode(["bone heart"]).buckets[0]
    rows = [tables[0][t] for t in (tokenizer.cls_token_id, bone, heart, tokenizer.sep_token_id)]
    want = rows[0]
    for r in rows[1:]:
        want = want.maximum(r)
    assert np.allclose(q.toarray(), want.toarray())
    encoder.save(tmp_path)
    loaded = LookupEncoder.load(tmp_path, model)
    assert loaded.specials and (loaded.encode(["bone heart"]).buckets[0] != q).nnz == 0
