"""Neighbour rows of the inference-free query table: pair sums by hand, the backoff to unigram rows, save/load."""
import numpy as np
import pytest
import scipy.sparse as sp
import torch

from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.query.table import LookupEncoder
from uhdsearch.encoder.query.corpus_table import CorpusTable
from uhdsearch.encoder.query.neighbours import NeighbourTable, keep_largest, pair_keys
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.errors import UsageError

DIM, VOCAB = 16, 10


def winners(pairs):
    """One bucket's (values, dims) of tokens with two winners each."""
    values = torch.tensor([[v for v, _ in p] for p in pairs], dtype=torch.float32)
    dims = torch.tensor([[d for _, d in p] for p in pairs], dtype=torch.int64)
    return [(values, dims)]


def test_pair_rows_sum_the_winners_of_each_token_next_to_the_same_neighbour():
    table = NeighbourTable(VOCAB, DIM, 1)
    # text 1: 1 5 7 2; text 2: 1 5 8 2 (token 5 twice after 1, before 7 and before 8)
    ids = np.array([1, 5, 7, 2, 1, 5, 8, 2])
    left = np.array([-1, 1, 5, 7, -1, 1, 5, 8])
    right = np.array([5, 7, 2, -1, 5, 8, 2, -1])
    table.add(ids, left, right, winners([[(1, 0), (1, 1)], [(3.0, 4), (1.0, 6)], [(2, 9), (1, 3)], [(1, 2), (1, 3)],
                                         [(1, 0), (1, 1)], [(1.0, 4), (2.0, 9)], [(5, 3), (-1, 8)], [(1, 2), (1, 3)]]))
    rows = table.rows(keep=2)[0]
    at = np.searchsorted(rows.left_keys, pair_keys([5], [1], VOCAB))[0]
    row = rows.left[at].toarray().ravel()  # 5 after 1, twice: dims 4 (3 + 1), 6 (1), 9 (2): keep 4 and 9
    want = np.zeros(DIM)
    want[[4, 9]] = [4.0, 2.0]
    assert np.allclose(row, want / np.linalg.norm(want))
    at = np.searchsorted(rows.right_keys, pair_keys([8], [2], VOCAB))[0]
    assert np.flatnonzero(rows.right[at].toarray()).tolist() == [3]  # the negative winner of 8 is no active dim
    assert rows.left_keys.shape[0] == 6 and rows.right_keys.shape[0] == 6  # distinct (token, neighbour) pairs


def test_keep_largest_breaks_ties_by_the_lower_dim():
    m = sp.csr_matrix((np.array([1.0, 2.0, 2.0]), (np.array([0, 0, 0]), np.array([7, 5, 3]))), shape=(1, DIM))
    assert keep_largest(m, 2).indices.tolist() == [3, 5]


@pytest.fixture(scope="module")
def model():
    return UHDEncoder.new(config=EncoderConfig(dim=1024, wta_k=8, query_k=None))


def test_a_token_gets_its_pairs_rows_and_the_unigram_row_where_no_pair_was_seen(model, tmp_path):
    texts = ["bone density falls in older women.", "older women lose bone density with age."]
    table = CorpusTable.from_sentences(model, texts, show_progress=False, neighbours=True)
    rows = table.neighbours.rows(keep=8)
    unigrams = table.tables("winners", 8)
    lookup = LookupEncoder(unigrams, model.backbone.tokenizer, model.config, model.digest(), neighbours=rows, keep=8)
    tok = model.backbone.tokenizer
    bone, density, cats = (tok.convert_tokens_to_ids(w) for w in ("bone", "density", "cats"))
    cls, sep = tok.cls_token_id, tok.sep_token_id
    query = lookup.encode(["bone density", "cats"]).buckets[0]
    # "bone" after [CLS] (seen: first word of text 1) and before "density" (seen in both texts)
    r = rows[0]
    left = r.left[np.searchsorted(r.left_keys, pair_keys([bone], [cls], r.vocab))[0]]
    right = r.right[np.searchsorted(r.right_keys, pair_keys([bone], [density], r.vocab))[0]]
    density_left = r.left[np.searchsorted(r.left_keys, pair_keys([density], [bone], r.vocab))[0]]
    assert pair_keys([density], [sep], r.vocab)[0] not in r.right_keys  # density never ended a sentence
    bone_row = keep_largest(left + right, 8).toarray().ravel()
    density_row = keep_largest(density_left, 8).toarray().ravel()
    assert np.allclose(query[0].toarray().ravel(), np.maximum(bone_row, density_row), atol=1e-6)
    # "cats" was never seen: no pair, so its unigram row (empty here: no fallback table was given)
    assert query[1].nnz == 0 and unigrams[0][cats].nnz == 0
    lookup.save(tmp_path)
    again = LookupEncoder.load(tmp_path, model)
    assert again.keep == 8 and (again.encode(["bone density"]).buckets[0] != query[0]).nnz == 0
    with pytest.raises(UsageError, match="neighbour rows need"):
        LookupEncoder(unigrams, tok, model.config, model.digest(), specials=True, neighbours=rows, keep=8)


def test_runs_merged_in_any_order_sum_as_one_pass():
    """40 batches: the runs merge at different sizes; every pair's sums equal a dense count of the same adds."""
    rng = np.random.default_rng(4)
    table = NeighbourTable(VOCAB, DIM, 1)
    want = {}
    for _ in range(40):
        ids, left, right = rng.integers(0, VOCAB, 6), rng.integers(-1, VOCAB, 6), rng.integers(-1, VOCAB, 6)
        values = rng.integers(1, 4, (6, 3)).astype(np.float32)
        dims = np.stack([rng.choice(DIM, 3, replace=False) for _ in range(6)])
        table.add(ids, left, right, [(torch.from_numpy(values), torch.from_numpy(dims))])
        for t, l, v, d in zip(ids, left, values, dims):
            want.setdefault(int(pair_keys([t], [l], VOCAB)[0]), np.zeros(DIM))[d] += v
    rows = table.rows(keep=DIM)[0]
    assert rows.left_keys.tolist() == sorted(want)
    for at, key in enumerate(rows.left_keys):
        assert np.allclose(rows.left[at].toarray().ravel(), want[key] / np.linalg.norm(want[key]))


def test_an_unseen_pair_falls_back_to_the_whole_unigram_row_and_an_empty_pair_row_hides_nothing():
    from uhdsearch.encoder.query.neighbours import NeighbourRows

    fallback = sp.csr_matrix(np.arange(VOCAB * DIM, dtype=np.float32).reshape(VOCAB, DIM) % 7)
    empty_row = sp.csr_matrix((1, DIM), dtype=np.float32)
    rows = NeighbourRows(VOCAB, pair_keys([4], [1], VOCAB), empty_row, np.zeros(0, np.int64), empty_row[:0])
    ids = np.array([1, 4, 2, 1, 5, 2])  # two texts: [CLS]=1 4 [SEP]=2, 1 5 2
    got = rows.token_rows(ids, np.array([1, 4]), fallback, keep=2).toarray()
    assert np.array_equal(got, fallback[[4, 5]].toarray())  # all the fallback's dims, not `keep` of them
