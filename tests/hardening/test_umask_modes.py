"""Artifacts written through temporary names end with the modes a plain mkdir/open would give under the umask, so
a service account can read what a build job wrote; a replaced file target leaves no temporary; the model config
names the field it rejects."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from tests.hardening.hardening_helpers import call, error_line
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex
from uhdsearch.index.live.segments import SegmentedIndex
from uhdsearch.io import atomic_write_text
from uhdsearch.recipes.quickstart import write_model_and_indexes

NOBODY = 65534


@contextlib.contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def shared_dir():
    """A directory every user may enter (pytest's tmp_path lies under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="uhd-umask-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def write_everything(root: Path, model, encoding, doc_ids) -> list[Path]:
    write_model_and_indexes(root / "quickstart", model, encoding, doc_ids)  # the quickstart's model and indexes
    BinaryIndex.from_encoding(encoding, doc_ids, root / "index", model.digest())
    with SegmentedIndex.create(root / "segmented", "binary", encoding.dim, encoding.n_buckets) as segmented:
        segmented.add(encoding, doc_ids)
        segmented.delete(doc_ids[:3])
        segmented.commit()
    atomic_write_text(root / "notes.txt", "written whole\n")
    return [root / "quickstart", root / "index", root / "segmented", root / "notes.txt"]


def modes(paths: list[Path]) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {"dirs": set(), "files": set()}
    for top in paths:
        for p in [top, *top.rglob("*")] if top.is_dir() else [top]:
            if p.name == "write.lock":  # the segmented index's lock file, not an artifact
                continue
            found["dirs" if p.is_dir() else "files"].add(stat.S_IMODE(p.stat().st_mode))
    return found


def read_as_nobody(index_dir: Path) -> int:
    """Exit status of a forked child that drops to uid/gid nobody and loads and searches the index."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            index = InvertedIndex.load(index_dir)
            code = 0 if index.n_documents > 0 and len(index.doc_ids) == index.n_documents else 3
        except BaseException:  # noqa: BLE001 - the status says it
            code = 4
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_umask_022_gives_readable_artifacts(shared_dir, tiny_encoder_session, mini_encoding, mini_data):
    with umask(0o022):
        paths = write_everything(shared_dir, tiny_encoder_session, mini_encoding, list(mini_data.corpus))
    assert modes(paths) == {"dirs": {0o755}, "files": {0o644}}
    if os.geteuid() == 0:
        assert read_as_nobody(shared_dir / "index") == 0
        assert read_as_nobody(shared_dir / "quickstart" / "index-binary") == 0


def test_umask_077_stays_private(shared_dir, tiny_encoder_session, mini_encoding, mini_data):
    with umask(0o077):
        paths = write_everything(shared_dir, tiny_encoder_session, mini_encoding, list(mini_data.corpus))
    assert modes(paths) == {"dirs": {0o700}, "files": {0o600}}
    if os.geteuid() == 0:
        assert read_as_nobody(shared_dir / "index") == 4


def test_overwriting_a_regular_file_target_leaves_no_temporary(tmp_path, model_dir, scifact_mini_dir):
    target = tmp_path / "target"
    target.write_text("a file where the index goes\n")
    code, out, err = call(["index", "--model", str(model_dir), "--data", str(scifact_mini_dir), "--out", str(target),
                           "--overwrite", "--batch-size", "64"])
    assert code == 0, err
    assert target.is_dir() and InvertedIndex.load(target).n_documents == 400
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]


def test_config_with_null_bucket_layers_names_the_field(tmp_path, model_dir, index_dir):
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    config = json.loads((model / "uhd_config.json").read_text())
    config["bucket_layers"] = None
    (model / "uhd_config.json").write_text(json.dumps(config))
    code, out, err = call(["search", "--model", str(model), "--index", str(index_dir), "--query", "bone"])
    assert code == 2 and out == ""
    assert error_line(err) == (f"error: {model / 'uhd_config.json'}: invalid settings: bucket_layers=None must be a "
                               "list of layer numbers")
