"""`uhdsearch lookup` saves the corpus-learned query table beside the model; `search --lookup` ranks with it."""
from __future__ import annotations

import numpy as np
import pytest

from uhdsearch.encoder.query.table import LookupEncoder
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.search.searcher import Searcher
from uhdsearch.types import format_run

# Tiny indexes still split a query's documents between threads, as in tests/index.
pytestmark = pytest.mark.usefixtures("split_tiny_indexes_between_threads")

QUERY = "vitamin D deficiency and bone fractures"


@pytest.fixture(scope="module")
def built(saved_model_and_index):
    return saved_model_and_index(60)


def test_lookup_then_search_with_it(built, scifact_mini_dir, cli):
    root, model, index = built
    code, out, err = cli(["lookup", "--model", str(root / "model"), "--data", str(scifact_mini_dir),
                         "--keep", "8", "--documents", "60"])
    assert code == 0, err
    assert "from 60 documents" in out and (root / "model" / "query_lookup.npz").is_file()
    table = LookupEncoder.load(root / "model", model)
    rows = table.tables[0]
    assert rows.shape == (model.backbone.tokenizer.vocab_size, 2048)
    assert np.all(np.diff(rows.indptr) <= 8) and rows.nnz > 0  # `keep` dims a row at most
    vitamin = model.backbone.tokenizer.convert_tokens_to_ids("vitamin")
    assert rows[vitamin].nnz == 8  # "vitamin" occurs in the first 60 SciFact abstracts
    code, out, err = cli(["search", "--model", str(root / "model"), "--index", str(root / "index"),
                         "--query", QUERY, "--k", "5", "--lookup"])
    assert code == 0, err
    assert out == format_run(Searcher(table, index).search({"q1": QUERY}, k=5)) and out
    full = format_run(Searcher(model, index).search({"q1": QUERY}, k=5))
    assert out != full  # a different query encoder, different scores
    code, cut, err = cli(["search", "--model", str(root / "model"), "--index", str(root / "index"),
                         "--query", QUERY, "--k", "5", "--lookup", "--query-k", "10"])
    assert code == 0, err  # the table is checked against the model as saved; --query-k cuts the looked-up query
    short = UHDEncoder.from_pretrained(root / "model", query_k=10)
    table.config = short.config
    assert cut == format_run(Searcher(table, index).search({"q1": QUERY}, k=5)) and cut != out


def test_sentence_contexts_differ_from_document_contexts(built, scifact_mini_dir, cli):
    from uhdsearch.encoder.query.corpus_table import CorpusTable, split_sentences
    from uhdsearch.evaluation.datasets import load_corpus

    root, model, _ = built
    tables = {}
    for contexts in ("documents", "sentences"):
        code, out, err = cli(["lookup", "--model", str(root / "model"), "--data", str(scifact_mini_dir),
                              "--keep", "8", "--documents", "20", "--contexts", contexts])
        assert code == 0 and f"documents' {contexts}" in out, err
        assert ("neighbour pairs" in out) == (contexts == "sentences")  # pair rows by default with sentences
        loaded = LookupEncoder.load(root / "model", model)
        assert (loaded.neighbours is not None) == (contexts == "sentences")
        tables[contexts] = loaded.tables[0]
    texts = [d.full_text for d in list(load_corpus(scifact_mini_dir / "corpus.jsonl").values())[:20]]
    want = CorpusTable.from_sentences(model, texts, show_progress=False).tables("winners", 8)[0]
    assert (tables["sentences"] != want).nnz == 0  # the CLI's table is the sentence table of the same texts
    assert (tables["sentences"] != tables["documents"]).nnz > 0
    sentences = split_sentences(texts)
    assert len(sentences) > 3 * len(texts) and all(len(s.split()) >= 4 for s in sentences)


