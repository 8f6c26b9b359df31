"""Crash harness: SIGKILL every directory-replacing writer at each step of its swap and at random moments.

Writers (each replaces its target with `overwrite=True`, alternating two versions A and B):
    index       BinaryIndex.from_encoding of seeded sparse vectors (what `uhdsearch index` writes)
    model       UHDEncoder.save_pretrained of a seeded tiny encoder (what `uhdsearch train` writes)
    quickstart  the quickstart's output directory as one unit: model/, index-binary/, index-weighted/, runs/ and
                results.json staged beside it and swapped in whole (quickstart.write_model_and_indexes, the
                quickstart's own writer, inside io.atomic_directory), as `uhdsearch quickstart --overwrite` does

A forked child process writes one version; it kills itself (SIGKILL) at swap step N (a step is the moment before or
after each rename, exchange, file replace, directory removal, or the first file removed by one), with the kernel's
one-step exchange or with the fallback swap (move aside, move in), or the parent kills it at a random moment of
the write. After every kill the target must open to version A or B and search exactly like it (the same doc
numbers and scores, the same model digest), and the next successful write must leave no temporaries beside it.
A quickstart output directory must also agree with itself: the model digest recorded in results.json and in each
index's meta is that of the model/ beside them (a directory mixing A and B fails).

    python -m tests.hardening.crash_harness                   # settings: benchmarks/configs/crash_harness.toml
    python -m tests.hardening.crash_harness --writers index --random-kills 5
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import re
import signal
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.lib import settings

WRITERS = ("index", "model", "quickstart")
TARGETS = {"index": ["index"], "model": ["model"], "quickstart": ["out"]}
DIM, N_DOCS = 4096, 3000


# ------------------------------------------------------------------ the child: write one version, maybe die
def encoding(version: int, n: int = N_DOCS, seed_offset: int = 0):
    from uhdsearch.sparse import SparseEncoding

    rng = np.random.default_rng(version * 1000 + seed_offset)
    matrix = sp.random(n, DIM, density=40 / DIM, format="csr", dtype=np.float32, random_state=rng)
    matrix.data[:] = rng.uniform(0.1, 1.0, matrix.data.shape[0]).astype(np.float32)
    return SparseEncoding([matrix])


@functools.cache
def tiny_model(version: int):
    import importlib.util

    import torch

    from uhdsearch.encoder.config import EncoderConfig
    from uhdsearch.encoder.model import UHDEncoder

    torch.manual_seed(version)
    backbone = Path(list(importlib.util.find_spec("cognition").submodule_search_locations)[0]) / "model"
    config = EncoderConfig(dim=DIM, wta_k=15 + version, query_k=None, bucket_layers=(2,), document_max_length=64,
                           query_max_length=16, wta_dtype="float32")
    return UHDEncoder.new(backbone, config).eval()


def install_kill_at(step: int, fallback: bool) -> list[str]:
    """SIGKILL this process at swap step `step` (1-based); `fallback` disables the one-step exchange."""
    import shutil

    import uhdsearch.io.swap as uio

    count = [0]
    in_rmtree = [False]
    names: list[str] = []

    def boundary(name: str = "") -> None:
        count[0] += 1
        names.append(name)
        if count[0] == step:
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(fn, first_only_in_rmtree: bool = False):
        def wrapped(*args, **kwargs):
            counted = not first_only_in_rmtree or in_rmtree[0]
            if first_only_in_rmtree and in_rmtree[0]:
                in_rmtree[0] = False  # only the first file a removal takes away is a step
            if counted:
                boundary(f"before {fn.__name__} {args[-1]}")
            out = fn(*args, **kwargs)
            if counted:
                boundary(f"after {fn.__name__}")
            return out
        return wrapped

    rmtree = shutil.rmtree

    def counted_rmtree(*args, **kwargs):
        boundary()
        in_rmtree[0] = True
        try:
            return rmtree(*args, **kwargs)
        finally:
            in_rmtree[0] = False
            boundary()

    os.rename = wrap(os.rename)
    os.replace = wrap(os.replace)
    os.unlink = wrap(os.unlink, first_only_in_rmtree=True)
    shutil.rmtree = counted_rmtree
    uio._exchange = (lambda a, b: False) if fallback else wrap(uio._exchange)
    return names


def child(writer: str, root: Path, version: int, step: int | None, fallback: bool, ready_fd: int) -> None:
    """The forked writer: signal readiness on `ready_fd`, arm the kill, write one version, report the seconds."""
    from uhdsearch.index.inverted import BinaryIndex
    from uhdsearch.io import write_json

    enc = encoding(version)
    ids = [f"d{i}" for i in range(N_DOCS)]
    model = tiny_model(version) if writer in ("model", "quickstart") else None
    if step is not None or fallback:
        install_kill_at(step or 0, fallback)
    os.write(ready_fd, b"ready\n")
    start = time.perf_counter()
    if writer == "index":
        BinaryIndex.from_encoding(enc, ids, root / "index", encoder_digest=f"v{version}", overwrite=True)
    elif writer == "model":
        model.save_pretrained(root / "model", overwrite=True)
    else:  # run_quickstart's write path, without the training and evaluation between its steps
        from uhdsearch.io import atomic_directory
        from uhdsearch.recipes.quickstart import check_out_dir, write_model_and_indexes

        out = root / "out"
        check_out_dir(out, overwrite=True)
        with atomic_directory(out, overwrite=True) as stage:
            binary, _ = write_model_and_indexes(stage, model, enc, ids, model_card=f"version {version}\n")
            probe_run(binary, version).save(str(stage / "runs" / "uhd-binary.trec"))
            write_json(stage / "results.json", {"version": version, "model_digest": model.digest()})
            write_json(stage / "extra_results.json", {"version": version})
    os.write(ready_fd, f"done {time.perf_counter() - start:.3f}\n".encode())


def probe_run(index, version: int):
    """A small TREC run searched from `index` (the quickstart's runs/)."""
    from uhdsearch.types import Run, ScoredDoc

    numbers, scores = index.search_encoded(encoding(99, n=5, seed_offset=7), 10, (1.0,), "binary")
    return Run({f"q{i}": [ScoredDoc(index.doc_ids[n], float(v)) for n, v in zip(row, srow) if n >= 0]
                for i, (row, srow) in enumerate(zip(numbers.tolist(), scores.tolist()))}, name=f"v{version}")


# ------------------------------------------------------------------ the parent: kill, then check
def state_of(writer: str, root: Path, references: dict[int, dict[str, object]]) -> dict[str, int]:
    """Which version each artifact opens to; raises AssertionError if one opens to neither (or not at all)."""
    found = {}
    for name in TARGETS[writer]:
        fingerprint = fingerprint_of(root / name)
        versions = [v for v, ref in references.items() if ref[name] == fingerprint]
        assert versions, f"{root / name} opens to neither version A nor B"
        found[name] = versions[0]
    return found


def fingerprint_of(path: Path) -> object:
    """What must match exactly: search results of an index, the digest of a model, the content of a file; for a
    quickstart output directory all of them, after checking that its parts record the same model."""
    if path.name == "out":
        return output_fingerprint(path)
    if path.name.endswith(".json"):
        from uhdsearch.io import read_json

        return json.dumps(read_json(path))
    if path.name == "model":
        from uhdsearch.encoder.model import UHDEncoder

        return UHDEncoder.from_pretrained(path).digest()
    from uhdsearch.index.inverted import InvertedIndex

    index = InvertedIndex.load(path)
    numbers, scores = index.search_encoded(encoding(99, n=20, seed_offset=7), 10, (1.0,), "binary")
    return (tuple(map(tuple, numbers.tolist())), tuple(map(tuple, scores.tolist())))


def output_fingerprint(out: Path) -> tuple:
    """A quickstart output directory as one unit: every part's fingerprint; raises if the parts disagree."""
    from uhdsearch.index.inverted import InvertedIndex
    from uhdsearch.io import read_json, recover_directory

    out = recover_directory(out)  # what the next quickstart (or a reader of model/ or index-*/) does first
    results = read_json(out / "results.json")
    model = fingerprint_of(out / "model")
    recorded = {"results.json": results["model_digest"],
                **{name: InvertedIndex.load(out / name).encoder_digest for name in ("index-binary", "index-weighted")}}
    assert set(recorded.values()) == {model}, f"{out} mixes versions: model/ digest {model}, recorded {recorded}"
    run = (out / "runs" / "uhd-binary.trec").read_text()
    return (json.dumps(results), model, fingerprint_of(out / "index-binary"), fingerprint_of(out / "index-weighted"),
            run, json.dumps(read_json(out / "extra_results.json")))


def leftovers(writer: str, root: Path) -> list[str]:
    """Temporaries of killed writers beside a target (or, for a directory target, inside it)."""
    names = {Path(t).name for t in TARGETS[writer]}
    pattern = re.compile(r"\.(.+)\.(tmp|old)-.*")
    found = []
    for folder in {(root / t).parent for t in TARGETS[writer]}:
        if folder.is_dir():
            found += [p.name for p in folder.iterdir() if (m := pattern.fullmatch(p.name)) and m[1] in names]
    for target in TARGETS[writer]:
        if (root / target).is_dir():
            found += [f"{target}/{p.name}" for p in (root / target).iterdir() if pattern.fullmatch(p.name)]
    return found


def run_child(writer: str, root: Path, version: int, step: int | None = None, fallback: bool = False,
              kill_after: float | None = None) -> tuple[str, float | None]:
    """Fork a writer of one version; returns ("done", seconds) or ("killed", None).

    Forked, not spawned: the child inherits the compiled numba kernels and the tiny models, so a kill costs the
    write alone. The kill is a real SIGKILL of a separate process, from itself (`step`) or from here (`kill_after`).
    """
    warm_up(writer)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(read_fd)
            child(writer, root, version, step, fallback, write_fd)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        ready = pipe.readline()
        if ready and kill_after is not None:
            time.sleep(kill_after)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        rest = pipe.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "killed", None
    if not ready or os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"the {writer} writer failed (exit status {os.waitstatus_to_exitcode(status)})")
    return "done", float(rest.split()[-1])


