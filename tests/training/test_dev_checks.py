"""Dev checks (training/dev_checks.py): the same score as encoding everything afresh, computed once per head and
per query token limit; a changed head is always re-encoded."""
from __future__ import annotations

import torch

from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.search.searcher import Searcher
from uhdsearch.training.dev_checks import DevCheck


def _fresh_score(model, documents, dev, rows, length_norm=0.0, states=None) -> float:
    """What a check measured before it remembered anything: documents encoded from their cached states (or text),
    queries from text, every time."""
    queries, qrels = dev
    encoded = model.encode_states(states, show_progress=False, rows=rows) if states is not None else \
        model.encode_document([documents[i].full_text for i in rows], show_progress=False)
    index = BinaryIndex.from_encoding(encoded, [documents[i].doc_id for i in rows], None)
    run = Searcher(model, index, "binary", max_df=None, length_norm=length_norm or None).search(queries, k=100)
    return evaluate(run, qrels, ["nDCG@10"])["nDCG@10"]


class _Counting:
    """Counts calls of a bound method while delegating to it."""

    def __init__(self, owner, name: str) -> None:
        self.calls, self.inner = 0, getattr(owner, name)
        setattr(owner, name, self)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.inner(*args, **kwargs)


def test_checks_score_as_a_fresh_encoding_and_remember_what_did_not_change(tiny_encoder, mini_data):
    model = tiny_encoder.eval()
    documents = list(mini_data.corpus.values())
    dev = (mini_data.queries, mini_data.qrels)
    states = model.token_states([d.full_text for d in documents], show_progress=False)
    check = DevCheck(states, documents, dev, n_documents=150, length_norm=0.3, frozen_backbone=True)
    assert check(model) == _fresh_score(model, documents, dev, check.rows, 0.3, states)

    backbone_calls = _Counting(model.backbone, "forward")
    document_encodings = _Counting(model, "encode_states")
    again = check(model)  # the same head: nothing encoded again, the queries' backbone pass remembered
    assert (backbone_calls.calls, document_encodings.calls) == (0, 0)
    assert again == check(model)

    model.config = model.config.replace(query_max_length=8)  # a new query limit: the queries' pass only
    short = check(model)
    assert document_encodings.calls == 0 and backbone_calls.calls >= 1
    assert short == _fresh_score(model, documents, dev, check.rows, 0.3, states)


def test_a_changed_head_is_encoded_again(tiny_encoder, mini_data):
    model = tiny_encoder.eval()
    documents = list(mini_data.corpus.values())
    dev = (mini_data.queries, mini_data.qrels)
    states = model.token_states([d.full_text for d in documents], show_progress=False)
    check = DevCheck(states, documents, dev, n_documents=150, frozen_backbone=True)
    before = check(model)
    with torch.no_grad():  # an optimizer step, as training would make between two checks
        for wta in model.buckets.wta.values():
            wta.weight.mul_(-1.0)
    after = check(model)
    assert after != before and after == _fresh_score(model, documents, dev, check.rows, states=states)
    assert len(check.seconds) == 2


def test_a_training_backbone_is_never_remembered(tiny_encoder, mini_data):
    model = tiny_encoder.eval()
    documents = list(mini_data.corpus.values())
    dev = (mini_data.queries, mini_data.qrels)
    check = DevCheck(None, documents, dev, n_documents=150)
    first = check(model)
    with torch.no_grad():
        model.backbone.model.encoder.layer[-1].output.dense.weight.mul_(-3.0)
    assert check(model) == _fresh_score(model, documents, dev, check.rows) != first
