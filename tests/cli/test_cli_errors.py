"""The uhdsearch command line's refusals (search options, model and index files, overwriting, evaluate), --debug,
the real console script, and bugs that must stay bugs."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cli.cli_support import TRAIN_OPTIONS, Trained, assert_usage_error, assert_user_error, run_cli, search_args
from uhdsearch.cli.main import main


# ---------------------------------------------------------------------------------------------- search options
@pytest.mark.parametrize("k", ["0", "-1"])
def test_k_must_be_positive(trained: Trained, k: str, capsys) -> None:
    code, out, err = run_cli(capsys, search_args(trained, "--query", "cancer", "--k", k))
    assert_user_error(code, out, err, f"--k {k}", "positive integer")


def test_k_must_be_an_integer(trained: Trained, capsys) -> None:
    code, out, err = run_cli(capsys, search_args(trained, "--query", "cancer", "--k", "ten"))
    assert_usage_error(code, out, err, "Invalid value for '--k'", "valid integer")


@pytest.mark.parametrize("extra", [[], ["--query", "cancer", "--queries", "queries.jsonl"]], ids=["neither", "both"])
def test_exactly_one_of_queries_and_query(trained: Trained, extra: list[str], capsys) -> None:
    code, out, err = run_cli(capsys, search_args(trained, *extra))
    assert_user_error(code, out, err, "exactly one of --queries FILE or --query TEXT")


def test_unknown_scoring(trained: Trained, capsys) -> None:
    code, out, err = run_cli(capsys, search_args(trained, "--query", "cancer", "--scoring", "bogus"))
    assert_user_error(code, out, err, "--scoring 'bogus'", "binary or weighted")


def test_weighted_scoring_needs_a_weighted_index(trained: Trained, capsys) -> None:
    code, out, err = run_cli(capsys, search_args(trained, "--query", "cancer", "--scoring", "weighted"))
    assert_user_error(code, out, err, "weighted index")


def test_unknown_variant(trained: Trained, scifact_mini_dir: Path, tmp_path: Path, capsys) -> None:
    code, out, err = run_cli(capsys, ["index", "--model", str(trained.model), "--data", str(scifact_mini_dir),
                                   "--out", str(tmp_path / "idx"), "--variant", "bogus"])
    assert_user_error(code, out, err, "--variant 'bogus'", "binary, weighted or planes")
    assert not (tmp_path / "idx").exists()


def test_unknown_command_and_option_are_usage_errors(capsys) -> None:
    code, out, err = run_cli(capsys, ["serach"])
    assert_usage_error(code, out, err, "serach")
    code, out, err = run_cli(capsys, ["evaluate", "--run", "r", "--qrels", "q", "--depth", "3"])
    assert_usage_error(code, out, err, "--depth")


# ---------------------------------------------------------------------------------------------- model and index files
def test_model_dir_that_is_not_a_model(tmp_path: Path, scifact_mini_dir: Path, trained: Trained, capsys) -> None:
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    (not_a_model / "notes.txt").write_text("hello")
    code, out, err = run_cli(capsys, ["index", "--model", str(not_a_model), "--data", str(scifact_mini_dir),
                                   "--out", str(tmp_path / "idx")])
    assert_user_error(code, out, err, f"not a uhdsearch model: {not_a_model} has no uhd_config.json")
    code, out, err = run_cli(capsys, ["search", "--model", str(not_a_model), "--index", str(trained.binary),
                                   "--query", "cancer"])
    assert_user_error(code, out, err, "not a uhdsearch model")


def test_missing_model_dir(tmp_path: Path, trained: Trained, capsys) -> None:
    code, out, err = run_cli(capsys, ["search", "--model", str(tmp_path / "gone"), "--index", str(trained.binary),
                                   "--query", "cancer"])
    assert_user_error(code, out, err, "no model directory", str(tmp_path / "gone"))


def test_index_dir_that_is_not_an_index(trained: Trained, tmp_path: Path, capsys) -> None:
    code, out, err = run_cli(capsys, search_args(trained, "--query", "cancer", index=tmp_path))
    assert_user_error(code, out, err, f"{tmp_path} holds no index: no index_meta.json")


def test_missing_index_dir(trained: Trained, tmp_path: Path, capsys) -> None:
    code, out, err = run_cli(capsys, search_args(trained, "--query", "cancer", index=tmp_path / "gone"))
    assert_user_error(code, out, err, "no index directory", str(tmp_path / "gone"))


def test_truncated_index_file(trained: Trained, tmp_path: Path, capsys) -> None:
    index = tmp_path / "index"
    shutil.copytree(trained.binary, index)
    docs = max(index.glob("bucket_0.*.npy"), key=lambda f: f.stat().st_size)  # the postings, whatever the layout
    data = docs.read_bytes()
    docs.write_bytes(data[:-100])
    code, out, err = run_cli(capsys, search_args(trained, "--query", "cancer", index=index))
    assert_user_error(code, out, err, str(docs), f"{len(data) - 100} bytes", f"manifest says {len(data)}",
                       "truncated")


def test_altered_index_file_fails_its_checksum(trained: Trained, tmp_path: Path, capsys) -> None:
    index = tmp_path / "index"
    shutil.copytree(trained.binary, index)
    docs = max(index.glob("bucket_0.*.npy"), key=lambda f: f.stat().st_size)  # the postings, whatever the layout
    data = bytearray(docs.read_bytes())
    data[-1] ^= 0xFF  # same size, other content
    docs.write_bytes(bytes(data))
    code, out, err = run_cli(capsys, search_args(trained, "--query", "cancer", index=index))
    assert_user_error(code, out, err, str(docs), "checksum")


def test_foreign_index(trained: Trained, tmp_path: Path, capsys) -> None:
    index = tmp_path / "index"
    shutil.copytree(trained.binary, index)
    meta = json.loads((index / "index_meta.json").read_text())
    meta["format"] = "faiss-flat"
    (index / "index_meta.json").write_text(json.dumps(meta))
    code, out, err = run_cli(capsys, search_args(trained, "--query", "cancer", index=index))
    assert_user_error(code, out, err, "'faiss-flat'", "'uhd-index'")


def test_newer_index_format_version(trained: Trained, tmp_path: Path, capsys) -> None:
    index = tmp_path / "index"
    shutil.copytree(trained.binary, index)
    meta = json.loads((index / "index_meta.json").read_text())
    meta["format_version"] = 99
    (index / "index_meta.json").write_text(json.dumps(meta))
    code, out, err = run_cli(capsys, search_args(trained, "--query", "cancer", index=index))
    assert_user_error(code, out, err, "format_version 99", "upgrade uhdsearch")


def test_dimension_mismatch(trained: Trained, tiny_encoder_session, tmp_path: Path, capsys) -> None:
    assert tiny_encoder_session.config.dim == 2048
    other_model = tmp_path / "model-2048"
    tiny_encoder_session.save_pretrained(other_model)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n" for i, text in
                              enumerate(["vitamin d and bone", "cancer cells divide", "protein folding"])))
    code, out, err = run_cli(capsys, ["index", "--model", str(other_model), "--data", str(corpus),
                                   "--out", str(tmp_path / "index-2048")])
    assert code == 0, err
    assert json.loads(out)["n_documents"] == 3
    code, out, err = run_cli(capsys, search_args(trained, "--query", "cancer", index=tmp_path / "index-2048"))
    assert_user_error(code, out, err, "dim=1024", "dim=2048")


# ---------------------------------------------------------------------------------------------- overwriting
def test_train_refuses_to_overwrite(tmp_path: Path, scifact_mini_dir: Path, tiny_backbone_dir: Path, capsys) -> None:
    out_dir = tmp_path / "model"
    out_dir.mkdir()
    (out_dir / "keep.txt").write_text("precious")
    code, out, err = run_cli(capsys, ["train", "--data", str(scifact_mini_dir), "--out", str(out_dir),
                                   "--backbone", str(tiny_backbone_dir), *TRAIN_OPTIONS])
    assert_user_error(code, out, err, str(out_dir), "--overwrite")
    assert [p.name for p in out_dir.iterdir()] == ["keep.txt"]
    assert (out_dir / "keep.txt").read_text() == "precious"


def test_index_refuses_to_overwrite(trained: Trained, scifact_mini_dir: Path, tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / "index"
    out_dir.mkdir()
    (out_dir / "keep.txt").write_text("precious")
    code, out, err = run_cli(capsys, ["index", "--model", str(trained.model), "--data", str(scifact_mini_dir),
                                   "--out", str(out_dir)])
    assert_user_error(code, out, err, str(out_dir), "--overwrite")
    assert [p.name for p in out_dir.iterdir()] == ["keep.txt"]
    assert (out_dir / "keep.txt").read_text() == "precious"


# ---------------------------------------------------------------------------------------------- evaluate
def test_evaluate_malformed_run(tmp_path: Path, scifact_mini_dir: Path, capsys) -> None:
    run_path = tmp_path / "bad.trec"
    run_path.write_text("0 Q0 4983 1 2.5 uhd\n0 Q0 5836 two 1.5 uhd\n")
    code, out, err = run_cli(capsys, ["evaluate", "--run", str(run_path),
                                   "--qrels", str(scifact_mini_dir / "qrels" / "test.tsv")])
    assert_user_error(code, out, err, f"{run_path}:2:", "rank must be an integer", "'two'")


def test_evaluate_unknown_measure(tmp_path: Path, scifact_mini_dir: Path, capsys) -> None:
    run_path = tmp_path / "run.trec"
    run_path.write_text("0 Q0 4983 1 2.5 uhd\n")
    code, out, err = run_cli(capsys, ["evaluate", "--run", str(run_path), "--measures", "nDCG@10,Bogus@3",
                                   "--qrels", str(scifact_mini_dir / "qrels" / "test.tsv")])
    assert_user_error(code, out, err, "Bogus@3")


def test_evaluate_missing_qrels(tmp_path: Path, capsys) -> None:
    run_path = tmp_path / "run.trec"
    run_path.write_text("0 Q0 4983 1 2.5 uhd\n")
    code, out, err = run_cli(capsys, ["evaluate", "--run", str(run_path), "--qrels", str(tmp_path / "none.tsv")])
    assert_user_error(code, out, err, "qrels file not found", str(tmp_path / "none.tsv"))


# ---------------------------------------------------------------------------------------------- --debug
def test_debug_reraises(trained: Trained, capsys) -> None:
    with pytest.raises(ValueError, match="--k 0 must be a positive integer"):
        main(["--debug", *search_args(trained, "--query", "cancer", "--k", "0")])
    # the flag does not stick: the next call without it reports the error as one line again
    code, out, err = run_cli(capsys, search_args(trained, "--query", "cancer", "--k", "0"))
    assert_user_error(code, out, err, "--k 0")


def test_interrupt_exits_130(tmp_path: Path, scifact_mini_dir: Path, monkeypatch, capsys) -> None:
    import uhdsearch.types

    def interrupted(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(uhdsearch.types, "load_run", interrupted)  # stands in for Ctrl-C mid-command
    code, out, err = run_cli(capsys, ["evaluate", "--run", str(tmp_path / "run.trec"),
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
    code, out, err = run_cli(capsys, [])
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
