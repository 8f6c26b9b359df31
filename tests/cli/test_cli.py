"""The uhdsearch command line, in-process through `main(argv)` and once through the real console script.

One tiny model is trained by `uhdsearch train` per module and reused; every user error must exit 2 with
one `error: ...` line on stderr (click's own usage output for malformed options) and no traceback.
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from uhdsearch.cli.main import main
from uhdsearch.evaluation.datasets import load_corpus, load_queries
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.evaluation.qrels import load_qrels
from uhdsearch.types import load_run

TRAIN_OPTIONS = ["--dim", "1024", "--wta-k", "8", "--query-k", "50", "--bucket-layers", "1,2",
                 "--document-max-length", "64", "--epochs", "1", "--ict-per-document", "1"]


def _call(argv: list[str]) -> tuple[int, str, str]:
    """Run main(argv) with stdout and stderr captured (for module-scoped fixtures, where capsys is unavailable)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@dataclass
class Trained:
    model: Path
    binary: Path
    weighted: Path
    train_output: dict
    binary_output: dict
    weighted_output: dict


@pytest.fixture(scope="module")
def trained(tmp_path_factory, scifact_mini_dir, tiny_backbone_dir) -> Trained:
    """`uhdsearch train` then `uhdsearch index` (binary and weighted) on scifact-mini, once per module."""
    root = tmp_path_factory.mktemp("cli")
    model = root / "model"
    code, out, err = _call(["train", "--data", str(scifact_mini_dir), "--out", str(model),
                            "--backbone", str(tiny_backbone_dir), *TRAIN_OPTIONS])
    assert code == 0, err
    train_output = json.loads(out)
    outputs = {}
    for variant in ("binary", "weighted"):
        code, out, err = _call(["index", "--model", str(model), "--data", str(scifact_mini_dir),
                                "--out", str(root / f"index-{variant}"), "--variant", variant, "--batch-size", "64"])
        assert code == 0, err
        outputs[variant] = json.loads(out)
    return Trained(model, root / "index-binary", root / "index-weighted", train_output,
                   outputs["binary"], outputs["weighted"])


