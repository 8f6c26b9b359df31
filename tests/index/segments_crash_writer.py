"""Writer for the crash test: random adds, replaces, deletes, commits and merges on a SegmentedIndex until killed.

Writers with an odd seed merge in the background: commit() starts merges, and "merge" starts one (or, while one
runs, merges in the foreground, which discards it). A background merge changes no documents, so it is not logged.

Log protocol, one JSON object per line, flushed at once (a kill may leave the last line incomplete):
    {"pending": true, "live": {...}, "next_id": n}        written just before commit() or merge() starts
    {"committed": generation, "live": {...}, "next_id": n}  written just after it returns
`live` maps each live doc_id to its version; a document's vector is a pure function of (doc_id, version).
"""
from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from uhdsearch.index.live.segments import SegmentedIndex
from uhdsearch.sparse import SparseEncoding

DIM = 64


def document_vectors(items: list[tuple[str, int]]) -> SparseEncoding:
    """One weighted row per (doc_id "d<n>", version), the same in every process."""
    indptr, indices, data = [0], [], []
    for doc_id, version in items:
        rng = np.random.default_rng([int(doc_id[1:]), version])
        cols = np.sort(rng.choice(DIM, size=int(rng.integers(2, 12)), replace=False))
        indices.extend(cols.tolist())
        data.extend(rng.uniform(0.1, 1.0, cols.shape[0]).tolist())
        indptr.append(len(indices))
    matrix = sp.csr_matrix((np.array(data, np.float32), np.array(indices, np.int32), np.array(indptr)),
                           shape=(len(items), DIM))
    return SparseEncoding([matrix])


def logged_states(path: Path) -> tuple[dict[int, dict], dict | None]:
    """Committed entries by generation, and the pending entry written after the last of them (or None)."""
    committed, pending = {}, None
    for line in Path(path).read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the line a kill cut short
        if entry.get("committed") is not None:
            committed[entry["committed"]], pending = entry, None
        else:
            pending = entry
    if not committed:
        raise ValueError(f"{path} has no committed entry")
    return committed, pending


def end_cut_line(log_path: Path) -> None:
    """Finish a line a kill cut short, so that the next entry starts a line of its own.

    A line longer than the file buffer reaches the disk in several writes, and a kill may land between them.
    """
    with open(log_path, "rb+") as log:
        if log.seek(0, os.SEEK_END) and (log.seek(-1, os.SEEK_END), log.read(1))[1] != b"\n":
            log.write(b"\n")


def run_writer(index_dir: str, log_path: str, seed: int, on_ready: Callable[[], object]) -> None:
    """Change the index forever (the test kills it); `on_ready` is called once the writer holds the lock."""
    background = seed % 2 == 1
    index = SegmentedIndex.open(index_dir, writable=True, max_segments=4, background_merges=background)
    by_generation, _ = logged_states(Path(log_path))
    committed = by_generation[index.generation]
    live: dict[str, int] = dict(committed["live"])
    next_id = committed["next_id"]
    rng = np.random.default_rng(seed)
    launcher = os.getppid()
    end_cut_line(Path(log_path))
    with open(log_path, "a") as log:
        on_ready()
        while os.getppid() == launcher:  # an orphan (the test died) stops by itself
            op = rng.choice(["add", "replace", "delete", "commit", "merge"], p=[0.3, 0.15, 0.15, 0.32, 0.08])
            if op == "add":
                ids = [f"d{next_id + i}" for i in range(int(rng.integers(1, 6)))]
                next_id += len(ids)
                index.add(document_vectors([(d, 0) for d in ids]), ids)
                live.update({d: 0 for d in ids})
            elif op == "replace" and live:
                ids = [str(d) for d in rng.choice(sorted(live), size=min(2, len(live)), replace=False)]
                index.add(document_vectors([(d, live[d] + 1) for d in ids]), ids, replace=True)
                live.update({d: live[d] + 1 for d in ids})
            elif op == "delete" and live:
                ids = [str(d) for d in rng.choice(sorted(live), size=min(int(rng.integers(1, 4)), len(live)),
                                                  replace=False)]
                index.delete(ids)
                for d in ids:
                    del live[d]
            elif op == "merge" and background and index.background_merge is None:
                index.merge_in_background(max_segments=int(rng.integers(1, 3)))
            elif op in ("commit", "merge"):
                state = {"live": live, "next_id": next_id}
                log.write(json.dumps({"pending": True, **state}) + "\n")
                log.flush()
                generation = index.commit() if op == "commit" else index.merge(max_segments=int(rng.integers(1, 3)))
                log.write(json.dumps({"committed": generation, **state}) + "\n")
                log.flush()


def serve(conn, warm_dir: str) -> None:
    """Launcher process: compile the kernels once, then fork one writer per ("start", index_dir, log_path, seed)
    request and answer (pid, started); ("reap", pid) answers the wait status; None stops it.

    Forking a warmed-up process makes each writer start in milliseconds instead of seconds of imports and JIT.
    """
    _warm_up(Path(warm_dir))
    while (request := conn.recv()) is not None:
        if request[0] == "reap":
            conn.send(os.waitpid(request[1], 0)[1])
            continue
        _, index_dir, log_path, seed = request
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the writer; it never returns into this loop
            os.close(read_fd)
            try:
                run_writer(index_dir, log_path, seed, lambda: os.write(write_fd, b"r"))
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(1)
        os.close(write_fd)
        started = os.read(read_fd, 1) == b"r"  # empty when the writer died first
        os.close(read_fd)
        conn.send((pid, started))


def _warm_up(directory: Path) -> None:
    """Run every code path a writer uses (build, load, merge) so that forked writers inherit compiled code."""
    index = SegmentedIndex.create(directory / "warm", "weighted", DIM, 1)
    index.add(document_vectors([("d0", 0), ("d1", 0), ("d2", 0)]), ["d0", "d1", "d2"])
    index.commit()
    index.add(document_vectors([("d1", 1)]), ["d1"], replace=True)
    index.delete(["d2"])
    index.commit()
    index.merge()
    index.add(document_vectors([("d3", 0)]), ["d3"])
    index.commit()
    index.merge_in_background().wait()
    index.commit()
    index.close()
    SegmentedIndex.open(directory / "warm", writable=True).close()
