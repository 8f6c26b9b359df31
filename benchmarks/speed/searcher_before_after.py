"""The Searcher before and after a change, in one run: the same queries on the same index, rankings compared.

Each side runs in its own process with its `src/` first on the import path (the baseline from another checkout,
e.g. a worktree of the commit before the change): it loads the model and the index, encodes the SciFact test
queries, and times `Searcher(model, index).search` one query at a time with the default options, in alternating
rounds so that both sides see the same machine state. The two runs must be identical.

    git worktree add --detach /tmp/old COMMIT
    .venv/bin/python -m benchmarks.speed.searcher_before_after --baseline-src /tmp/old/src \
        --index out/synthetic_binary/n100000-seed0-eaa36038a096/uhd-binary --model out/serve_load_model

Writes benchmarks/results/searcher_before_after.json and prints one line per side.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.lib.settings import RESULTS, ROOT, record
from benchmarks.lib.timer import percentiles

OUT_JSON = RESULTS / "searcher_before_after.json"

# Runs in the child: the code under test is whatever `src/` comes first on sys.path.
CHILD = r"""
import json, sys, time
import numpy as np
import uhdsearch as uhd
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir

model_dir, index_dir, rounds, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
model = UHDEncoder.from_pretrained(model_dir)
try:
    from uhdsearch import open_index
except ImportError:  # before issue 34: the static loader
    from uhdsearch.index.inverted import InvertedIndex as _Loader
    open_index = _Loader.load
index = open_index(index_dir)
queries = list(load_beir(bundled_dataset_dir("scifact"), "test").queries)
searcher = uhd.Searcher(model, index)
searcher.search(queries[:5], k=k)  # warm-up: first encodings, index pages, the kernels' compilation
ms, run = [], {}
for _ in range(rounds):
    for query in queries:
        start = time.perf_counter()
        hits = searcher.search([query], k=k)
        ms.append((time.perf_counter() - start) * 1e3)
        run[query.query_id] = [(h.doc_id, round(float(h.score), 6)) for h in hits[query.query_id]]
print(json.dumps({"ms": ms, "run": run, "uhdsearch": uhd.__file__}))
"""


def side(src: Path, model: Path, index: Path, rounds: int, k: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(model), str(index), str(rounds), str(k)], env=env,
                          capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"the side with {src} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.speed.searcher_before_after", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-src", type=Path, required=True, help="the src/ folder of the code before")
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of every query per side")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--out", type=Path, default=OUT_JSON)
    args = parser.parse_args(argv)
    sides = {"before": args.baseline_src.resolve(), "after": ROOT / "src"}
    ms: dict[str, list[float]] = {name: [] for name in sides}
    runs: dict[str, dict] = {}
    for _ in range(args.rounds):  # alternate, so that neither side gets the quieter minutes
        for name, src in sides.items():
            result = side(src, args.model, args.index, 1, args.k)
            ms[name] += result["ms"]
            runs[name] = result["run"]
    same = runs["before"] == runs["after"]
    rows = []
    for name in sides:
        p = percentiles(np.asarray(ms[name]))
        rows.append({"side": name, "src": str(sides[name]), "queries_timed": len(ms[name]), **p})
        print(f"{name:>6}: p50 {p['p50_ms']:.2f} ms  p95 {p['p95_ms']:.2f} ms  ({len(ms[name])} searches)")
    ratio = rows[1]["p50_ms"] / rows[0]["p50_ms"]
    print(f"after / before p50: {ratio:.3f}; identical rankings: {same}")
    result = {**record(None, vars(args) | {"baseline_src": str(args.baseline_src), "index": str(args.index),
                                            "model": str(args.model), "out": str(args.out)}),
              "rows": rows, "p50_after_over_before": round(ratio, 4), "identical_rankings": same,
              "n_queries": len(runs["after"])}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