def _assert_user_error(code: int, out: str, err: str, *fragments: str) -> str:
    """Exit 2, nothing on stdout, exactly one `error: ...` line on stderr that contains every fragment."""
    assert code == 2, (code, err)
    assert out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def _assert_usage_error(code: int, out: str, err: str, *fragments: str) -> None:
    """A malformed option: exit 2, one `error:` line on stderr, no traceback."""
    assert code == 2, (code, err)
    assert out == ""
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _search_args(trained: Trained, *extra: str, index: Path | None = None) -> list[str]:
    return ["search", "--model", str(trained.model), "--index", str(index or trained.binary), *extra]


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
    code, out, err = _run(capsys, _search_args(trained, "--queries", str(queries_path), "--k", "5"))
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
    assert (first[1], first[3], first[5]) == ("Q0", "1", "uhd-binary")

    qrels_path = scifact_mini_dir / "qrels" / "test.tsv"
    measures = ["nDCG@10", "RR@10", "R@5"]
    code, out, err = _run(capsys, ["evaluate", "--run", str(run_path), "--qrels", str(qrels_path),
                                   "--measures", ",".join(measures)])
    assert code == 0, err
    printed = json.loads(out)
    expected = evaluate(run, load_qrels(qrels_path), measures)
    assert list(printed) == measures
    assert printed == {m: round(v, 4) for m, v in expected.items()}
    assert printed["nDCG@10"] > 0.05  # trained on the same collection: well above an empty run

    code, out, err = _run(capsys, _search_args(trained, "--queries", str(queries_path), "--k", "3",
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
    assert out.splitlines()[0].split()[5] == "uhd-weighted-rerank"


def test_search_one_query_text(trained: Trained, scifact_mini_dir: Path, capsys) -> None:
    code, out, err = _run(capsys, _search_args(trained, "--query", "vitamin D and bone density", "--k", "4"))
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
    code, expected, err = _run(capsys, _search_args(trained, *args))
    assert code == 0, err
    code, out, err = _run(capsys, _search_args(trained, *args, index=tmp_path / "live"))
    assert code == 0, err
    assert [line.split()[2:4] for line in out.splitlines()] == [line.split()[2:4] for line in expected.splitlines()]


def test_search_with_onnx_runtime_gives_the_same_run(trained: Trained, capsys) -> None:
    args = _search_args(trained, "--query", "vitamin D and bone density", "--k", "5")
    code, torch_out, err = _run(capsys, args)
    assert code == 0, err
    code, onnx_out, err = _run(capsys, args + ["--onnx"])
    assert code == 0, err
    torch_lines, onnx_lines = ([line.split() for line in out.splitlines()] for out in (torch_out, onnx_out))
    assert [line[2] for line in onnx_lines] == [line[2] for line in torch_lines] and torch_lines
    assert np.allclose([float(x[4]) for x in onnx_lines], [float(x[4]) for x in torch_lines], atol=1e-4)


def test_empty_query_is_an_empty_result_not_an_error(trained: Trained, capsys, caplog) -> None:
    code, out, err = _run(capsys, _search_args(trained, "--query", ""))
    assert code == 0, err
    assert out == ""
    assert "error" not in err
    assert any("empty" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------------------- data errors
def test_missing_data_dir(tmp_path: Path, tiny_backbone_dir: Path, capsys) -> None:
    missing = tmp_path / "no-such-collection"
    code, out, err = _run(capsys, ["train", "--data", str(missing), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir)])
    _assert_user_error(code, out, err, "not found", str(missing))
    assert not (tmp_path / "m").exists()


def test_missing_data_for_index(trained: Trained, tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nowhere" / "corpus.jsonl"
    code, out, err = _run(capsys, ["index", "--model", str(trained.model), "--data", str(missing),
                                   "--out", str(tmp_path / "idx")])
    _assert_user_error(code, out, err, "not found", str(missing))


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
    code, out, err = _run(capsys, ["train", "--data", str(data), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir)])
    _assert_user_error(code, out, err, f"{data / 'corpus.jsonl'}:3:", "malformed JSON")


def test_malformed_corpus_file_for_index(trained: Trained, tmp_path: Path, scifact_mini_dir: Path, capsys) -> None:
    data = _collection_with_bad_corpus(tmp_path, scifact_mini_dir)
    code, out, err = _run(capsys, ["index", "--model", str(trained.model), "--data", str(data / "corpus.jsonl"),
                                   "--out", str(tmp_path / "idx")])
    _assert_user_error(code, out, err, f"{data / 'corpus.jsonl'}:3:")
    assert not (tmp_path / "idx").exists()


def test_missing_qrels_split_lists_the_available_ones(tmp_path: Path, scifact_mini_dir: Path,
                                                      tiny_backbone_dir: Path, capsys) -> None:
    code, out, err = _run(capsys, ["train", "--data", str(scifact_mini_dir), "--split", "dev",
                                   "--out", str(tmp_path / "m"), "--backbone", str(tiny_backbone_dir)])
    _assert_user_error(code, out, err, "'dev'", "available: test, train")


def test_bad_bucket_layers(tmp_path: Path, scifact_mini_dir: Path, tiny_backbone_dir: Path, capsys) -> None:
    code, out, err = _run(capsys, ["train", "--data", str(scifact_mini_dir), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir), "--bucket-layers", "a,b"])
    _assert_user_error(code, out, err, "--bucket-layers 'a,b'", "comma-separated integers")


def test_bad_bucket_weights(tmp_path: Path, scifact_mini_dir: Path, tiny_backbone_dir: Path, capsys) -> None:
    code, out, err = _run(capsys, ["train", "--data", str(scifact_mini_dir), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir), "--bucket-layers", "1,2",
                                   "--bucket-weights", "1,x"])
    _assert_user_error(code, out, err, "--bucket-weights '1,x'")


def test_invalid_encoder_setting(tmp_path: Path, scifact_mini_dir: Path, tiny_backbone_dir: Path, capsys) -> None:
    code, out, err = _run(capsys, ["train", "--data", str(scifact_mini_dir), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir), "--dim", "64", "--wta-k", "100"])
    _assert_user_error(code, out, err, "wta_k=100", "dim (64)")


# ---------------------------------------------------------------------------------------------- presets
def _record_training(monkeypatch) -> list:
    """Stand in for the training itself: record the encoder settings and recipe `uhdsearch train` built."""
    import uhdsearch.training.recipe as recipe_module
    from uhdsearch.training.trainer import TrainingResult

    seen = []

    def record(model, documents, train_data, recipe, *args, **kwargs):
        seen.append((model.config, recipe, train_data is None))
        return TrainingResult(steps=1), 7

    monkeypatch.setattr(recipe_module, "train_on_collection", record)
    return seen


