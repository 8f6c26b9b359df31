"""encoder/query/: the QueryEncoder protocol, open_query_encoder (the one place that picks a query encoder), and
the old module paths kept as deprecated aliases."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.query import QueryEncoder, open_query_encoder
from uhdsearch.encoder.query.student import QueryStudent, StudentQueryEncoder
from uhdsearch.encoder.query.table import LookupEncoder
from uhdsearch.errors import UsageError

SRC = Path(__file__).resolve().parents[2] / "src" / "uhdsearch"
MOVED = {"lookup": "table", "lookup_vote": "vote", "lookup_neighbours": "neighbours", "lookup_corpus": "corpus_table",
         "query_student": "student"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_encoder_session):
    """The tiny model saved, with a lookup table of a few tokens and a query student beside it."""
    root = tmp_path_factory.mktemp("query-encoders")
    tiny_encoder_session.save_pretrained(root / "model")
    words = tiny_encoder_session.backbone.tokenizer("bone density vitamin", add_special_tokens=False)["input_ids"]
    LookupEncoder.from_model(tiny_encoder_session, token_ids=words).save(root / "model")
    return root / "model"


def test_each_kind_opens_its_encoder_and_all_are_query_encoders(model_dir, tiny_encoder_session, tmp_path):
    full = open_query_encoder(model_dir)
    assert type(full) is UHDEncoder and full.digest() == tiny_encoder_session.digest()
    table = open_query_encoder(model_dir, "table", model=full)
    assert type(table) is LookupEncoder and table.digest() == full.digest()
    last_layer = UHDEncoder(full.backbone, full.config.replace(bucket_layers=(-1,)))
    student_path = QueryStudent(last_layer.backbone, 1).save(tmp_path / "student.safetensors")
    student = open_query_encoder(model_dir, "student", model=last_layer, student=student_path)
    assert type(student) is StudentQueryEncoder
    for encoder in (full, table, student):
        assert isinstance(encoder, QueryEncoder)
        encoded = encoder.encode(["bone density"], "query")
        assert encoded.dim == full.config.dim and encoded.n == 1
    assert open_query_encoder(model_dir, wta_k=4).config.wta_k == 4


@pytest.mark.parametrize("kwargs, words", [({"kind": "vote"}, "choose full, onnx, table or student"),
                                           ({"kind": "table", "wta_k": 4}, "wta_k does not apply to a table"),
                                           ({"kind": "full", "onnx": True}, "kind='onnx'"),
                                           ({"kind": "student"}, "student file")])
def test_options_a_kind_does_not_take_are_refused(model_dir, kwargs, words):
    with pytest.raises(UsageError, match=re.escape(words)):
        open_query_encoder(model_dir, **kwargs)


def test_a_missing_table_is_named(tmp_path, tiny_encoder_session):
    tiny_encoder_session.save_pretrained(tmp_path / "model")
    with pytest.raises(FileNotFoundError, match="no lookup table"):
        open_query_encoder(tmp_path / "model", "table", model=tiny_encoder_session)


def test_old_module_paths_warn_and_are_the_new_modules():
    code = (
        "import importlib, json, warnings\n"
        "out = {}\n"
        f"for old, new in {MOVED!r}.items():\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        module = importlib.import_module(f'uhdsearch.encoder.{old}')\n"
        "    moved = importlib.import_module(f'uhdsearch.encoder.query.{new}')\n"
        "    out[old] = [module is moved, [str(w.message) for w in caught if w.category is DeprecationWarning]]\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for old, (same, messages) in json.loads(done.stdout).items():
        assert same and any(f"uhdsearch.encoder.query.{MOVED[old]}" in m for m in messages), (old, messages)


def test_no_query_encoder_is_chosen_outside_encoder_query():
    choices = re.compile(r"LookupEncoder\.load\(|StudentQueryEncoder\(|QueryStudent\.load\(|use_onnx_runtime\(")
    found = []
    for path in SRC.rglob("*.py"):
        if path.relative_to(SRC).parts[:2] in (("encoder", "query"), ("encoder", "model.py")):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if choices.search(line):
                found.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    assert found == []
