"""Issue 37's tracebacks, each now one error line naming the path, field or option, exit 2, through the real CLI."""
from __future__ import annotations

import math
import shutil

import pytest
import typer

from tests.hardening.fuzz_mutations import reseal
from tests.hardening.hardening_helpers import call, error_line


@pytest.mark.parametrize("command", ["train", "index"])
def test_data_that_is_a_symlink_loop(tmp_path, model_dir, command):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    extra = ["--model", str(model_dir)] if command == "index" else []
    code, out, err = call([command, "--data", str(tmp_path / "a"), "--out", str(tmp_path / "out"), *extra])
    assert code == 2 and out == ""
    line = error_line(err)
    assert line.startswith(f"error: --data {tmp_path / 'a'} cannot be resolved: ") and "loop" in line.lower()
    assert not (tmp_path / "out").exists()


def test_qrels_relevance_beyond_32_bits(tmp_path):
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 run\n")
    (tmp_path / "qrels.txt").write_text(f"q1\t0\td1\t{10 ** 30}\n")
    code, out, err = call(["evaluate", "--run", str(tmp_path / "run.trec"), "--qrels", str(tmp_path / "qrels.txt")])
    assert code == 2 and out == ""
    assert error_line(err) == (f"error: {tmp_path / 'qrels.txt'}:1: relevance {10 ** 30} is outside the 32-bit "
                               "integers that trec_eval reads (-2147483648..2147483647)")


def test_relevance_at_the_32_bit_edge_still_evaluates(tmp_path):
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 run\n")
    (tmp_path / "qrels.txt").write_text(f"q1\t0\td1\t{2 ** 31 - 1}\n")
    code, out, err = call(["evaluate", "--run", str(tmp_path / "run.trec"), "--qrels", str(tmp_path / "qrels.txt"),
                           "--measures", "RR@10"])
    assert code == 0, err
    assert out.strip() == '{"RR@10": 1.0}'


def test_doc_ids_with_invalid_utf8_and_manifest_recomputed(tmp_path, index_dir, model_dir):
    damaged = tmp_path / "index"
    shutil.copytree(index_dir, damaged)
    lines = (damaged / "doc_ids.txt").read_bytes().split(b"\n")
    lines[6] = lines[6][:2] + b"\xc3" + lines[6][2:]
    (damaged / "doc_ids.txt").write_bytes(b"\n".join(lines))
    reseal(damaged)
    code, out, err = call(["search", "--model", str(model_dir), "--index", str(damaged), "--query", "bone density"])
    assert code == 2 and out == ""
    assert error_line(err) == (f"error: {damaged / 'doc_ids.txt'}:7: byte 0xc3 is not valid UTF-8; the index is "
                               "corrupted")


@pytest.mark.parametrize("option, value", [("--learning-rate", "nan"), ("--learning-rate", "inf"),
                                           ("--epochs", "-inf"), ("--max-minutes", "NaN")])
def test_train_float_options_refuse_nan_and_inf_at_parse_time(tmp_path, scifact_mini_dir, option, value):
    out = tmp_path / "model"
    code, stdout, err = call(["train", "--data", str(scifact_mini_dir), "--out", str(out), option, value])
    assert code == 2 and stdout == ""
    assert error_line(err) == (f"error: Invalid value for '{option}': {float(value)!r} is not a finite number "
                               "(see --help)")
    assert not out.exists()


def test_every_float_option_of_every_command_refuses_nan_and_inf():
    from uhdsearch.cli.floats import finite_floats
    from uhdsearch.cli.main import app

    command = finite_floats(typer.main.get_command(app))
    checked = []

    def visit(cmd, path):
        for param in cmd.params:
            if getattr(getattr(param, "type_descriptor", None), "annotation", None) is float:
                for bad in (math.nan, math.inf, -math.inf):
                    with pytest.raises(Exception, match="is not a finite number"):
                        param.callback(None, param, bad)
                assert param.callback(None, param, 0.5) == 0.5
                checked.append(f"{path} --{param.name}")
        for name, sub in getattr(cmd, "commands", {}).items():
            visit(sub, f"{path} {name}")

    visit(command, "uhdsearch")
    assert {"uhdsearch train --learning_rate", "uhdsearch serve --queue_timeout", "uhdsearch lookup --vote"} <= set(
        checked), checked
