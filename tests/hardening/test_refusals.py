"""Classes 4 to 7 of issue 17: silent wrong results refused, clear messages, refusals before anything is written,
read-only indexes. Each refusal leaves earlier outputs byte for byte as they were."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from tests.child_process import python_path
from tests.hardening.hardening_helpers import call, digest, error_line
from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.errors import DataFormatError, IndexFormatError, IndexLockedError, ModelFormatError, UsageError
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex
from uhdsearch.io import atomic_directory
from uhdsearch.search.searcher import Searcher
from uhdsearch.types import Document, Query


# ------------------------------------------------------------------ 4. silent wrong results
@pytest.mark.parametrize("text", ["nan,1", "1,inf", "-inf,1"])
def test_cli_refuses_non_finite_bucket_weights(tmp_path, scifact_mini_dir, text):
    out = tmp_path / "model"
    code, stdout, err = call(["train", "--data", str(scifact_mini_dir), "--out", str(out), "--bucket-layers", "1,2",
                              "--bucket-weights", text])
    assert code == 2 and stdout == ""
    assert error_line(err) == f"error: --bucket-weights {text!r}: every weight must be a finite number (not NaN or inf)"
    assert not out.exists()


@pytest.mark.parametrize("weights", [(math.nan, 1.0), (1.0, math.inf)])
def test_api_refuses_non_finite_bucket_weights(tiny_encoder_session, index_dir, model_dir, weights):
    with pytest.raises(UsageError, match=r"bucket_weights=\[.*\] must be finite numbers"):
        EncoderConfig(dim=64, wta_k=4, query_k=None, bucket_layers=(1, 2), bucket_weights=weights)
    with pytest.raises(UsageError, match=r"bucket_weights=\[.*\] must be finite numbers"):
        Searcher(tiny_encoder_session, InvertedIndex.load(index_dir), bucket_weights=weights)
    with pytest.raises(UsageError, match=r"must be finite numbers"):
        UHDEncoder.from_pretrained(model_dir, bucket_weights=weights)


def test_duplicate_query_ids_are_an_error(tiny_encoder_session, index_dir):
    from uhdsearch.baselines.bm25 import BM25Retriever

    searcher = Searcher(tiny_encoder_session, InvertedIndex.load(index_dir))
    queries = [Query("q1", "vitamin d"), Query("q2", "bone"), Query("q1", "fracture risk")]
    message = r"query_id 'q1' appears twice \(items 0 and 2\); query ids must be unique"
    with pytest.raises(UsageError, match=message):
        searcher.search(queries, k=5)
    bm25 = BM25Retriever.build([Document("d1", "vitamin d"), Document("d2", "bone fracture")])
    with pytest.raises(UsageError, match=message):
        bm25.search(queries, k=5)
    assert bm25.search(queries[:2], k=5).doc_ids("q1")[0] == "d1"


def test_duplicate_query_ids_in_the_cli_name_file_and_lines(tmp_path, model_dir, index_dir):
    queries = tmp_path / "queries.jsonl"
    queries.write_text('{"_id": "q1", "text": "a"}\n{"_id": "q2", "text": "b"}\n{"_id": "q1", "text": "c"}\n')
    code, out, err = call(["search", "--model", str(model_dir), "--index", str(index_dir), "--queries", str(queries)])
    assert code == 2 and out == ""
    assert error_line(err) == (f"error: {queries}:3: duplicate query_id 'q1' (first on line 1); query ids must be "
                               "unique, or pass on_duplicate='first' or 'last' to keep one of each "
                               "(CLI: --duplicate-queries keep-first|keep-last)")


def test_model_without_its_tokenizer_is_refused(model_dir, index_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    (model / "tokenizer.json").unlink()
    with pytest.raises(ModelFormatError, match=re.escape(f"{model} has no tokenizer.json: a model directory must "
                                                         "hold its own tokenizer")):
        UHDEncoder.from_pretrained(model)
    code, out, err = call(["search", "--model", str(model), "--index", str(index_dir), "--query", "vitamin"])
    assert code == 2 and out == "" and "has no tokenizer.json" in error_line(err)


# ------------------------------------------------------------------ 5. clear messages
@pytest.mark.parametrize("batch_size", ["0", "-3"])
def test_cli_batch_size_below_one(tmp_path, model_dir, scifact_mini_dir, batch_size):
    out = tmp_path / "deep" / "idx"
    code, _, err = call(["index", "--model", str(model_dir), "--data", str(scifact_mini_dir), "--out", str(out),
                         "--batch-size", batch_size])
    assert code == 2
    assert error_line(err) == f"error: --batch-size {batch_size} must be a positive integer"
    assert not (tmp_path / "deep").exists()


@pytest.mark.parametrize("batch_size", [0, -1])
def test_api_batch_size_below_one(tiny_encoder_session, tmp_path, batch_size):
    with pytest.raises(UsageError, match=rf"batch_size={batch_size} must be a positive integer"):
        tiny_encoder_session.encode_document(["vitamin d"], batch_size=batch_size)
    with pytest.raises(UsageError, match=rf"batch_size={batch_size} must be a positive integer"):
        BinaryIndex.build(tiny_encoder_session, [Document("d1", "x")], tmp_path / "a" / "idx", batch_size=batch_size,
                          show_progress=False)
    assert not (tmp_path / "a").exists()


def test_no_arguments_prints_the_usage():
    code, out, err = call([])
    assert code == 2
    assert "Usage:" in out + err and "index" in out + err and "error:" not in out + err


def test_disk_full_names_the_path_and_leaves_nothing(small_mount, mini_encoding, mini_data, model_dir,
                                                     scifact_mini_dir):
    target = small_mount / "idx"
    with pytest.raises(OSError, match=re.escape(f"disk full: no space left on the device while writing {target}")) as e:
        BinaryIndex.from_encoding(mini_encoding, list(mini_data.corpus), target)
    assert e.value.errno == 28
    assert list(small_mount.iterdir()) == []
    code, _, err = call(["index", "--model", str(model_dir), "--data", str(scifact_mini_dir),
                         "--out", str(small_mount / "cli" / "idx")])
    assert code == 2
    assert error_line(err) == (f"error: [Errno 28] disk full: no space left on the device while writing "
                               f"{small_mount / 'cli' / 'idx'}; free some space or write elsewhere")
    assert list(small_mount.iterdir()) == []


# ------------------------------------------------------------------ 6. refused before anything is written
@pytest.mark.parametrize(("argv", "message"), [
    (["index", "--model", "{model}", "--data", "{data}", "--out", "{data}/idx", "--overwrite"],
     "--out {data}/idx lies inside --data {data}"),
    (["index", "--model", "{model}", "--data", "{data}", "--out", "{model}", "--overwrite"],
     "--out {model} is --model {model}"),
    (["index", "--model", "{model}", "--data", "{data}/corpus.jsonl", "--out", "{data}", "--overwrite"],
     "--out {data} holds --data {data}/corpus.jsonl"),
    (["train", "--data", "{data}", "--out", "{data}", "--overwrite"], "--out {data} is --data {data}"),
    (["quickstart", "--data", "{data}", "--out", "{data}/..", "--overwrite"], "--out {data}/.. holds --data {data}"),
])
def test_output_on_an_input_is_refused_even_with_overwrite(tmp_path, model_dir, scifact_mini_dir, argv, message):
    data, model = tmp_path / "data", tmp_path / "model"
    shutil.copytree(scifact_mini_dir, data)
    shutil.copytree(model_dir, model)
    before = digest(tmp_path)
    fill = {"model": model, "data": data}
    code, out, err = call([a.format(**fill) for a in argv])
    assert code == 2 and out == ""
    assert error_line(err) == f"error: {message.format(**fill)}; write the output elsewhere"
    assert digest(tmp_path) == before


def test_whitespace_doc_ids_are_refused_before_encoding(tmp_path, tiny_encoder_session, model_dir):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a"}\n{"_id": "d 2", "text": "b"}\n')
    code, _, err = call(["index", "--model", str(model_dir), "--data", str(corpus), "--out", str(tmp_path / "idx")])
    assert code == 2
    assert error_line(err) == (f"error: {corpus}:2: '_id' 'd 2' is empty or contains whitespace; TREC runs and "
                               "qrels cannot hold it")
    with pytest.raises(DataFormatError, match=r"doc_id 'd\\t2' \(document 1\) is empty or contains whitespace"):
        BinaryIndex.build(tiny_encoder_session, [Document("d1", "a"), Document("d\t2", "b")], tmp_path / "api")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl"]


def test_failed_write_removes_its_temporary_and_the_parents_it_made(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_directory(tmp_path / "a" / "b" / "out") as tmp:
            (tmp / "half.npy").write_bytes(b"x" * 100)
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_killed_segmented_create_is_recreatable(tmp_path):
    from uhdsearch.index.live.segments import SegmentedIndex

    path = tmp_path / "live"
    script = (
        "import os, signal, sys\n"
        "real = os.replace\n"
        "def die(*a, **k):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "os.replace = die\n"
        "from uhdsearch.index.live.segments import SegmentedIndex\n"
        f"SegmentedIndex.create({str(path)!r}, 'binary', dim=64, n_buckets=1)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": python_path()})
    assert proc.returncode == -signal.SIGKILL
    assert any(p.name.startswith(".commit_1.json.tmp-") for p in path.iterdir())  # the kill's leftover
    with pytest.raises(IndexFormatError, match="create was interrupted before the first commit; call "
                                               "SegmentedIndex.create on it again"):
        SegmentedIndex.open(path)
    index = SegmentedIndex.create(path, "binary", dim=64, n_buckets=1)
    index.close()
    assert SegmentedIndex.open(path).generation == 1
    assert sorted(p.name for p in path.iterdir()) == ["commit_1.json", "write.lock"]


# ------------------------------------------------------------------ 7. read-only indexes
def test_read_only_indexes_open_and_search(roomy_mount, tiny_encoder_session, model_dir):
    small_mount = roomy_mount
    import numpy as np

    from uhdsearch.index.live.segments import SegmentedIndex

    docs = [Document(f"d{i}", text) for i, text in enumerate(["vitamin d bone", "fracture risk", "sleep"])]
    BinaryIndex.build(tiny_encoder_session, docs, small_mount / "static", show_progress=False)
    live = SegmentedIndex.create(small_mount / "live", "binary", tiny_encoder_session.config.dim,
                                 len(tiny_encoder_session.layers))
    live.add(tiny_encoder_session.encode_document([d.full_text for d in docs], show_progress=False),
             [d.doc_id for d in docs])
    live.commit()
    live.close()
    (small_mount / "live" / "write.lock").unlink()
    expected = Searcher(tiny_encoder_session, InvertedIndex.load(small_mount / "static")).search({"q": "bone"}, k=3)
    subprocess.run(["mount", "-o", "remount,ro", str(small_mount)], check=True)
    before = digest(small_mount)
    static = Searcher(tiny_encoder_session, InvertedIndex.load(small_mount / "static")).search({"q": "bone"}, k=3)
    assert static.as_dict() == expected.as_dict()
    segmented = SegmentedIndex.open(small_mount / "live")
    numbers = Searcher(tiny_encoder_session, segmented).search({"q": "bone"}, k=3)
    assert numbers.doc_ids("q") == expected.doc_ids("q")
    assert np.allclose([h.score for h in numbers["q"]], [h.score for h in expected["q"]])
    with pytest.raises(IndexLockedError, match="is not writable .*open it read-only"):
        SegmentedIndex.open(small_mount / "live", writable=True)
    code, out, err = call(["search", "--model", str(model_dir), "--index", str(small_mount / "static"),
                           "--query", "bone", "--k", "2"])
    assert code == 0, err
    assert [line.split()[2] for line in out.splitlines()] == expected.doc_ids("q")[:2]
    assert digest(small_mount) == before
    assert json.dumps(sorted(p.name for p in (small_mount / "live").iterdir())).count("tmp") == 0
