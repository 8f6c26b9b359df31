"""The Ray Data build against the single-process build: same postings bytes, same doc ids, same search results."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("ray")

from tests.child_process import python_path  # noqa: E402
from uhdsearch.index.inverted import BinaryIndex, WeightedIndex  # noqa: E402
from uhdsearch.index.live.segments import SegmentedIndex  # noqa: E402
from uhdsearch.scale.ray_index import build_on_ray  # noqa: E402
from uhdsearch.search.searcher import Searcher  # noqa: E402


def _same_postings(segmented, static) -> None:
    assert segmented.n_segments == 1
    segment = segmented._segments[0].index
    assert segment.doc_ids == static.doc_ids
    assert segment.meta["encoder_digest"] == static.encoder_digest
    arrays, expected = segment.arrays(), static.arrays()
    assert len(arrays) == len(expected) > 0
    for a, b in zip(arrays, expected):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_ray_build_has_the_single_process_postings(ray_cluster, tiny_model_dir, tiny_encoder_session, mini_data,
                                                    tmp_path):
    static = BinaryIndex.build(tiny_encoder_session, mini_data.corpus, tmp_path / "static", show_progress=False)
    built = build_on_ray(tiny_model_dir, mini_data.corpus, tmp_path / "ray", rows_per_task=64, segment_size=150,
                         show_progress=False)
    assert built.variant == "binary" and built.n_documents == 400
    _same_postings(built, static)


def test_unmerged_weighted_build_searches_like_the_single_process_index(ray_cluster, tiny_model_dir,
                                                                        tiny_encoder_session, mini_data, tmp_path):
    static = WeightedIndex.build(tiny_encoder_session, mini_data.corpus, tmp_path / "static", show_progress=False)
    built = build_on_ray(tiny_model_dir, mini_data.corpus, tmp_path / "ray", variant="weighted", rows_per_task=50,
                         segment_size=120, merge=False, show_progress=False)
    assert built.n_segments == 4  # 120 + 120 + 120 + 40
    assert list(built.doc_ids) == static.doc_ids
    for k in (1, 10, 1000):
        expected = Searcher(tiny_encoder_session, static).search(mini_data.queries, k=k)
        got = Searcher(tiny_encoder_session, built).search(mini_data.queries, k=k)
        assert len(expected.results) == 40
        assert got.results == expected.results


def _encode_actor_pids() -> list[int]:
    """Processes of this test's local cluster (descendants of this process) running an encoding actor."""
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "_EncodeActor" in " ".join(child.cmdline()):
                found.append(child.pid)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
def test_a_worker_killed_mid_encoding_is_retried_and_the_index_is_the_same(ray_cluster, tiny_model_dir,
                                                                           tiny_encoder_session, mini_data, tmp_path):
    static = BinaryIndex.build(tiny_encoder_session, mini_data.corpus, tmp_path / "static", show_progress=False)
    killed: list[int] = []

    def kill_one_worker() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            pids = _encode_actor_pids()
            if pids:
                time.sleep(0.5)  # the model is loaded (the actor is ALIVE); let it get into its batches
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
            time.sleep(0.1)

    killer = threading.Thread(target=kill_one_worker)
    killer.start()
    built = build_on_ray(tiny_model_dir, mini_data.corpus, tmp_path / "ray", rows_per_task=8, show_progress=False)
    killer.join()
    assert len(killed) == 1
    _same_postings(built, static)


@pytest.mark.slow
def test_a_killed_driver_leaves_the_previous_index(ray_cluster, tiny_model_dir, mini_data, scifact_mini_dir, tmp_path):
    out = tmp_path / "index"
    built = build_on_ray(tiny_model_dir, list(mini_data.corpus.values())[:1], out, show_progress=False)
    assert built.doc_ids == [next(iter(mini_data.corpus))]
    address = ray_cluster.get_runtime_context().gcs_address
    code = (f"from uhdsearch.cli.main import main; main(['index', '--model', '{tiny_model_dir}', '--data', "
            f"'{scifact_mini_dir}', '--out', '{out}', '--overwrite', '--ray', '{address}', '--batch-size', '4'])")
    env = {**os.environ, "PYTHONPATH": python_path()}
    driver = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(p.name.startswith(".index.tmp-") for p in tmp_path.iterdir()):
        time.sleep(0.05)
    time.sleep(2.0)  # into the encoding
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    reopened = SegmentedIndex.open(out)
    assert list(reopened.doc_ids) == [next(iter(mini_data.corpus))]
    assert any(p.name.startswith(".index.tmp-") for p in tmp_path.iterdir())  # killed while writing


def test_gpus_the_cluster_lacks_are_refused_naming_the_option(ray_cluster, tiny_model_dir, mini_data,
                                                              scifact_mini_dir, tmp_path, capsys):
    from uhdsearch.cli.main import main
    from uhdsearch.errors import UsageError

    have = ray_cluster.cluster_resources().get("GPU", 0)
    per_worker = int(have) + 1  # more than the cluster has, whatever it has
    words = (rf"gpus_per_worker={per_worker} \(--gpus-per-worker\) x 2 workers needs {2 * per_worker} GPUs; "
             rf"the cluster has {have:g}")
    with pytest.raises(UsageError, match=words):
        build_on_ray(tiny_model_dir, mini_data.corpus, tmp_path / "ray", gpus_per_worker=per_worker,
                     show_progress=False)
    assert not (tmp_path / "ray").exists()
    args = ["index", "--model", str(tiny_model_dir), "--data", str(scifact_mini_dir), "--out", str(tmp_path / "cli")]
    assert main([*args, "--ray", "local", "--gpus-per-worker", "0.5"]) == 2
    assert "--gpus-per-worker" in capsys.readouterr().err
    assert main([*args, "--gpus-per-worker", "1"]) == 2  # no --ray: nothing would use the GPU
    assert "--gpus-per-worker applies to --ray" in capsys.readouterr().err