@pytest.mark.parametrize(("extra", "name", "overrides", "ict_only"), [
    ([], "quickstart", {}, False),
    (["--preset", "fast", "--wta-k", "8", "--query-k", "0", "--eval-every", "0", "--bucket-layers", "1,2"],
     "fast", {"wta_k": 8, "query_k": None, "eval_every": None, "bucket_layers": (1, 2)}, False),
    (["--preset", "paper", "--dim", "1024", "--max-minutes", "2", "--split", "", "--learning-rate", "0.001",
      "--hard-negative-depth", "5"],
     "paper", {"dim": 1024, "max_minutes": 2.0, "use_train_qrels": False, "learning_rate": 1e-3,
               "hard_negative_depth": 5}, True),
], ids=["default", "fast", "paper"])
def test_train_starts_from_a_preset_and_options_override_only_what_is_given(
        extra, name, overrides, ict_only, monkeypatch, tmp_path: Path, scifact_mini_dir: Path,
        tiny_backbone_dir: Path, capsys) -> None:
    from uhdsearch.training.presets import preset

    seen = _record_training(monkeypatch)
    code, out, err = _run(capsys, ["train", "--data", str(scifact_mini_dir), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir), *extra])
    assert code == 0, err
    assert json.loads(out) == {"model": str(tmp_path / "m"), "pairs": 7, "steps": 1, "seconds": 0.0}
    expected = preset(name, **overrides)  # the preset's own budget unless --max-minutes is given
    assert seen == [(expected.encoder, expected, ict_only)]
    assert json.loads((tmp_path / "m" / "uhd_config.json").read_text())["dim"] == expected.encoder.dim


def test_unknown_preset(tmp_path: Path, scifact_mini_dir: Path, tiny_backbone_dir: Path, capsys) -> None:
    code, out, err = _run(capsys, ["train", "--data", str(scifact_mini_dir), "--out", str(tmp_path / "m"),
                                   "--backbone", str(tiny_backbone_dir), "--preset", "huge"])
    _assert_user_error(code, out, err, "unknown preset 'huge'", "quickstart, fast, paper")
    assert not (tmp_path / "m").exists()


def test_quickstart_prints_what_the_pipeline_returns(monkeypatch, tmp_path: Path, capsys) -> None:
    import uhdsearch.quickstart as quickstart_module
    from uhdsearch.evaluation.experiment import compare
    from uhdsearch.training.presets import PRESETS
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
    code, out, err = _run(capsys, ["quickstart", "--out", str(tmp_path), "--fast", "--preset", "paper"])
    assert code == 0, err
    assert calls[0]["recipe"] == PRESETS["paper"] and calls[0]["fast"] is True
    assert out.startswith(comparison.format_table() + "\n")
    assert "re-ranking BM25's top 1000:\n  uhd-binary-rerank-bm25" + " " * 7 + "nDCG@10 0.5000\n" in out
    assert "train 12 s, index 4 s, UHD-binary search 1.2 ms/query" in out
    assert out.endswith(f"wrote {tmp_path / 'results.json'}\n")
    code, out, err = _run(capsys, ["quickstart", "--out", str(tmp_path)])
    assert code == 0 and calls[1]["recipe"] is None and calls[1]["fast"] is False  # the pipeline's own default


# ---------------------------------------------------------------------------------------------- search options
@pytest.mark.parametrize("k", ["0", "-1"])
def test_k_must_be_positive(trained: Trained, k: str, capsys) -> None:
    code, out, err = _run(capsys, _search_args(trained, "--query", "cancer", "--k", k))
    _assert_user_error(code, out, err, f"--k {k}", "positive integer")


def test_k_must_be_an_integer(trained: Trained, capsys) -> None:
    code, out, err = _run(capsys, _search_args(trained, "--query", "cancer", "--k", "ten"))
    _assert_usage_error(code, out, err, "Invalid value for '--k'", "valid integer")


