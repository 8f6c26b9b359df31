"""Export to milvus-lite: ids round trip, Milvus's inner-product top-10 equals uhdsearch's weighted search."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from uhdsearch.cli.main import main  # noqa: E402
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex  # noqa: E402
from uhdsearch.scale.milvus import export_to_milvus, milvus_query, search_milvus  # noqa: E402
from uhdsearch.search.searcher import Searcher  # noqa: E402


def _same_up_to_ties(got, expected, tol=1e-4) -> None:
    assert len(got) == len(expected)
    got_scores, want_scores = np.array([s for _, s in got]), np.array([s for _, s in expected])
    assert np.allclose(got_scores, want_scores, rtol=tol, atol=tol)
    for i, (doc_id, score) in enumerate(expected):
        others = np.delete(want_scores, i)
        if np.all(np.abs(others - score) > tol) and (i < len(expected) - 1 or len(expected) < 10):
            assert got[i][0] == doc_id  # a score no other hit shares: same rank


@pytest.mark.parametrize("klass", [WeightedIndex, BinaryIndex])
def test_milvus_top10_equals_uhdsearch(klass, tiny_encoder_session, mini_encoding, mini_data, tmp_path):
    index = klass.from_encoding(mini_encoding, list(mini_data.corpus), tmp_path / "index",
                                tiny_encoder_session.digest())
    uri = str(tmp_path / "uhd.db")
    report = export_to_milvus(tmp_path / "index", uri, "scifact", batch_size=128, show_progress=False)
    assert report["n_documents"] + len(report["skipped"]) == 400 and report["n_documents"] > 390
    searcher = Searcher(tiny_encoder_session, index)
    live = list(mini_data.queries)
    encoded = searcher.encode(live)
    numbers, scores = index.search_encoded(encoded, 10, searcher.bucket_weights, index.variant)
    queries = milvus_query(encoded, searcher.bucket_weights, binary=klass is BinaryIndex)
    hits = search_milvus(uri, "scifact", queries, 10)
    assert len(hits) == 40
    for row, got in enumerate(hits):
        expected = [(index.doc_ids[n], s) for n, s in zip(numbers[row], scores[row]) if n >= 0]
        _same_up_to_ties(got, expected)


def test_every_doc_id_round_trips_and_the_cli_refuses_to_overwrite(tiny_encoder_session, mini_encoding, mini_data,
                                                                   tmp_path, capsys):
    pymilvus = pytest.importorskip("pymilvus")
    WeightedIndex.from_encoding(mini_encoding, list(mini_data.corpus), tmp_path / "index")
    uri = str(tmp_path / "uhd.db")
    args = ["export", "milvus", str(tmp_path / "index"), "--uri", uri, "--collection", "c1", "--batch-size", "150"]
    assert main(args) == 0
    client = pymilvus.MilvusClient(uri)
    stored = {r["doc_id"] for r in client.query("c1", filter="", output_fields=["doc_id"], limit=1000)}
    client.close()
    assert stored == set(mini_data.corpus)
    assert main(args) == 2
    assert "collection 'c1' already exists" in capsys.readouterr().err
