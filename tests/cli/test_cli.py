"""The uhdsearch command line, in-process through `main(argv)`: train, index, search, evaluate, presets, data errors.

One tiny model is trained by `uhdsearch train` per session (tests/cli/conftest.py) and reused; every user error must
exit 2 with one `error: ...` line on stderr and no traceback.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.cli.cli_support import Trained, assert_user_error, run_cli, search_args
from uhdsearch.evaluation.datasets import load_corpus, load_queries
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.evaluation.qrels import load_qrels
from uhdsearch.types import load_run


# ---------------------------------------------------------------------------------------------- happy path
def test_train_writes_a_model_with_the_given_settings(trained: Trained) -> None:
    assert trained.train_output["model"] == str(trained.model)
    assert trained.train_output["pairs"] > 400  # one ICT pair per document plus the train qrels pairs
    assert trained.train_output["steps"] >= 1
    config = json.loads((trained.model / "uhd_config.json").read_text())
    assert (config["format"], config["dim"], config["wta_k"], config["query_k"]) == ("uhd-encoder", 1024, 8, 50)
    assert config["bucket_layers"] == [1, 2]
    assert config["document_max_length"] == 64


def test_index_writes_both_variants(trained: Trained, scifact_mini_dir: Path) -> None:
    n_docs = len(load_corpus(scifact_mini_dir / "corpus.jsonl"))
    for path, output, variant in ((trained.binary, trained.binary_output, "binary"),
                                  (trained.weighted, trained.weighted_output, "weighted")):
        assert output["index"] == str(path)
        assert output["variant"] == variant
        assert output["n_documents"] == n_docs
        assert output["n_postings"] > 0
        meta = json.loads((path / "index_meta.json").read_text())
        assert (meta["format"], meta["variant"], meta["dim"], meta["n_buckets"]) == ("uhd-index", variant, 1024, 2)
    assert (trained.weighted / "bucket_0.weights.npy").is_file()
    assert not (trained.binary / "bucket_0.weights.npy").exists()
    assert trained.binary_output["n_postings"] == trained.weighted_output["n_postings"]


def test_search_evaluate_and_rerank(trained: Trained, scifact_mini_dir: Path, tmp_path: Path, capsys) -> None:
    queries_path = scifact_mini_dir / "queries.jsonl"
    code, out, err = run_cli(capsys, search_args(trained, "--queries", str(queries_path), "--k", "5"))
    assert code == 0, err
    run_path = tmp_path / "run.trec"
    run_path.write_text(out)
    run = load_run(run_path)
    corpus = load_corpus(scifact_mini_dir / "corpus.jsonl")
    queries = load_queries(queries_path)
    assert set(run.results) <= set(queries)
    assert len(run.results) >= len(queries) - 2  # a query that shares no dimension may get no hit
    for query_id, hits in run.results.items():
        assert 1 <= len(hits) <= 5
        assert all(hit.doc_id in corpus for hit in hits)
        assert len({hit.doc_id for hit in hits}) == len(hits)
    first = out.splitlines()[0].split()
    assert (first[1], first[3], first[5]) == ("Q0", "1", "uhd-binary-norm")

    qrels_path = scifact_mini_dir / "qrels" / "test.tsv"
    measures = ["nDCG@10", "RR@10", "R@5"]
    code, out, err = run_cli(capsys, ["evaluate", "--run", str(run_path), "--qrels", str(qrels_path),
                                   "--measures", ",".join(measures)])
    assert code == 0, err
    printed = json.loads(out)
    expected = evaluate(run, load_qrels(qrels_path), measures)
    assert list(printed) == measures
    assert printed == {m: round(v, 4) for m, v in expected.items()}
    assert printed["nDCG@10"] > 0.05  # trained on the same collection: well above an empty run

    code, out, err = run_cli(capsys, search_args(trained, "--queries", str(queries_path), "--k", "3",
                                               "--rerank", str(run_path), index=trained.weighted))
    assert code == 0, err
    reranked_path = tmp_path / "reranked.trec"
    reranked_path.write_text(out)
    reranked = load_run(reranked_path)
    assert set(reranked.results) == set(run.results)
    for query_id, hits in reranked.results.items():
        assert 1 <= len(hits) <= 3
        assert {h.doc_id for h in hits} <= set(run.doc_ids(query_id))
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
    assert out.splitlines()[0].split()[5] == "uhd-weighted-norm-rerank"


def test_search_one_query_text(trained: Trained, scifact_mini_dir: Path, capsys) -> None:
    code, out, err = run_cli(capsys, search_args(trained, "--query", "vitamin D and bone density", "--k", "4"))
    assert code == 0, err
    lines = [line.split() for line in out.splitlines()]
    assert 1 <= len(lines) <= 4
    assert {line[0] for line in lines} == {"q1"}
    assert [line[3] for line in lines] == [str(r) for r in range(1, len(lines) + 1)]
    assert {line[2] for line in lines} <= set(load_corpus(scifact_mini_dir / "corpus.jsonl"))
    scores = [float(line[4]) for line in lines]
    assert scores == sorted(scores, reverse=True)


def test_search_opens_a_segmented_index_too(trained: Trained, tmp_path: Path, capsys) -> None:
    from uhdsearch.index.inverted import InvertedIndex
    from uhdsearch.index.live.segments import SegmentedIndex

    static = InvertedIndex.load(trained.binary)
    live = SegmentedIndex.create(tmp_path / "live", "binary", static.dim, static.n_buckets, static.encoder_digest)
    live.add(static.document_vectors(), list(static.doc_ids))
    live.commit()
    live.close()
    args = ("--query", "vitamin D and bone density", "--k", "5")
    code, expected, err = run_cli(capsys, search_args(trained, *args))
    assert code == 0, err
    code, out, err = run_cli(capsys, search_args(trained, *args, index=tmp_path / "live"))
    assert code == 0, err
    assert [line.split()[2:4] for line in out.splitlines()] == [line.split()[2:4] for line in expected.splitlines()]


def test_search_with_onnx_runtime_gives_the_same_run(trained: Trained, capsys) -> None:
    args = search_args(trained, "--query", "vitamin D and bone density", "--k", "5")
    code, torch_out, err = run_cli(capsys, args)
    assert code == 0, err
    code, onnx_out, err = run_cli(capsys, args + ["--onnx"])
    assert code == 0, err
    torch_lines, onnx_lines = ([line.split() for line in out.splitlines()] for out in (torch_out, onnx_out))
    assert [line[2] for line in onnx_lines] == [line[2] for line in torch_lines] and torch_lines
    assert np.allclose([float(x[4]) for x in onnx_lines], [float(x[4]) for x in torch_lines], atol=1e-4)


def test_empty_query_is_an_empty_result_not_an_error(trained: Trained, capsys, caplog) -> None:
    code, out, err = run_cli(capsys, search_args(trained, "--query", ""))
    assert code == 0, err
    assert out == ""
    assert "error" not in err
    assert any("empty" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------------------- data errors
def test_missing_data_dir(tmp_path: Path, tiny_backbone_dir: Path, capsys) -> None:
    missing = tmp_path / "no-such-collection"
    code, out, err = run_cli(capsys, ["train", "--data", str(missing), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir)])
    assert_user_error(code, out, err, "not found", str(missing))
    assert not (tmp_path / "m").exists()


def test_missing_data_for_index(trained: Trained, tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nowhere" / "corpus.jsonl"
    code, out, err = run_cli(capsys, ["index", "--model", str(trained.model), "--data", str(missing),
                                   "--out", str(tmp_path / "idx")])
    assert_user_error(code, out, err, "not found", str(missing))


def _collection_with_bad_corpus(root: Path, scifact_mini_dir: Path) -> Path:
    data = root / "bad-collection"
    shutil.copytree(scifact_mini_dir, data)
    lines = (data / "corpus.jsonl").read_text().splitlines()
    lines[2] = '{"_id": "broken", "text": "no closing brace"'
    (data / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    return data


def test_malformed_corpus_names_file_and_line(tmp_path: Path, scifact_mini_dir: Path, tiny_backbone_dir: Path,
                                              capsys) -> None:
    data = _collection_with_bad_corpus(tmp_path, scifact_mini_dir)
    code, out, err = run_cli(capsys, ["train", "--data", str(data), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir)])
    assert_user_error(code, out, err, f"{data / 'corpus.jsonl'}:3:", "malformed JSON")


def test_malformed_corpus_file_for_index(trained: Trained, tmp_path: Path, scifact_mini_dir: Path, capsys) -> None:
    data = _collection_with_bad_corpus(tmp_path, scifact_mini_dir)
    code, out, err = run_cli(capsys, ["index", "--model", str(trained.model), "--data", str(data / "corpus.jsonl"),
                                   "--out", str(tmp_path / "idx")])
    assert_user_error(code, out, err, f"{data / 'corpus.jsonl'}:3:")
    assert not (tmp_path / "idx").exists()


def test_missing_qrels_split_lists_the_available_ones(tmp_path: Path, scifact_mini_dir: Path,
                                                      tiny_backbone_dir: Path, capsys) -> None:
    code, out, err = run_cli(capsys, ["train", "--data", str(scifact_mini_dir), "--split", "dev",
                                   "--out", str(tmp_path / "m"), "--backbone", str(tiny_backbone_dir)])
    assert_user_error(code, out, err, "'dev'", "available: test, train")


def test_bad_bucket_layers(tmp_path: Path, scifact_mini_dir: Path, tiny_backbone_dir: Path, capsys) -> None:
    code, out, err = run_cli(capsys, ["train", "--data", str(scifact_mini_dir), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir), "--bucket-layers", "a,b"])
    assert_user_error(code, out, err, "--bucket-layers 'a,b'", "comma-separated integers")


def test_bad_bucket_weights(tmp_path: Path, scifact_mini_dir: Path, tiny_backbone_dir: Path, capsys) -> None:
    code, out, err = run_cli(capsys, ["train", "--data", str(scifact_mini_dir), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir), "--bucket-layers", "1,2",
                                   "--bucket-weights", "1,x"])
    assert_user_error(code, out, err, "--bucket-weights '1,x'")


def test_invalid_encoder_setting(tmp_path: Path, scifact_mini_dir: Path, tiny_backbone_dir: Path, capsys) -> None:
    code, out, err = run_cli(capsys, ["train", "--data", str(scifact_mini_dir), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir), "--dim", "64", "--wta-k", "100"])
    assert_user_error(code, out, err, "wta_k=100", "dim (64)")


# ---------------------------------------------------------------------------------------------- presets
def _record_training(monkeypatch) -> list:
    """Stand in for the training itself: record the encoder settings and recipe `uhdsearch train` built."""
    import uhdsearch.recipes.recipe as recipe_module
    from uhdsearch.training.trainer import TrainingResult

    seen = []

    def record(model, documents, train_data, recipe, *args, **kwargs):
        seen.append((model.config, recipe, train_data is None))
        return TrainingResult(steps=1, planned_steps=3), 7

    monkeypatch.setattr(recipe_module, "train_on_collection", record)
    return seen


@pytest.mark.parametrize(("extra", "name", "overrides", "ict_only"), [
    ([], "quickstart", {}, False),
    (["--preset", "compact"], "compact", {}, False),
    (["--preset", "fast", "--wta-k", "8", "--query-k", "0", "--eval-every", "0", "--bucket-layers", "1,2"],
     "fast", {"wta_k": 8, "query_k": None, "eval_every": None, "bucket_layers": (1, 2)}, False),
    (["--preset", "paper", "--dim", "1024", "--max-minutes", "2", "--split", "", "--learning-rate", "0.001",
      "--hard-negative-depth", "5"],
     "paper", {"dim": 1024, "max_minutes": 2.0, "use_train_qrels": False, "learning_rate": 1e-3,
               "hard_negative_depth": 5}, True),
], ids=["default", "compact", "fast", "paper"])
def test_train_starts_from_a_preset_and_options_override_only_what_is_given(
        extra, name, overrides, ict_only, monkeypatch, tmp_path: Path, scifact_mini_dir: Path,
        tiny_backbone_dir: Path, capsys) -> None:
    from uhdsearch.recipes.presets import preset

    seen = _record_training(monkeypatch)
    code, out, err = run_cli(capsys, ["train", "--data", str(scifact_mini_dir), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir), *extra])
    assert code == 0, err
    assert json.loads(out) == {"model": str(tmp_path / "m"), "pairs": 7, "steps": 1, "planned_steps": 3,
                               "out_of_time": False, "seconds": 0.0}
    expected = preset(name, **overrides)  # the preset's own budget unless --max-minutes is given
    assert seen == [(expected.encoder, expected, ict_only)]
    assert json.loads((tmp_path / "m" / "uhd_config.json").read_text())["dim"] == expected.encoder.dim


def test_unknown_preset(tmp_path: Path, scifact_mini_dir: Path, tiny_backbone_dir: Path, capsys) -> None:
    code, out, err = run_cli(capsys, ["train", "--data", str(scifact_mini_dir), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir), "--preset", "huge"])
    assert_user_error(code, out, err, "unknown preset 'huge'", "quickstart, compact, fast, paper")
    assert not (tmp_path / "m").exists()


def test_quickstart_prints_what_the_pipeline_returns(monkeypatch, tmp_path: Path, capsys) -> None:
    import uhdsearch.recipes.quickstart as quickstart_module
    from uhdsearch.evaluation.experiment import compare
    from uhdsearch.recipes.presets import PRESETS
    from uhdsearch.types import Run, ScoredDoc

    calls = []
    runs = {name: Run({"q1": [ScoredDoc(doc, 1.0)]}) for name, doc in (("bm25", "d1"), ("uhd-binary", "d2"))}
    comparison = compare(runs, {"q1": "a query"}, {"q1": {"d1": 1}}, ["nDCG@10"], baseline="bm25")

    def pipeline(out, **kwargs):
        calls.append(kwargs)
        return quickstart_module.QuickstartResult(
            {}, {}, comparison, {"uhd-binary-rerank-bm25": {"nDCG@10": 0.5}},
            {"train": 12.3, "index": 4.0, "search_ms_per_query": 1.25}, Path(out) / "results.json")

    monkeypatch.setattr(quickstart_module, "run_quickstart", pipeline)
    code, out, err = run_cli(capsys, ["quickstart", "--out", str(tmp_path), "--fast", "--preset", "paper"])
    assert code == 0, err
    assert calls[0]["recipe"] == PRESETS["paper"] and calls[0]["fast"] is True
    assert out.startswith(comparison.format_table() + "\n")
    assert "re-ranking BM25's top 1000:\n  uhd-binary-rerank-bm25" + " " * 7 + "nDCG@10 0.5000\n" in out
    assert "train 12 s, index 4 s, uhd-binary-norm search 1.2 ms/query" in out
    assert out.endswith(f"wrote {tmp_path / 'results.json'}\n")
    code, out, err = run_cli(capsys, ["quickstart", "--out", str(tmp_path)])
    assert code == 0 and calls[1]["recipe"] is None and calls[1]["fast"] is False  # the pipeline's own default




def test_quiet_hides_the_progress_bars_for_its_command_only(trained: Trained, scifact_mini_dir: Path, tmp_path: Path,
                                                           capsys) -> None:
    def index(*options: str) -> str:
        code, _, err = run_cli(capsys, [*options, "index", "--model", str(trained.model), "--data",
                                        str(scifact_mini_dir), "--out", str(tmp_path / f"index{len(options)}")])
        assert code == 0, err
        return err

    assert "%|" not in index("--quiet")
    assert "%|" in index()  # the next command, in the same process, draws its bars again