def test_lookup_with_a_context_vote(built, scifact_mini_dir, cli):
    root, model, index = built
    code, out, err = cli(["lookup", "--model", str(root / "model"), "--data", str(scifact_mini_dir), "--keep", "16",
                          "--documents", "20", "--vote", "0.5", "--winners", "4"])
    assert code == 0 and "each query token keeps 4, voted with weight 0.5" in out, err
    loaded = LookupEncoder.load(root / "model", model)
    assert (loaded.keep, loaded.vote, loaded.winners) == (16, 0.5, 4)
    query = loaded.encode([QUERY]).buckets[0]
    words = len(model.backbone.tokenizer(QUERY, add_special_tokens=False)["input_ids"])
    assert 0 < query.nnz <= 4 * words  # at most `winners` dims for each token
    code, out, err = cli(["search", "--model", str(root / "model"), "--index", str(root / "index"),
                          "--query", QUERY, "--k", "5", "--lookup"])
    assert code == 0 and out == format_run(Searcher(loaded, index).search({"q1": QUERY}, k=5)), err


@pytest.mark.parametrize("extra, words", [(["--summary", "best"], "--summary 'best'"), (["--keep", "0"], "--keep 0"),
                                          (["--contexts", "paragraphs"], "--contexts 'paragraphs'"),
                                          (["--contexts", "documents", "--neighbours"], "--neighbours learns"),
                                          (["--vote", "0.5"], "--vote and --winners come together"),
                                          (["--no-neighbours", "--vote", "0.5", "--winners", "4"], "with --neighbours"),
                                          (["--keep", "8", "--vote", "0.5", "--winners", "9"], "winners=9"),
                                          (["--vote", "-1", "--winners", "4"], "vote=-1.0")])
def test_lookup_refuses_bad_options(built, scifact_mini_dir, extra, words, cli):
    root, _, _ = built
    code, out, err = cli(["lookup", "--model", str(root / "model"), "--data", str(scifact_mini_dir), *extra])
    assert code == 2 and words in err


def test_search_lookup_refusals(built, tmp_path, cli):
    root, model, _ = built
    code, _, err = cli(["search", "--model", str(root / "model"), "--index", str(root / "index"), "--query",
                       QUERY, "--lookup", "--onnx"])
    assert code == 2 and "--onnx and --wta-k do not apply" in err
    code, _, err = cli(["search", "--model", str(root / "model"), "--index", str(root / "index"), "--query",
                       QUERY, "--lookup", "--wta-k", "4"])
    assert code == 2 and "--wta-k do not apply" in err
    other = tmp_path / "other"
    model.save_pretrained(other)  # the same model without a table
    code, _, err = cli(["search", "--model", str(other), "--index", str(root / "index"), "--query", QUERY,
                       "--lookup"])
    assert code == 2 and "no lookup table" in err


def test_serve_lookup_ranks_queries_with_the_table_and_refuses_what_it_cannot(built, scifact_mini_dir, cli):
    from fastapi.testclient import TestClient

    from uhdsearch.cli.serve import open_service
    from uhdsearch.serving.app import create_app
    from uhdsearch.serving.settings import ServeSettings

    root, model, index = built
    code, _, err = cli(["lookup", "--model", str(root / "model"), "--data", str(scifact_mini_dir), "--keep", "8",
                        "--documents", "60"])
    assert code == 0, err
    service = open_service(root / "index", root / "model", scifact_mini_dir, False, False, 0, lookup=True)
    table = LookupEncoder.load(root / "model", model)
    with TestClient(create_app(service, ServeSettings()), base_url="http://localhost") as client:
        hits = client.get("/search", params={"q": QUERY, "k": 5}).json()["results"][0]["hits"]
    assert [h["doc_id"] for h in hits] == Searcher(table, index).search({"q1": QUERY}, k=5).doc_ids("q1")
    assert [h["doc_id"] for h in hits] != Searcher(model, index).search({"q1": QUERY}, k=5).doc_ids("q1")
    code, _, err = cli(["serve", str(root / "index"), "--model", str(root / "model"), "--lookup", "--onnx"])
    assert code == 2 and "--lookup" in err
    (root / "model" / "query_lookup.npz").unlink()
    code, _, err = cli(["serve", str(root / "index"), "--model", str(root / "model"), "--lookup"])
    assert code == 2 and "no lookup table" in err
