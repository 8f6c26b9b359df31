"""The comparison library: registry, shared work, memoized runs, UHD in and out of domain, numbers vs evaluate."""
from __future__ import annotations

import shutil

import pytest

from uhdsearch.comparison import SYSTEMS, CachedRetriever, register, resolve_systems, run_comparison
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.quickstart import Recipe
from uhdsearch.types import Run, ScoredDoc

TINY = Recipe(dim=1024, wta_k=8, ict_per_document=1, max_train_minutes=0.05, eval_every=None,
              document_max_length=64)


def test_resolve_puts_bm25_first_and_rejects_unknown_names():
    assert resolve_systems("bm25-bi, splade-tiny,bm25-bi") == ["bm25", "bm25-bi", "splade-tiny"]
    assert resolve_systems(None) == resolve_systems("all") == list(SYSTEMS)
    with pytest.raises(ValueError, match=r"unknown system\(s\) 'x'; known: bm25, "):
        resolve_systems(["bm25", "x"])


def test_one_line_registers_a_system(mini_data, tiny_backbone_dir):
    class Constant:
        def search(self, queries, k):
            return Run({q.query_id: [ScoredDoc(next(iter(mini_data.corpus)), 1.0)] for q in queries})

    register("constant-test")(lambda ctx: Constant())
    try:
        report = run_comparison("tests/data/scifact-mini", "constant-test", backbone=tiny_backbone_dir,
                                show_progress=False)
    finally:
        del SYSTEMS["constant-test"]
    assert list(report.results["systems"]) == ["bm25", "constant-test"]
    assert report.results["systems"]["constant-test"]["R@1000"] < report.results["systems"]["bm25"]["R@1000"]


def test_cached_retriever_cuts_a_larger_run():
    calls = []

    class Counting:
        name = "counting"

        def search(self, queries, k):
            calls.append(k)
            return Run({q.query_id: [ScoredDoc(f"d{i}", float(-i)) for i in range(k)] for q in queries})

    cached = CachedRetriever(Counting())
    queries = {"q": "text"}
    assert cached.search(queries, 5).doc_ids("q") == [f"d{i}" for i in range(5)]
    assert cached.search(queries, 3).doc_ids("q") == ["d0", "d1", "d2"]
    assert cached.search(queries, 8).doc_ids("q")[-1] == "d7"
    assert calls == [5, 8] and cached.name == "counting"


@pytest.fixture(scope="module")
def in_domain(tiny_backbone_dir):
    return run_comparison("tests/data/scifact-mini", "uhd-binary,uhd-weighted,hybrid-uhd-bm25",
                          backbone=tiny_backbone_dir, recipe=TINY, max_length=64, show_progress=False)


def test_uhd_numbers_equal_evaluate_of_the_systems(in_domain, mini_data):
    results = in_domain.results
    assert list(results["systems"]) == ["bm25", "uhd-binary", "uhd-weighted", "hybrid-uhd-bm25"]
    for name, system in in_domain.systems.items():
        expected = evaluate(system.retriever.search(mini_data.queries, 1000), mini_data.qrels)
        assert results["systems"][name] == pytest.approx({m: round(v, 4) for m, v in expected.items()}, abs=1e-9)
    # One training run shared by both variants and the hybrid; its time is shared, not any system's.
    assert set(results["shared_seconds"]) >= {"backbone", "uhd-model"}
    assert results["seconds"]["uhd-weighted"]["build"] < results["shared_seconds"]["uhd-model"]
    assert results["config"]["uhd"]["recipe"]["dim"] == 1024
    assert results["config"]["train_data"] == "scifact-mini/train" and results["config"]["in_domain"]
    assert 0.0 <= results["config"]["hybrids"]["hybrid-uhd-bm25"]["weight"] <= 1.0


def test_out_of_domain_trains_on_the_other_collection(tmp_path, scifact_mini_dir, tiny_backbone_dir):
    target = tmp_path / "target"
    shutil.copytree(scifact_mini_dir, target)
    (target / "qrels" / "train.tsv").unlink()  # like CISI and Medline: test qrels only
    report = run_comparison(target, "uhd-binary,hybrid-uhd-bm25", train_data_dir=scifact_mini_dir,
                            backbone=tiny_backbone_dir, recipe=TINY, max_length=64, show_progress=False)
    config = report.results["config"]
    assert config["in_domain"] is False and config["train_data"] == str(scifact_mini_dir)
    assert config["uhd"]["training_pairs"] > 300  # train qrels pairs and ICT pairs of the other corpus
    assert config["hybrids"]["hybrid-uhd-bm25"]["weight"] == 0.5  # nothing to tune on without a train split
    with pytest.raises(FileExistsError, match="already exists"):
        run_comparison(target, "bm25", out_path=target / "corpus.jsonl")
