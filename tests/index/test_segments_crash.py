"""kill -9 a SegmentedIndex writer at random moments: the index always opens at its last commit, correct.

Precisely (log format in segments_crash_writer.py): a reader opens some generation G. If the log has a
"committed" line for G, the reader holds exactly that line's documents. Otherwise G must be the last logged
commit + 1 and a "pending" line must follow that commit: the reader holds the pending line's documents (the
commit file was renamed into place, but the writer was killed, or is still running, before it could log it).
Nothing else is acceptable, and no fallback warning may appear: neither a crash nor a concurrent writer may
leave a reader with a commit that fails to validate. Readers are checked after every kill and while writers run.
Half of the writers merge in the background, so some kills land while a merged segment is being written.
"""
import contextlib
import json
import multiprocessing
import os
import signal
import time
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from tests.index.segments_checks import assert_same_ranking, ranking
from tests.index.segments_crash_writer import DIM, document_vectors, end_cut_line, logged_states, serve
from uhdsearch.index.live import commit as cp
from uhdsearch.index.live.lock import LOCK_FILE
from uhdsearch.index.inverted import WeightedIndex
from uhdsearch.index.live.segments import SegmentedIndex
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


def open_and_check(path, log_path):
    """Open the index (no fallback warning allowed) and check it against the writer's log, as the module
    docstring defines. Returns the reader and whether it holds a commit the log has not confirmed yet."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reader = SegmentedIndex.open(path)
    by_generation, pending = logged_states(log_path)
    unconfirmed = reader.generation not in by_generation
    if unconfirmed:
        last = max(by_generation)
        assert pending is not None and reader.generation == last + 1, (
            f"opened generation {reader.generation}; the last logged commit is {last}")
        live = pending["live"]
    else:
        live = by_generation[reader.generation]["live"]
    assert sorted(d for d in reader.doc_ids if d is not None) == sorted(live)
    return reader, unconfirmed


def test_kill_9_at_random_moments_always_leaves_the_last_commit(tmp_path, launcher):
    path, log_path = tmp_path / "live", tmp_path / "writer.log"
    SegmentedIndex.create(path, "weighted", DIM, 1).close()
    log_path.write_text(json.dumps({"committed": 1, "live": {}, "next_id": 0}) + "\n")
    rng = np.random.default_rng(0)
    queries = SparseEncoding([sp.random(8, DIM, density=0.4, format="csr", dtype=np.float32, random_state=rng)])
    outcomes = {"committed": 0, "unconfirmed": 0, "concurrent opens": 0, "unreferenced segments left": 0}
    for kill in range(N_KILLS):
        launcher.send(("start", str(path), str(log_path), kill))
        pid, started = launcher.recv()
        try:
            deadline = time.monotonic() + rng.uniform(0.0, 0.3)
            while started and time.monotonic() < deadline:  # readers open while the writer commits and cleans up
                open_and_check(path, log_path)
                outcomes["concurrent opens"] += 1
        finally:  # never leave a writer running, even when a check fails
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            launcher.send(("reap", pid))
            status = launcher.recv()
        assert started and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
            f"writer {kill} stopped on its own (wait status {status}); its traceback is on stderr")

        referenced = set().union(*(cp.referenced_files(cp.read_commit(path, g)) for g in cp.list_generations(path)))
        outcomes["unreferenced segments left"] += sum(p.name.startswith(("seg_", ".seg_")) and p.name not in referenced
                                                      and ".del_" not in p.name for p in path.iterdir())
        reader, unconfirmed = open_and_check(path, log_path)
        _, pending = logged_states(log_path)
        live = pending["live"] if unconfirmed else logged_states(log_path)[0][reader.generation]["live"]
        outcomes["unconfirmed" if unconfirmed else "committed"] += 1
        if unconfirmed:  # the next writer starts from what is really committed
            end_cut_line(log_path)
            with open(log_path, "a") as log:
                log.write(json.dumps({**pending, "pending": None, "committed": reader.generation}) + "\n")
        if live:
            order = [d for d in reader.doc_ids if d is not None]
            fresh = WeightedIndex.from_encoding(document_vectors([(d, live[d]) for d in order]), order, None)
            assert_same_ranking(ranking(reader, queries, [1.0], "weighted"), ranking(fresh, queries, [1.0], "weighted"),
                                exact=False)
            assert_same_ranking(ranking(reader, queries, [1.0], "binary"), ranking(fresh, queries, [1.0], "binary"),
                                exact=True)

    final = SegmentedIndex.open(path, writable=True)  # the lock died with the last writer
    referenced = set()
    for generation in cp.list_generations(path):
        referenced |= cp.referenced_files(cp.read_commit(path, generation))
    assert {p.name for p in path.iterdir()} - referenced == {LOCK_FILE}  # leftovers cleaned up
    final.close()
    assert final.generation > N_KILLS  # the writers got real work done between kills
    print(f"outcomes: {outcomes}, final generation {final.generation}, {final.n_documents} live documents")


def test_an_entry_after_a_line_cut_by_a_kill_is_still_read(tmp_path):
    log_path = tmp_path / "writer.log"
    full = json.dumps({"committed": 3, "live": {"d0": 0}, "next_id": 1})
    log_path.write_text(json.dumps({"committed": 2, "live": {}, "next_id": 0}) + "\n" + full[:20])  # killed mid-write
    end_cut_line(log_path)
    with open(log_path, "a") as log:
        log.write(json.dumps({"committed": 4, "live": {}, "next_id": 1}) + "\n")
    committed, pending = logged_states(log_path)
    assert sorted(committed) == [2, 4] and pending is None
