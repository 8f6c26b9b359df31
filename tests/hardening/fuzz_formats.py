"""Format fuzzer: damaged on-disk artifacts must end in a clear error or in results naming real documents.

Every on-disk format (static binary and weighted indexes, impact planes, segmented indexes with their deletion
bitsets, shards as split_index writes them, query lookup tables) is written once, small; each case copies one,
applies one seeded mutation (fuzz_mutations.py: bit flips, truncations inside arrays and of files, swapped arrays,
values and manifest fields set to 0, -1, n+1 and huge, padding bits set, damaged doc_ids.txt and .npy headers),
re-computes every checksum so that the damage reaches the loaders and kernels, then opens and searches it (every
scoring, length normalization, the forward store and probes, decompression). Cases run in batches in worker
processes; a worker announces each case before running it, so a signal is attributed to its case and the worker is
restarted after it.

Outcomes: "ok" (results name only documents of the index), "error" (a uhdsearch error or FileNotFoundError),
"unclear" (any other exception: a bug, though not a crash), "wrong" (a number outside the index), "crash" (the
worker died by a signal), "hang" (the batch ran out of time).

    .venv/bin/python -m tests.hardening.fuzz_formats --cases 10000          # writes benchmarks/results/fuzz_formats.json
    .venv/bin/python -m tests.hardening.fuzz_formats --cases 200 --formats binary,segmented --no-write
"""
from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.lib.settings import RESULTS, ROOT, record
from tests.hardening.fuzz_mutations import DIM, LOOKUP_TOKENS, MUTATIONS, N_DOCS, mutate, reseal  # noqa: F401

RESULT = RESULTS / "fuzz_formats.json"
FORMATS = ("binary", "weighted", "planes", "segmented", "shards", "lookup")
N_BUCKETS = 2


# ------------------------------------------------------------------ the formats, written once
def encoding(n: int = N_DOCS, seed: int = 0):
    """Seeded sparse vectors with Zipf-like dim frequencies: bitmap dims, one-block and many-block lists."""
    from uhdsearch.sparse import SparseEncoding

    rng = np.random.default_rng(seed)
    share = 0.6 / np.arange(1, DIM + 1) ** 0.9
    buckets = []
    for _ in range(N_BUCKETS):
        dense = rng.random((n, DIM)) < rng.permutation(share)
        m = sp.csr_matrix(dense.astype(np.float32))
        m.data[:] = rng.uniform(0.1, 1.0, m.nnz).astype(np.float32)
        buckets.append(m)
    return SparseEncoding(buckets)


def queries(n: int = 4, seed: int = 1):
    """Integer-valued rows (levels 1..7): valid for binary, quantized and weighted scoring alike."""
    from uhdsearch.sparse import SparseEncoding

    rng = np.random.default_rng(seed)
    buckets = []
    for _ in range(N_BUCKETS):
        m = sp.random(n, DIM, density=0.08, format="csr", dtype=np.float32, random_state=rng)
        m.data[:] = rng.integers(1, 8, m.nnz).astype(np.float32)
        buckets.append(m)
    return SparseEncoding(buckets)


def write_formats(work: Path, formats=FORMATS) -> dict[str, Path]:
    from uhdsearch.index.impacts import ImpactPlanes
    from uhdsearch.index.inverted import BinaryIndex, WeightedIndex
    from uhdsearch.index.live.segments import SegmentedIndex
    from uhdsearch.scale.shards import split_index

    enc, ids = encoding(), [f"doc{i}" for i in range(N_DOCS)]
    out = {}
    for name in formats:
        path = work / name
        if name == "binary":
            BinaryIndex.from_encoding(enc, ids, path, "fuzz", bitmap_bias=1.5)
        elif name == "weighted":
            WeightedIndex.from_encoding(enc, ids, path, "fuzz", bitmap_bias=1.5)
        elif name == "planes":
            ImpactPlanes.from_encoding(enc, ids, encoder_digest="fuzz", path=path)
        elif name == "segmented":
            with SegmentedIndex.create(path, "binary", DIM, N_BUCKETS, "fuzz") as index:
                index.add(enc[:1200], ids[:1200])
                index.commit()
                index.add(enc[1200:], ids[1200:])
                index.delete(ids[5:400:7])
                index.commit()
        elif name == "shards":
            split_index(BinaryIndex.from_encoding(enc, ids, None, "fuzz"), 2, path)
        elif name == "lookup":
            write_lookup(path)
        out[name] = path
    return out