@pytest.mark.parametrize("extra", [[], ["--query", "cancer", "--queries", "queries.jsonl"]], ids=["neither", "both"])
def test_exactly_one_of_queries_and_query(trained: Trained, extra: list[str], capsys) -> None:
    code, out, err = _run(capsys, _search_args(trained, *extra))
    _assert_user_error(code, out, err, "exactly one of --queries FILE or --query TEXT")


def test_unknown_scoring(trained: Trained, capsys) -> None:
    code, out, err = _run(capsys, _search_args(trained, "--query", "cancer", "--scoring", "bogus"))
    _assert_user_error(code, out, err, "--scoring 'bogus'", "binary or weighted")


def test_weighted_scoring_needs_a_weighted_index(trained: Trained, capsys) -> None:
    code, out, err = _run(capsys, _search_args(trained, "--query", "cancer", "--scoring", "weighted"))
    _assert_user_error(code, out, err, "weighted index")


def test_unknown_variant(trained: Trained, scifact_mini_dir: Path, tmp_path: Path, capsys) -> None:
    code, out, err = _run(capsys, ["index", "--model", str(trained.model), "--data", str(scifact_mini_dir),
                                   "--out", str(tmp_path / "idx"), "--variant", "bogus"])
    _assert_user_error(code, out, err, "--variant 'bogus'", "binary or weighted")
    assert not (tmp_path / "idx").exists()


def test_unknown_command_and_option_are_usage_errors(capsys) -> None:
    code, out, err = _run(capsys, ["serach"])
    _assert_usage_error(code, out, err, "serach")
    code, out, err = _run(capsys, ["evaluate", "--run", "r", "--qrels", "q", "--depth", "3"])
    _assert_usage_error(code, out, err, "--depth")


# ---------------------------------------------------------------------------------------------- model and index files
def test_model_dir_that_is_not_a_model(tmp_path: Path, scifact_mini_dir: Path, trained: Trained, capsys) -> None:
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    (not_a_model / "notes.txt").write_text("hello")
    code, out, err = _run(capsys, ["index", "--model", str(not_a_model), "--data", str(scifact_mini_dir),
                                   "--out", str(tmp_path / "idx")])
    _assert_user_error(code, out, err, f"not a uhdsearch model: {not_a_model} has no uhd_config.json")
    code, out, err = _run(capsys, ["search", "--model", str(not_a_model), "--index", str(trained.binary),
                                   "--query", "cancer"])
    _assert_user_error(code, out, err, "not a uhdsearch model")


def test_missing_model_dir(tmp_path: Path, trained: Trained, capsys) -> None:
    code, out, err = _run(capsys, ["search", "--model", str(tmp_path / "gone"), "--index", str(trained.binary),
                                   "--query", "cancer"])
    _assert_user_error(code, out, err, "no model directory", str(tmp_path / "gone"))


def test_index_dir_that_is_not_an_index(trained: Trained, tmp_path: Path, capsys) -> None:
    code, out, err = _run(capsys, _search_args(trained, "--query", "cancer", index=tmp_path))
    _assert_user_error(code, out, err, f"not a uhdsearch index: {tmp_path} has no index_meta.json")


def test_missing_index_dir(trained: Trained, tmp_path: Path, capsys) -> None:
    code, out, err = _run(capsys, _search_args(trained, "--query", "cancer", index=tmp_path / "gone"))
    _assert_user_error(code, out, err, "no index directory", str(tmp_path / "gone"))


def test_truncated_index_file(trained: Trained, tmp_path: Path, capsys) -> None:
    index = tmp_path / "index"
    shutil.copytree(trained.binary, index)
    docs = max(index.glob("bucket_0.*.npy"), key=lambda f: f.stat().st_size)  # the postings, whatever the layout
    data = docs.read_bytes()
    docs.write_bytes(data[:-100])
    code, out, err = _run(capsys, _search_args(trained, "--query", "cancer", index=index))
    _assert_user_error(code, out, err, str(docs), f"{len(data) - 100} bytes", f"manifest says {len(data)}",
                       "truncated")


def test_altered_index_file_fails_its_checksum(trained: Trained, tmp_path: Path, capsys) -> None:
    index = tmp_path / "index"
    shutil.copytree(trained.binary, index)
    docs = max(index.glob("bucket_0.*.npy"), key=lambda f: f.stat().st_size)  # the postings, whatever the layout
    data = bytearray(docs.read_bytes())
    data[-1] ^= 0xFF  # same size, other content
    docs.write_bytes(bytes(data))
    code, out, err = _run(capsys, _search_args(trained, "--query", "cancer", index=index))
    _assert_user_error(code, out, err, str(docs), "checksum")


