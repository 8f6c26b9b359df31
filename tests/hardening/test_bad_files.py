"""Classes 2 and 3 of issue 17: every reader names the file (and line) for bad bytes, deep JSON, wrong types, and
reads gzip-compressed input; damaged model files are ModelFormatError naming the file."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from tests.hardening.hardening_helpers import call, digest, error_line
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.errors import DataFormatError, ModelFormatError, UsageError
from uhdsearch.evaluation.datasets import load_beir, load_corpus, load_queries
from uhdsearch.evaluation.qrels import load_qrels
from uhdsearch.types import Query, load_run

GOOD_LINE = {
    "corpus": b'{"_id": "d1", "title": "", "text": "vitamin d"}\n',
    "queries": b'{"_id": "q1", "text": "vitamin"}\n',
    "qrels": b"q1\td1\t1\n",
    "run": b"q1 Q0 d1 1 2.5 uhd\n",
}
READERS = {"corpus": load_corpus, "queries": load_queries, "qrels": load_qrels, "run": load_run}
BAD_BYTES = {
    "invalid UTF-8": (b"caf\xe9 \xff\n", r":2: not valid UTF-8 \(byte 0xe9 at byte 4 of the line\)"),
    "binary garbage": (b"\x00\x01\x02\x89PNG\x00\n", r":2: NUL bytes: binary data"),
}


@pytest.mark.parametrize("kind", READERS)
@pytest.mark.parametrize("bad", BAD_BYTES)
def test_bad_bytes_on_line_two_name_file_and_line(tmp_path, kind, bad):
    path = tmp_path / f"{kind}.txt"
    payload, message = BAD_BYTES[bad]
    path.write_bytes(GOOD_LINE[kind] + payload)
    with pytest.raises(DataFormatError, match=re_path(path) + message):
        READERS[kind](path)


@pytest.mark.parametrize("kind", READERS)
def test_utf16_and_other_compressions_are_named(tmp_path, kind):
    utf16 = tmp_path / f"{kind}.utf16"
    utf16.write_bytes(GOOD_LINE[kind].decode().encode("utf-16"))
    with pytest.raises(DataFormatError, match=re_path(utf16) + r": UTF-16 text; uhdsearch reads UTF-8"):
        READERS[kind](utf16)
    xz = tmp_path / f"{kind}.xz"
    xz.write_bytes(b"\xfd7zXZ\x00" + b"\x01" * 40)
    with pytest.raises(DataFormatError, match=re_path(xz) + r": xz-compressed; uhdsearch reads plain or gzip"):
        READERS[kind](xz)


@pytest.mark.parametrize("kind", READERS)
def test_gzip_input_reads_like_plain_and_damaged_gzip_names_the_file(tmp_path, kind):
    plain, packed = tmp_path / f"{kind}.txt", tmp_path / f"{kind}.txt.gz"
    plain.write_bytes(GOOD_LINE[kind] * 1 + GOOD_LINE[kind].replace(b"1", b"2"))
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert _as_comparable(READERS[kind](packed)) == _as_comparable(READERS[kind](plain))
    cut = tmp_path / f"{kind}.cut.gz"
    cut.write_bytes(packed.read_bytes()[:-12])
    with pytest.raises(DataFormatError, match=re_path(cut) + r":\d+: damaged gzip data"):
        READERS[kind](cut)


def _as_comparable(loaded):
    return loaded.as_dict() if hasattr(loaded, "as_dict") else loaded


def test_load_beir_reads_a_gzip_compressed_collection(tmp_path, scifact_mini_dir):
    packed = tmp_path / "scifact-gz"
    (packed / "qrels").mkdir(parents=True)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        (packed / f"{name}.gz").write_bytes(gzip.compress((scifact_mini_dir / name).read_bytes()))
    plain, gz = load_beir(scifact_mini_dir), load_beir(packed)
    assert gz.corpus == plain.corpus and gz.queries == plain.queries and gz.qrels == plain.qrels
    assert len(gz.corpus) == 400


@pytest.mark.parametrize("kind", ["corpus", "queries"])
def test_deeply_nested_json_line_is_a_data_format_error(tmp_path, kind):
    path = tmp_path / f"{kind}.jsonl"
    path.write_bytes(GOOD_LINE[kind] + b"[" * 100_000 + b"]" * 100_000 + b"\n")
    with pytest.raises(DataFormatError, match=re_path(path) + r":2: JSON nested too deeply"):
        READERS[kind](path)


@pytest.mark.parametrize(("text", "message"), [
    ("null", r":2: 'text' must be a string, got NoneType"),
    ("17", r":2: 'text' must be a string, got int"),
    ('"caf\\ud800e"', r":2: 'text' holds a lone surrogate '\\ud800' at character 4: not valid Unicode text"),
])
def test_query_text_that_is_not_text_names_file_and_line(tmp_path, text, message):
    path = tmp_path / "queries.jsonl"
    path.write_bytes(GOOD_LINE["queries"] + f'{{"_id": "q2", "text": {text}}}\n'.encode())
    with pytest.raises(DataFormatError, match=re_path(path) + message):
        load_queries(path)


@pytest.mark.parametrize(("queries", "error", "message"), [
    ([Query("q1", None)], TypeError, r"query 'q1': text must be a string, got NoneType"),
    ({"q1": 42}, TypeError, r"query 'q1': text must be a string, got int"),
    ([Query("q7", "a\udc80b")], UsageError, r"query 'q7': text holds a lone surrogate '\\udc80' at character 2"),
])
def test_api_queries_of_the_wrong_kind_are_refused(tiny_encoder_session, index_dir, queries, error, message):
    from uhdsearch.index.inverted import InvertedIndex
    from uhdsearch.search.searcher import Searcher

    searcher = Searcher(tiny_encoder_session, InvertedIndex.load(index_dir))
    with pytest.raises(error, match=message):
        searcher.search(queries, k=5)


def test_cli_bad_run_qrels_and_queries_exit_2_naming_file_and_line(tmp_path, model_dir, index_dir, scifact_mini_dir):
    run = tmp_path / "run.trec"
    run.write_bytes(GOOD_LINE["run"] + b"q1 Q0 d\xff 2 1.0 uhd\n")
    code, out, err = call(["evaluate", "--run", str(run), "--qrels", str(scifact_mini_dir / "qrels/test.tsv")])
    assert code == 2 and out == ""
    assert error_line(err) == f"error: {run}:2: not valid UTF-8 (byte 0xff at byte 8 of the line); uhdsearch reads UTF-8 text"

    qrels = tmp_path / "qrels.tsv"
    qrels.write_bytes(GOOD_LINE["qrels"].decode().encode("utf-16"))
    good_run = tmp_path / "good.trec"
    good_run.write_bytes(GOOD_LINE["run"])
    code, _, err = call(["evaluate", "--run", str(good_run), "--qrels", str(qrels)])
    assert code == 2 and f"error: {qrels}: UTF-16 text" in error_line(err)

    queries = tmp_path / "queries.jsonl"
    queries.write_bytes(GOOD_LINE["queries"] + b'{"_id": "q2", "text": null}\n')
    code, out, err = call(["search", "--model", str(model_dir), "--index", str(index_dir), "--queries", str(queries)])
    assert code == 2 and out == ""
    assert error_line(err) == f"error: {queries}:2: 'text' must be a string, got NoneType"


def test_cli_evaluates_gzip_run_and_qrels_like_plain(tmp_path, scifact_mini_dir):
    run = tmp_path / "run.trec"
    run.write_text("".join(f"{q} Q0 {d} 1 1.0 x\n" for q, judged in
                           load_qrels(scifact_mini_dir / "qrels/test.tsv").items() for d in list(judged)[:1]))
    (tmp_path / "run.trec.gz").write_bytes(gzip.compress(run.read_bytes()))
    (tmp_path / "qrels.tsv.gz").write_bytes(gzip.compress((scifact_mini_dir / "qrels/test.tsv").read_bytes()))
    plain = call(["evaluate", "--run", str(run), "--qrels", str(scifact_mini_dir / "qrels/test.tsv")])
    packed = call(["evaluate", "--run", str(tmp_path / "run.trec.gz"), "--qrels", str(tmp_path / "qrels.tsv.gz")])
    assert plain[0] == packed[0] == 0
    assert json.loads(packed[1]) == json.loads(plain[1]) and json.loads(plain[1])["R@100"] > 0.5


# ------------------------------------------------------------------ model files
def _copy(model_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    return copy


@pytest.mark.parametrize("name", ["model.safetensors", "wta.safetensors"])
def test_truncated_safetensors_is_model_format_error_naming_the_file(model_dir, tmp_path, index_dir, name):
    model = _copy(model_dir, tmp_path)
    data = (model / name).read_bytes()
    (model / name).write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelFormatError, match=re_path(model / name) + r" is not a readable safetensors file"):
        UHDEncoder.from_pretrained(model)
    before = digest(index_dir)
    code, out, err = call(["search", "--model", str(model), "--index", str(index_dir), "--query", "vitamin"])
    assert code == 2 and out == ""
    assert error_line(err).startswith(f"error: {model / name} is not a readable safetensors file (truncated or corrupt)")
    assert digest(index_dir) == before


@pytest.mark.parametrize("name", ["uhd_config.json", "config.json", "tokenizer_config.json"])
def test_deeply_nested_model_json_is_model_format_error(model_dir, tmp_path, name):
    model = _copy(model_dir, tmp_path)
    (model / name).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelFormatError, match=re_path(model / name) + r" is not valid JSON: nested too deeply"):
        UHDEncoder.from_pretrained(model)


def test_garbage_model_weights_name_the_file(model_dir, tmp_path):
    model = _copy(model_dir, tmp_path)
    (model / "model.safetensors").write_bytes(b"\x00garbage" * 100)
    with pytest.raises(ModelFormatError, match=re_path(model / "model.safetensors")):
        UHDEncoder.from_pretrained(model)


def test_nan_in_wta_weights_is_refused_at_load(model_dir, tmp_path):
    model = _copy(model_dir, tmp_path)
    tensors = load_file(str(model / "wta.safetensors"))
    key = next(k for k in tensors if k.endswith(".weight"))
    tensors[key][0, 0] = float("nan")
    save_file(tensors, str(model / "wta.safetensors"))
    with pytest.raises(ModelFormatError, match=re_path(model / "wta.safetensors") + f": {key} holds NaN"):
        UHDEncoder.from_pretrained(model)


def test_inf_in_backbone_weights_is_refused_at_load(model_dir, tmp_path, index_dir):
    model = _copy(model_dir, tmp_path)
    tensors = load_file(str(model / "model.safetensors"))
    key = sorted(tensors)[0]
    tensors[key].view(-1)[3] = float("inf")
    save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})
    code, _, err = call(["search", "--model", str(model), "--index", str(index_dir), "--query", "vitamin"])
    assert code == 2
    assert "holds NaN or infinite values; the model is corrupted" in error_line(err)
    assert str(model) in error_line(err)


def re_path(path: Path) -> str:
    import re

    return re.escape(str(path))


def test_surrogate_in_query_text_of_the_cli(model_dir, index_dir):
    code, out, err = call(["search", "--model", str(model_dir), "--index", str(index_dir), "--query", "a\udc80b"])
    assert code == 2 and out == ""
    assert error_line(err) == "error: query 'q1': text holds a lone surrogate '\\udc80' at character 2: not valid Unicode text"


def test_repeated_surrogate_free_queries_still_search(tiny_encoder_session, index_dir):
    from uhdsearch.index.inverted import InvertedIndex
    from uhdsearch.search.searcher import Searcher

    run = Searcher(tiny_encoder_session, InvertedIndex.load(index_dir)).search([Query("q1", "café vitamin ☃")], k=3)
    assert len(run["q1"]) == 3