def write_lookup(model_dir: Path) -> None:
    import importlib.util

    from uhdsearch.encoder.config import EncoderConfig
    from uhdsearch.encoder.query.table import LookupEncoder
    from uhdsearch.encoder.model import UHDEncoder

    backbone = Path(list(importlib.util.find_spec("cognition").submodule_search_locations)[0]) / "model"
    model = UHDEncoder.new(backbone, EncoderConfig(dim=DIM, wta_k=8, query_k=None, wta_dtype="float32")).eval()
    model.save_pretrained(model_dir)
    LookupEncoder.from_model(model, token_ids=np.arange(1000, 1000 + LOOKUP_TOKENS)).save(model_dir)


# ------------------------------------------------------------------ one case: open and search what is left
def _check_numbers(numbers: np.ndarray, scores: np.ndarray, doc_ids) -> None:
    """A 'wrong' outcome unless every number is -1 or an index document with an id."""
    n = len(doc_ids)
    real = numbers[numbers >= 0]
    if np.any(numbers < -1) or np.any(real >= n) or any(doc_ids[int(i)] is None for i in real) \
            or not np.all(np.isfinite(scores[numbers >= 0]) | np.isinf(scores[numbers >= 0])):
        raise WrongResults(f"numbers {real.min(initial=0)}..{real.max(initial=0)} for {n} documents")


class WrongResults(Exception):
    pass


def search_everything(index, q) -> None:
    from uhdsearch.index.impacts import ImpactPlanes
    from uhdsearch.index.inverted import InvertedIndex

    weights = [1.0] * index.n_buckets
    if isinstance(index, ImpactPlanes):
        _check_numbers(*index.search_encoded(q, 10, weights), index.doc_ids)
        return
    runs = [("binary", 0.0), ("binary", 0.5), ("quantized", 0.0)]
    if index.variant == "weighted":
        runs.append(("weighted", 0.0))
    first = None
    for scoring, alpha in runs:
        numbers, scores = index.search_encoded(q, 10, weights, scoring, length_norm=alpha)
        _check_numbers(numbers, scores, index.doc_ids)
        first = numbers if first is None else first
    candidates = np.unique(first[first >= 0])
    index.overlap_counts(q[0:1], candidates)
    if isinstance(index, InvertedIndex):
        index.keep_forward(0.05)
        index.overlap_counts(q[0:1], candidates, quantized=True)
        index.document_vectors()


def open_and_search(fmt: str, path: Path, q, model, mmap: bool = False) -> None:
    from uhdsearch.index import open_index
    from uhdsearch.index.inverted import InvertedIndex
    from uhdsearch.index.live.segments import SegmentedIndex

    if fmt == "lookup":
        from uhdsearch.encoder.query.table import LookupEncoder

        encoded = LookupEncoder.load(path, model).encode(["bone density of mice", "the cell", ""], "query")
        for m in encoded.buckets:
            if m.shape != (3, DIM) or (m.nnz and (m.indices.min() < 0 or m.indices.max() >= DIM)):
                raise WrongResults(f"lookup rows of shape {m.shape}")
        return
    if fmt == "segmented":
        with SegmentedIndex.open(path, mmap=mmap) as index:
            search_everything(index, q)
        return
    paths = sorted(path.glob("shard_*")) if fmt == "shards" else [path]
    for p in paths:
        search_everything(open_index(p, mmap=mmap) if fmt == "planes" else InvertedIndex.load(p, mmap=mmap), q)


def run_case(fmt: str, seed: int, base: Path, work: Path, q, model) -> tuple[str, str]:
    """(outcome, detail) of one seeded case; see the module docstring."""
    import warnings

    from uhdsearch.errors import UhdError

    if fmt == "_signal":  # the harness's own check: a case that dies must be found and named
        os.kill(os.getpid(), 6)
    rng = random.Random(seed)
    case = work / f"case-{seed}"
    if fmt == "lookup":
        case.mkdir()
        shutil.copy(base / "query_lookup.npz", case)
    else:
        shutil.copytree(base, case)
    try:
        what = mutate(case, rng)
        reseal(case)
        mmap = rng.random() < 0.5  # half the cases memory-mapped: loads that leave padding bits to the kernels
        what += " (mmap)" if mmap else ""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                open_and_search(fmt, case, q, model, mmap)
        except (UhdError, FileNotFoundError) as exc:
            return "error", f"{what}: {type(exc).__name__}: {str(exc)[:300]}"
        except WrongResults as exc:
            return "wrong", f"{what}: {exc}"
        except Exception as exc:  # noqa: BLE001 - the point: any other exception is a finding
            return "unclear", f"{what}: {type(exc).__name__}: {str(exc)[:300]}"
        return "ok", what
    finally:
        shutil.rmtree(case, ignore_errors=True)