def test_foreign_index(trained: Trained, tmp_path: Path, capsys) -> None:
    index = tmp_path / "index"
    shutil.copytree(trained.binary, index)
    meta = json.loads((index / "index_meta.json").read_text())
    meta["format"] = "faiss-flat"
    (index / "index_meta.json").write_text(json.dumps(meta))
    code, out, err = _run(capsys, _search_args(trained, "--query", "cancer", index=index))
    _assert_user_error(code, out, err, "'faiss-flat'", "'uhd-index'")


def test_newer_index_format_version(trained: Trained, tmp_path: Path, capsys) -> None:
    index = tmp_path / "index"
    shutil.copytree(trained.binary, index)
    meta = json.loads((index / "index_meta.json").read_text())
    meta["format_version"] = 99
    (index / "index_meta.json").write_text(json.dumps(meta))
    code, out, err = _run(capsys, _search_args(trained, "--query", "cancer", index=index))
    _assert_user_error(code, out, err, "format_version 99", "upgrade uhdsearch")


def test_dimension_mismatch(trained: Trained, tiny_encoder_session, tmp_path: Path, capsys) -> None:
    assert tiny_encoder_session.config.dim == 2048
    other_model = tmp_path / "model-2048"
    tiny_encoder_session.save_pretrained(other_model)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n" for i, text in
                              enumerate(["vitamin d and bone", "cancer cells divide", "protein folding"])))
    code, out, err = _run(capsys, ["index", "--model", str(other_model), "--data", str(corpus),
                                   "--out", str(tmp_path / "index-2048")])
    assert code == 0, err
    assert json.loads(out)["n_documents"] == 3
    code, out, err = _run(capsys, _search_args(trained, "--query", "cancer", index=tmp_path / "index-2048"))
    _assert_user_error(code, out, err, "dim=1024", "dim=2048")


# ---------------------------------------------------------------------------------------------- overwriting
def test_train_refuses_to_overwrite(tmp_path: Path, scifact_mini_dir: Path, tiny_backbone_dir: Path, capsys) -> None:
    out_dir = tmp_path / "model"
    out_dir.mkdir()
    (out_dir / "keep.txt").write_text("precious")
    code, out, err = _run(capsys, ["train", "--data", str(scifact_mini_dir), "--out", str(out_dir),
                                   "--backbone", str(tiny_backbone_dir), *TRAIN_OPTIONS])
    _assert_user_error(code, out, err, str(out_dir), "--overwrite")
    assert [p.name for p in out_dir.iterdir()] == ["keep.txt"]
    assert (out_dir / "keep.txt").read_text() == "precious"


