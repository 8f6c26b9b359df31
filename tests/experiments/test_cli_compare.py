"""`uhdsearch compare` (the experiment runner behind the CLI) end to end on scifact-mini with cheap systems; its numbers against independent builds."""
from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from uhdsearch.baselines.bm25 import BM25Retriever, wordpiece_analyzer
from uhdsearch.baselines.dense import DenseRetriever
from uhdsearch.baselines.hybrid import HybridRetriever
from uhdsearch.evaluation.metrics import DEFAULT_MEASURES, evaluate


@pytest.fixture(scope="module")
def compared(tmp_path_factory, scifact_mini_dir, tiny_backbone_dir, cli):
    out = tmp_path_factory.mktemp("compare") / "baselines_scifact-mini.json"
    code, stdout, err = cli(["--quiet", "compare", "--data", str(scifact_mini_dir), "--backbone",
                            str(tiny_backbone_dir), "--systems", "bm25-bi,bm25-uni,hybrid-dense-bm25",
                            "--document-max-length", "64", "--out", str(out)])
    assert code == 0, err
    return json.loads(out.read_text()), stdout, out


def test_json_shape_and_table(compared):
    results, stdout, _ = compared
    assert results["dataset"] == "scifact-mini" and results["split"] == "test"
    assert list(results["systems"]) == ["bm25", "bm25-bi", "bm25-uni", "hybrid-dense-bm25"]  # baseline first
    for scores in results["systems"].values():
        assert list(scores) == list(DEFAULT_MEASURES)
        assert all(0.0 <= v <= 1.0 for v in scores.values())
    assert set(results["p_values"]) == {"bm25-bi", "bm25-uni", "hybrid-dense-bm25"}
    assert set(results["seconds"]["bm25-bi"]) == {"build", "search"}
    assert "backbone" in results["shared_seconds"]
    assert results["config"]["hybrids"]["hybrid-dense-bm25"]["tuned_on"].startswith("40 train-split queries")
    assert stdout.splitlines()[0].split() == ["system", *DEFAULT_MEASURES]
    assert "significantly better / worse than baseline 'bm25'" in stdout


def test_numbers_equal_independent_runs(compared, mini_data, tiny_backbone_dir):
    results, _, _ = compared
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone_dir)
    bm25 = BM25Retriever.build(mini_data.corpus, show_progress=False)
    dense = DenseRetriever.build(mini_data.corpus, backbone=tiny_backbone_dir, max_length=64, show_progress=False)
    weight = results["config"]["hybrids"]["hybrid-dense-bm25"]["weight"]
    systems = {
        "bm25": bm25,
        "bm25-bi": BM25Retriever.build(mini_data.corpus, analyzer=wordpiece_analyzer(tokenizer, True),
                                       show_progress=False),
        "hybrid-dense-bm25": HybridRetriever(dense, bm25, weight=weight, depth=100),
    }
    for name, system in systems.items():
        expected = evaluate(system.search(mini_data.queries, 1000), mini_data.qrels)
        assert results["systems"][name] == pytest.approx({m: round(v, 4) for m, v in expected.items()}, abs=1e-9)


@pytest.mark.parametrize("argv, message", [
    (["--systems", "bm25,nope"], "unknown system(s) 'nope'; known: bm25, bm25-uni"),
    (["--systems", " , "], "no systems given"),
    (["--k", "0"], "--k 0 must be a positive integer"),
    (["--split", "dev"], "no qrels for split 'dev'"),
])
def test_user_errors_exit_2_with_one_line(scifact_mini_dir, argv, message, cli):
    code, _, err = cli(["compare", "--data", str(scifact_mini_dir), *argv])
    assert code == 2
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_bad_directories_and_existing_output(tmp_path, compared, scifact_mini_dir, cli):
    code, _, err = cli(["compare", "--data", str(tmp_path / "missing")])
    assert code == 2 and "--data" in err and "is not a directory" in err
    code, _, err = cli(["compare", "--data", str(scifact_mini_dir), "--train-data", str(tmp_path / "x")])
    assert code == 2 and "--train-data" in err
    _, _, out = compared
    code, _, err = cli(["compare", "--data", str(scifact_mini_dir), "--systems", "bm25", "--out", str(out)])
    assert code == 2 and "already exists; pass overwrite=True" in err


def test_list_names_every_registered_system(cli):
    code, out, _ = cli(["compare", "--list"])
    names = out.split()
    assert code == 0
    assert {"bm25", "bm25-uni", "bm25-bi", "splade-tiny", "dense", "uhd-binary", "uhd-weighted", "hybrid-uhd-bm25",
            "hybrid-dense-bm25", "rrf-uhd-bm25"} <= set(names)