def worker() -> None:
    """Read {"bases", "work", "cases"} on stdin; print 'S <id>' before and one JSON line after each case."""
    job = json.loads(sys.stdin.read())
    bases, work = {k: Path(v) for k, v in job["bases"].items()}, Path(job["work"])
    q, model = queries(), None
    for case_id, fmt, seed in job["cases"]:
        if fmt == "lookup" and model is None:
            from uhdsearch.encoder.model import UHDEncoder

            model = UHDEncoder.from_pretrained(bases["lookup"])
        print(f"S {case_id}", flush=True)
        outcome, detail = run_case(fmt, seed, bases.get(fmt, work), work, q, model)
        print(json.dumps({"id": case_id, "format": fmt, "seed": seed, "outcome": outcome, "detail": detail}),
              flush=True)


# ------------------------------------------------------------------ the parent: batches, signals, attribution
def _run_worker(job: str, env: dict, timeout: float) -> tuple[list[str], int | None, str]:
    """A worker's stdout lines, exit code (None: killed after `timeout` s without a line, a hang) and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.hardening.fuzz_formats", "--worker"], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    proc.stdin.write(job)
    proc.stdin.close()
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    lines = []
    while True:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if not ready:  # no case started or ended for `timeout` seconds
            proc.kill()
            proc.wait()
            return lines, None, ""
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
    code = proc.wait()
    reader.join()
    return lines, code, "".join(err)


def run_cases(cases: list[tuple[int, str, int]], bases: dict[str, Path], work: Path, batch: int = 400,
              timeout: float = 300.0, log: Path | None = None) -> list[dict]:
    """Run cases in worker processes, `batch` at a time; a worker killed by a signal (or silent for `timeout`
    seconds) is charged to the case it had announced, and the rest of its batch runs in a new worker. `log`: each
    batch's records are appended there as JSON lines, and a line of progress goes to stderr."""
    results: list[dict] = []
    pending = list(cases)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    while pending:
        chunk, pending = pending[:batch], pending[batch:]
        job = json.dumps({"bases": {k: str(v) for k, v in bases.items()}, "work": str(work), "cases": chunk})
        lines, code, stderr = _run_worker(job, env, timeout)
        done, started, records = set(), None, []
        for line in lines:
            if line.startswith("S "):
                started = int(line[2:])
            elif line.startswith("{"):
                records.append(json.loads(line))
                done.add(records[-1]["id"])
        if len(done) < len(chunk):
            if started is None or started in done:
                raise RuntimeError(f"fuzz worker failed outside a case (exit {code}): {stderr[-2000:]}")
            _, fmt, seed = next(c for c in chunk if c[0] == started)
            outcome = "hang" if code is None else "crash" if code < 0 else "harness"
            records.append({"id": started, "format": fmt, "seed": seed, "outcome": outcome,
                            "detail": f"worker exit {code}: {stderr[-500:]}"})
            done.add(started)
            pending = [c for c in chunk if c[0] not in done] + pending
        results.extend(records)
        if log is not None:
            with open(log, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in records)
            print(f"{len(results)} cases, {sum(r['outcome'] in ('crash', 'hang') for r in results)} crashes",
                  file=sys.stderr, flush=True)
    return sorted(results, key=lambda r: r["id"])


def make_cases(n: int, formats, seed: int = 0) -> list[tuple[int, str, int]]:
    return [(i, formats[i % len(formats)], seed * 1_000_003 + i) for i in range(n)]


def summary(results: list[dict]) -> dict:
    from collections import Counter

    by_format: dict[str, Counter] = {}
    for r in results:
        by_format.setdefault(r["format"], Counter())[r["outcome"]] += 1
    outcomes = Counter(r["outcome"] for r in results)
    return {"n_cases": len(results), "n_crashes": outcomes["crash"] + outcomes["hang"],
            "n_unclear": outcomes["unclear"] + outcomes["wrong"] + outcomes["harness"], "outcomes": dict(outcomes),
            "by_format": {k: dict(v) for k, v in sorted(by_format.items())},
            "findings": [r for r in results if r["outcome"] not in ("ok", "error")][:50]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cases", type=int, default=10000)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--no-write", action="store_true", help="print the summary only")
    parser.add_argument("--log", type=Path, help="append every case's record here as it ends (JSON lines)")
    args = parser.parse_args(argv)
    if args.worker:
        worker()
        return 0
    formats = tuple(args.formats.split(","))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="uhd-fuzz-") as tmp:
        work = Path(tmp)
        bases = write_formats(work / "bases", formats)
        results = run_cases(make_cases(args.cases, formats, args.seed), bases, work, args.batch, log=args.log)
    settings = {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()
                if key not in ("worker", "no_write")}
    out = {**record(None, settings), "seed": args.seed, "formats": list(formats), "mutations": list(MUTATIONS),
           "seconds": round(time.perf_counter() - t0, 1), **summary(results)}
    print(json.dumps({k: v for k, v in out.items() if k != "findings"}, indent=1))
    for r in out["findings"][:20]:
        print(r, file=sys.stderr)
    if not args.no_write:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 1 if out["n_crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