def test_index_refuses_to_overwrite(trained: Trained, scifact_mini_dir: Path, tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / "index"
    out_dir.mkdir()
    (out_dir / "keep.txt").write_text("precious")
    code, out, err = _run(capsys, ["index", "--model", str(trained.model), "--data", str(scifact_mini_dir),
                                   "--out", str(out_dir)])
    _assert_user_error(code, out, err, str(out_dir), "--overwrite")
    assert [p.name for p in out_dir.iterdir()] == ["keep.txt"]
    assert (out_dir / "keep.txt").read_text() == "precious"


# ---------------------------------------------------------------------------------------------- evaluate
def test_evaluate_malformed_run(tmp_path: Path, scifact_mini_dir: Path, capsys) -> None:
    run_path = tmp_path / "bad.trec"
    run_path.write_text("0 Q0 4983 1 2.5 uhd\n0 Q0 5836 two 1.5 uhd\n")
    code, out, err = _run(capsys, ["evaluate", "--run", str(run_path),
                                   "--qrels", str(scifact_mini_dir / "qrels" / "test.tsv")])
    _assert_user_error(code, out, err, f"{run_path}:2:", "rank must be an integer", "'two'")


def test_evaluate_unknown_measure(tmp_path: Path, scifact_mini_dir: Path, capsys) -> None:
    run_path = tmp_path / "run.trec"
    run_path.write_text("0 Q0 4983 1 2.5 uhd\n")
    code, out, err = _run(capsys, ["evaluate", "--run", str(run_path), "--measures", "nDCG@10,Bogus@3",
                                   "--qrels", str(scifact_mini_dir / "qrels" / "test.tsv")])
    _assert_user_error(code, out, err, "Bogus@3")


def test_evaluate_missing_qrels(tmp_path: Path, capsys) -> None:
    run_path = tmp_path / "run.trec"
    run_path.write_text("0 Q0 4983 1 2.5 uhd\n")
    code, out, err = _run(capsys, ["evaluate", "--run", str(run_path), "--qrels", str(tmp_path / "none.tsv")])
    _assert_user_error(code, out, err, "qrels file not found", str(tmp_path / "none.tsv"))


# ---------------------------------------------------------------------------------------------- --debug
def test_debug_reraises(trained: Trained, capsys) -> None:
    with pytest.raises(ValueError, match="--k 0 must be a positive integer"):
        main(["--debug", *_search_args(trained, "--query", "cancer", "--k", "0")])
    # the flag does not stick: the next call without it reports the error as one line again
    code, out, err = _run(capsys, _search_args(trained, "--query", "cancer", "--k", "0"))
    _assert_user_error(code, out, err, "--k 0")


def test_interrupt_exits_130(tmp_path: Path, scifact_mini_dir: Path, monkeypatch, capsys) -> None:
    import uhdsearch.types

    def interrupted(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(uhdsearch.types, "load_run", interrupted)  # stands in for Ctrl-C mid-command
    code, out, err = _run(capsys, ["evaluate", "--run", str(tmp_path / "run.trec"),
                                   "--qrels", str(scifact_mini_dir / "qrels" / "test.tsv")])
    assert code == 130
    assert out == ""
    assert "Traceback" not in err


# ---------------------------------------------------------------------------------------------- console script
def _console_script() -> Path:
    found = shutil.which("uhdsearch")
    path = Path(found) if found else Path(sys.executable).parent / "uhdsearch"
    assert path.is_file(), f"console script not installed at {path}"
    return path


def test_console_script_help_and_error(tmp_path: Path, scifact_mini_dir: Path) -> None:
    script = str(_console_script())
    done = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for command in ("train", "index", "search", "evaluate", "quickstart"):
        assert command in done.stdout

    run_path = tmp_path / "bad.trec"
    run_path.write_text("q1 Q0 d1 1\n")
    done = subprocess.run([script, "evaluate", "--run", str(run_path),
                           "--qrels", str(scifact_mini_dir / "qrels" / "test.tsv")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {run_path}:1: expected 6 columns"), lines[0]


# ---------------------------------------------------------------------------------------------- bugs stay bugs
def test_no_arguments_prints_the_usage(capsys) -> None:
    code, out, err = _run(capsys, [])
    assert code == 2
    assert "Usage" in out + err and "search" in out + err
    assert "error:" not in err


def test_a_bug_propagates_with_its_traceback(tmp_path: Path, scifact_mini_dir: Path, monkeypatch) -> None:
    import uhdsearch.evaluation.metrics

    run_path = tmp_path / "run.trec"
    run_path.write_text("0 Q0 4983 1 2.5 uhd\n")
    argv = ["evaluate", "--run", str(run_path), "--qrels", str(scifact_mini_dir / "qrels" / "test.tsv")]

    def broken(*args, **kwargs):
        return {}["nDCG@10"]

    monkeypatch.setattr(uhdsearch.evaluation.metrics, "evaluate", broken)
    with pytest.raises(KeyError):
        main(argv)

    def numpy_fails(*args, **kwargs):  # a ValueError from inside a library is a bug too, not a user error
        return np.zeros(2).reshape(3)

    monkeypatch.setattr(uhdsearch.evaluation.metrics, "evaluate", numpy_fails)
    with pytest.raises(ValueError, match="reshape"):
        main(argv)


def test_user_errors_are_the_projects_own_file_errors_and_usage_errors(capsys) -> None:
    from uhdsearch.cli.main import _is_user_error
    from uhdsearch.errors import DataFormatError, UsageError

    assert _is_user_error(DataFormatError("x")) and _is_user_error(UsageError("x"))
    assert _is_user_error(FileNotFoundError("x")) and _is_user_error(PermissionError("x"))
    assert not _is_user_error(RuntimeError("x")) and not _is_user_error(KeyError("x"))
    assert not _is_user_error(ValueError("raised outside any traceback"))
