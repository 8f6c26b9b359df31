"""benchmarks/experiments/lookup_vote.py: the grid's encoders are the library's LookupEncoder with the vote, over one table."""
import numpy as np
import pytest
from benchmarks.experiments.lookup_vote import Encoders, label

from uhdsearch.encoder.query.table import LookupEncoder
from uhdsearch.encoder.query.corpus_table import CorpusTable

TEXTS = ["vitamin d changes bone density in older women.", "bone loss rarely changes risk in mice.",
         "insulin signalling changes growth in older mice.", "heart failure strongly changes risk in women."]


@pytest.fixture(scope="module")
def model(tiny_query_model):
    return tiny_query_model


def test_the_grid_encoders_are_lookup_encoders_over_one_table(model):
    table = CorpusTable.from_sentences(model, TEXTS, show_progress=False, neighbours=True)
    encoders = Encoders(model, table)
    queries = ["bone density in older women", "insulin risk"]
    voted = encoders.encoder(8, 3, 1.0).encode(queries).buckets[0]
    want = LookupEncoder(table.tables("winners", 8), model.backbone.tokenizer, model.config, model.digest(),
                         neighbours=table.neighbours.rows(8), keep=8, vote=1.0, winners=3).encode(queries).buckets[0]
    assert (voted != want).nnz == 0 and voted.nnz > 0
    assert np.all(voted.getnnz(axis=1) <= 3 * 5)  # at most 3 winners for each of a query's <= 5 tokens
    plain = encoders.encoder(8).encode(queries).buckets[0]
    assert (plain != voted).nnz > 0
    # the entries count both pair sides and the unigram rows of that keep
    rows = table.neighbours.rows(4)[0]
    assert encoders.entries(4) == table.tables("winners", 4)[0].nnz + rows.left.nnz + rows.right.nnz
    assert encoders.rows(4) is encoders.rows(4)  # summarised once
    assert label(320, 40, 0.5) == "vote 0.5, 40 of 320" and label(20, None, None) == "table, 20 dims"