@functools.cache
def warm_up(writer: str) -> None:
    """Compile the codec's numba functions and build the models here, once, before any fork."""
    from uhdsearch.index.inverted import BinaryIndex

    BinaryIndex.from_encoding(encoding(0, n=50), [f"d{i}" for i in range(50)], None)
    if writer in ("model", "quickstart"):
        tiny_model(1), tiny_model(2)
    if writer == "quickstart":
        import uhdsearch.recipes.quickstart  # noqa: F401 - imported once here, not in every forked writer


def references(writer: str, root: Path) -> tuple[dict[int, dict[str, object]], float]:
    """Write A and B completely once and fingerprint them; returns them and the median write time."""
    refs, seconds = {}, []
    for version in (1, 2):
        _, elapsed = run_child(writer, root / f"ref{version}", version)
        seconds.append(elapsed)
        refs[version] = {name: fingerprint_of(root / f"ref{version}" / name) for name in TARGETS[writer]}
    return refs, float(np.median(seconds))


def harness(writer: str, root: Path, max_steps: int = 60, random_kills: int = 5, seed: int = 0,
            plan: list[tuple[bool, int]] | None = None) -> dict:
    """Kill `writer` at every swap step (both modes) and `random_kills` times at random; check after each kill.

    `plan` replaces "every step" with chosen (fallback, step) pairs.
    """
    rng = random.Random(seed)
    refs, seconds = references(writer, root)
    target_root = root / "live"
    version = 1
    run_child(writer, target_root, version)  # the previous state
    outcomes: Counter = Counter()
    kills = 0
    trials: list[tuple[str, int | None, bool, float | None]] = []
    plan = plan or [(fallback, step) for fallback in (False, True) for step in range(1, max_steps + 1)]
    trials += [("step", step, fallback, None) for fallback, step in plan]
    trials += [("random", None, False, rng.uniform(0, seconds * 1.2)) for _ in range(random_kills)]
    finished_steps = set()
    for kind, step, fallback, delay in trials:
        if kind == "step" and fallback in finished_steps:
            continue
        new = 3 - version
        result, _ = run_child(writer, target_root, new, step=step, fallback=fallback, kill_after=delay)
        state = state_of(writer, target_root, refs)
        if result == "done":
            if kind == "step":
                finished_steps.add(fallback)  # the write has fewer steps than this: the mode is covered
            assert set(state.values()) == {new}, f"a finished write left {state}"
            assert not leftovers(writer, target_root), f"temporaries after a finished write: {leftovers(writer, target_root)}"
        else:
            kills += 1
        assert set(state.values()) in ({version}, {new}), f"targets of one writer disagree: {state}"
        outcomes[(kind, "new" if set(state.values()) == {new} else "old")] += 1
        version = new if set(state.values()) == {new} else version
    # The next successful write cleans up whatever the kills left.
    new = 3 - version
    run_child(writer, target_root, new)
    assert set(state_of(writer, target_root, refs).values()) == {new}
    left = leftovers(writer, target_root)
    assert not left, f"temporaries left after a successful write: {left}"
    return {"writer": writer, "kills": kills, "write_seconds_median": round(seconds, 3),
            "outcomes": {f"{k}:{s}": n for (k, s), n in sorted(outcomes.items())}, "failures": 0}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", type=settings.comma_list())
    parser.add_argument("--random-kills", type=int)
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--out", type=Path, default=None)
    args, config, values = settings.parse_args(parser, "crash_harness", argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for writer in args.writers:
            started = time.perf_counter()
            row = harness(writer, Path(tmp) / writer, max_steps=args.max_steps, random_kills=args.random_kills,
                          seed=args.seed)
            row["seconds"] = round(time.perf_counter() - started, 1)
            rows.append(row)
            print(f"{writer:11s} kills {row['kills']:3d}  failures 0  write {row['write_seconds_median']:.2f} s  "
                  f"{row['outcomes']}", flush=True)
    out = args.out or settings.RESULTS / "crash_harness.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**settings.record(config, values), "writers": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
