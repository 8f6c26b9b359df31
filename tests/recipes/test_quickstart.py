import json

import pytest
import torch

from uhdsearch.baselines.bm25 import BM25Retriever
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.recipes.quickstart import load_results, run_quickstart
from uhdsearch.recipes.recipe import Recipe


@pytest.fixture(scope="module")
def quickstart_out(tmp_path_factory, scifact_mini_dir, tiny_backbone_dir):
    out = tmp_path_factory.mktemp("qs")
    recipe = Recipe(dim=1024, wta_k=8, query_k=50, bucket_layers=(1, 2), document_max_length=64,
                    ict_per_document=1, epochs=1.0, max_train_minutes=5.0, hard_negative_depth=5)
    done = run_quickstart(out, data_dir=scifact_mini_dir, backbone=tiny_backbone_dir, recipe=recipe,
                          show_progress=False)
    return out, done.results


def test_results_json_has_the_documented_shape(quickstart_out, scifact_mini_dir):
    out, results = quickstart_out
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk == results
    assert on_disk["dataset"] == "scifact-mini" and on_disk["split"] == "test" and on_disk["n_queries"] == 40
    assert set(on_disk["systems"]) == {"bm25", "dense", "uhd-binary-norm", "uhd-weighted-norm", "uhd-planes"}
    assert load_results(out / "results.json") == on_disk  # today's names are kept as they are
    for scores in on_disk["systems"].values():
        assert set(scores) == {"nDCG@10", "RR@10", "R@100", "R@1000"}
        assert all(0.0 <= v <= 1.0 for v in scores.values())
    assert set(on_disk["seconds"]) == {"train", "index", "search_ms_per_query"}
    assert on_disk["seconds"]["search_ms_per_query"] > 0
    assert 0 < on_disk["config"]["training_steps"] <= on_disk["config"]["training_planned_steps"]
    # a few seconds of training on quiet cores; the 5-minute budget leaves room for a loaded 2-core machine
    assert on_disk["config"]["training_out_of_time"] is False
    assert on_disk["machine"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert on_disk["machine"]["wta_path"] in ("native", "emulated") and on_disk["machine"]["cpu_model"]
    assert on_disk["wall_seconds"] >= on_disk["seconds"]["train"] > 0
    recipe = on_disk["config"]["recipe"]
    assert (recipe["encoder"]["dim"], recipe["encoder"]["bucket_layers"], recipe["training"]["max_minutes"]) == (
        1024, [1, 2], 5.0)
    assert recipe["hard_negative_depth"] == 5
    assert "| encoder.dim | 1024 |" in (out / "model" / "README.md").read_text()


def test_quickstart_bm25_equals_the_library_baseline(quickstart_out, mini_data):
    _, results = quickstart_out
    bm25 = BM25Retriever.build(mini_data.corpus, show_progress=False)
    expected = evaluate(bm25.search(mini_data.queries, k=1000), mini_data.qrels, ["nDCG@10"])["nDCG@10"]
    assert results["systems"]["bm25"]["nDCG@10"] == round(expected, 4)


def test_quickstart_writes_loadable_artifacts_and_runs(quickstart_out, mini_data):
    out, results = quickstart_out
    binary = InvertedIndex.load(out / "index-binary")
    assert binary.variant == "binary" and binary.n_documents == len(mini_data.corpus)
    from uhdsearch.types import load_run

    from uhdsearch.index import open_index
    from uhdsearch.index.impacts import ImpactPlanes

    planes = open_index(out / "index-planes")
    assert isinstance(planes, ImpactPlanes) and planes.n_documents == len(mini_data.corpus)
    run = load_run(out / "runs" / "uhd-planes.trec")
    assert round(evaluate(run, mini_data.qrels, ["nDCG@10"])["nDCG@10"], 4) == results["systems"]["uhd-planes"]["nDCG@10"]
    run = load_run(out / "runs" / "uhd-binary-norm.trec")
    assert round(evaluate(run, mini_data.qrels, ["nDCG@10"])["nDCG@10"], 4) == results["systems"]["uhd-binary-norm"]["nDCG@10"]


def test_quickstart_refuses_to_overwrite(quickstart_out):
    out, _ = quickstart_out
    with pytest.raises(FileExistsError, match="already holds results"):
        run_quickstart(out)



def test_the_output_directory_is_one_unit(quickstart_out):
    """Staged beside --out and swapped in whole: every part records the same model, no staging left behind."""
    from uhdsearch.encoder.model import UHDEncoder

    out, results = quickstart_out
    digest = UHDEncoder.from_pretrained(out / "model").digest()
    assert results["model_digest"] == digest
    assert {InvertedIndex.load(out / n).encoder_digest
            for n in ("index-binary", "index-weighted", "index-planes")} == {digest}
    assert sorted(p.name for p in out.iterdir()) == ["extra_results.json", "index-binary", "index-planes",
                                                    "index-weighted", "model", "results.json", "runs"]
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")] == []


def test_the_model_card_says_when_the_time_budget_cut_training(mini_data):
    from uhdsearch.recipes.quickstart import _model_card
    from uhdsearch.training.trainer import TrainingResult

    cut = TrainingResult(steps=366, planned_steps=450, out_of_time=True, seconds=1200.0)
    assert "Steps: 366 of 450 (the 20-minute budget ran out)" in _model_card(mini_data, Recipe(), cut)
    whole = TrainingResult(steps=450, planned_steps=450, seconds=700.0)
    assert "Steps: 450; seconds: 700" in _model_card(mini_data, Recipe(), whole)
