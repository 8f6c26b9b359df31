"""kill -9 a SegmentedIndex writer at random moments: the index always opens at its last commit, correct.

Precisely, with C the last complete "committed" line of the writer's log and P a "pending" line after it (see
segments_crash_writer.py): the reader opens generation C with C's documents, or, only when P exists,
generation C + 1 with P's documents (the kill came after the commit file was renamed into place but before
the writer could log it). Nothing else is acceptable, and no fallback warning may appear: a crash alone must
never leave a commit file that fails to validate.
"""
import json
import multiprocessing
import os
import signal
import time
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from segments_crash_writer import DIM, document_vectors, read_log, serve
from uhdsearch.index import commit as cp
from uhdsearch.index.inverted import WeightedIndex
from uhdsearch.index.segments import SegmentedIndex
from uhdsearch.sparse import SparseEncoding

N_KILLS = 30


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    """A clean (spawned) process that forks the writers; see segments_crash_writer.serve."""
    context = multiprocessing.get_context("spawn")
    conn, child_conn = context.Pipe()
    process = context.Process(target=serve, args=(child_conn, str(tmp_path_factory.mktemp("warm"))), daemon=True)
    process.start()
    yield conn
    conn.send(None)
    process.join(30)
    if process.is_alive():
        process.kill()


def ranking(index, queries):
    numbers, scores = index.search_encoded(queries, 1000, [1.0], "weighted")
    ids = index.doc_ids
    return [[(ids[n], s) for n, s in zip(row_n, row_s) if n >= 0] for row_n, row_s in zip(numbers, scores)]


def test_kill_9_at_random_moments_always_leaves_the_last_commit(tmp_path, launcher):
    path, log_path = tmp_path / "live", tmp_path / "writer.log"
    SegmentedIndex.create(path, "weighted", DIM, 1).close()
    log_path.write_text(json.dumps({"committed": 1, "live": {}, "next_id": 0}) + "\n")
    rng = np.random.default_rng(0)
    queries = SparseEncoding([sp.random(8, DIM, density=0.4, format="csr", dtype=np.float32, random_state=rng)])
    outcomes = {"committed": 0, "pending": 0}
    for kill in range(N_KILLS):
        launcher.send(("start", str(path), str(log_path), kill))
        pid, started = launcher.recv()
        if started:
            time.sleep(rng.uniform(0.0, 0.3))
            os.kill(pid, signal.SIGKILL)
        launcher.send(("reap", pid))
        status = launcher.recv()
        assert started and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
            f"writer {kill} stopped on its own (wait status {status}); its traceback is on stderr")

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            reader = SegmentedIndex.open(path)
        committed, pending = read_log(log_path)
        if reader.generation == committed["committed"]:
            expected, outcomes["committed"] = committed, outcomes["committed"] + 1
        else:
            assert pending is not None and reader.generation == committed["committed"] + 1, (
                f"kill {kill}: opened generation {reader.generation}, last logged commit {committed['committed']}")
            expected, outcomes["pending"] = pending, outcomes["pending"] + 1
            with open(log_path, "a") as log:  # the next writer starts from what is really committed
                log.write(json.dumps({**pending, "pending": None, "committed": reader.generation}) + "\n")
        live = expected["live"]
        order = [d for d in reader.doc_ids if d is not None]
        assert sorted(order) == sorted(live)
        if live:
            fresh = WeightedIndex.from_encoding(document_vectors([(d, live[d]) for d in order]), order, None)
            assert ranking(reader, queries) == ranking(fresh, queries)

    final = SegmentedIndex.open(path, writable=True)  # the lock died with the last writer
    referenced = set()
    for generation in cp.list_generations(path):
        referenced |= cp.referenced_files(cp.read_commit(path, generation))
    assert {p.name for p in path.iterdir()} - referenced == {cp.LOCK_FILE}  # leftovers cleaned up
    final.close()
    assert final.generation > N_KILLS  # the writers got real work done between kills
    print(f"kills: {outcomes}, final generation {final.generation}, {final.n_documents} live documents")
