"""Cost growth: ms per query against the number of documents, UHD binary and 4-bit IDF against bm25s, one thread.

For each size, benchmarks/lib/synthetic_binary.py's synthetic binary index (the quickstart model's density on SciFact,
the real SciFact test queries encoded by that model) is searched one query at a time, binary and 4-bit IDF with and
without the stop-dimension threshold, the systems interleaved query by query; bm25s runs in the same process on
dictionary text of the same size (search_speed.py's peer: real text, not the same postings). Sizes whose index is
not generated yet are skipped unless --generate. The exponent b of ms ~ N^b is fitted by least squares on log-log
over the sizes >= fit_from. Index bytes per document: the index directory's files over N.

    .venv/bin/python -m benchmarks.lib.synthetic_binary 10000 30000 100000 300000 1000000 3000000
    .venv/bin/python -m benchmarks.speed.growth

Prints a table, writes benchmarks/results/growth.json and docs/growth.png. Settings: benchmarks/configs/growth.toml.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
from pathlib import Path

import numpy as np

from benchmarks.lib.density import load_stats
from benchmarks.lib.peers import bench_bm25s
from benchmarks.lib.settings import RESULTS, ROOT, comma_list, parse_args, record
from benchmarks.lib.speed_common import K, directory_bytes, log
from benchmarks.lib.synthetic_binary import WORK_DIR, binary_index_dir
from benchmarks.lib.timer import percentiles, time_interleaved
from uhdsearch.index.inverted import InvertedIndex
from uhdsearch.search.stopdims import QueryWeighting

OUT_JSON = RESULTS / "growth.json"
OUT_PNG = ROOT / "docs" / "growth.png"


def is_generated(n_docs: int, seed: int) -> bool:
    return any((d / "done.json").is_file() for d in WORK_DIR.glob(f"n{n_docs}-seed{seed}-*"))


def bench_size(n_docs: int, queries, args) -> list[dict]:
    directory = binary_index_dir(n_docs, args.seed)
    index = InvertedIndex.load(directory, mmap=True, verify=False)
    index.warm_up()
    queries = queries[:min(queries.n, args.n_queries)]
    systems = {}
    for max_df in (None, args.max_df):
        weighting = QueryWeighting.of_index(index, max_df, idf=True)
        kept = weighting.drop(queries)
        levels = weighting.quantize(kept)
        tag = "" if max_df is None else f" max_df={max_df:g}"
        systems[f"uhd binary{tag}"] = (lambda q: index.search_encoded(q, K, [1.0], "binary", n_threads=1),
                                       [kept[i:i + 1] for i in range(kept.n)])
        systems[f"uhd idf4{tag}"] = (lambda q: index.search_encoded(q, K, [1.0], "quantized", n_threads=1),
                                     [levels[i:i + 1] for i in range(levels.n)])
    times = time_interleaved(systems, queries.n)
    bytes_per_doc = round(directory_bytes(directory) / n_docs, 1)
    rows = [{"system": name, "n_docs": n_docs, **percentiles(t, digits=4), "n_queries": int(t.shape[0]),
             "index_bytes_per_doc": bytes_per_doc} for name, t in times.items()]
    del index, systems
    gc.collect()
    bm25 = bench_bm25s(n_docs, queries.n, args.seed)[0]
    rows.append({"system": "bm25s", "n_docs": n_docs, "p50_ms": round(bm25["p50_ms"], 4),
                 "p95_ms": round(bm25["p95_ms"], 4), "n_queries": queries.n,
                 "index_bytes_per_doc": bm25["index_bytes_per_doc"], "note": bm25["note"]})
    for r in rows:
        r["x_bm25s"] = round(r["p50_ms"] / bm25["p50_ms"], 4)
        r["load_average"] = [round(x, 2) for x in os.getloadavg()]
        log(json.dumps({k: v for k, v in r.items() if k != "note"}))
    return rows


def fit_exponents(rows: list[dict], fit_from: int) -> dict[str, dict]:
    fits = {}
    for system in dict.fromkeys(r["system"] for r in rows):
        points = [(r["n_docs"], r["p50_ms"]) for r in rows if r["system"] == system and r["n_docs"] >= fit_from]
        if len(points) >= 2:
            n, ms = np.log(np.array(points, np.float64)).T
            slope, intercept = np.polyfit(n, ms, 1)
            fits[system] = {"exponent": round(float(slope), 3), "ms_at_1m": round(float(np.exp(intercept) * 1e6 ** slope), 3),
                            "sizes": [int(p[0]) for p in points]}
    return fits


def plot(rows: list[dict], fits: dict, path: Path, note: str, fit_from: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for system in dict.fromkeys(r["system"] for r in rows):
        points = sorted((r["n_docs"], r["p50_ms"]) for r in rows if r["system"] == system)
        n, ms = np.array(points).T
        fit = f" (N^{fits[system]['exponent']:.2f})" if system in fits else ""
        ax.plot(n, ms, "o-", label=system + fit)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylabel("ms per query (p50, one thread, k=10)")
    ax.set_xlabel(f"documents N (exponents fitted over N >= {fit_from:,})")
    ax.set_title("Cost growth: synthetic UHD index at the real density vs bm25s", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, note, fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=comma_list(int))
    parser.add_argument("--n-queries", type=int)
    parser.add_argument("--max-df", type=float)
    parser.add_argument("--fit-from", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--generate", action="store_true", help="generate missing indexes (slow: ~minutes per 1M)")
    parser.add_argument("--append", action="store_true",
                        help="keep the rows of other sizes from the existing result file (a later, larger size)")
    args, config, settings = parse_args(parser, "growth", argv)
    _, queries, _ = load_stats()
    load_start = os.getloadavg()
    sizes = [n for n in args.sizes if args.generate or is_generated(n, args.seed)]
    skipped = sorted(set(args.sizes) - set(sizes))
    if skipped:
        log(f"skipped (not generated; --generate or benchmarks/lib/synthetic_binary.py): {skipped}")
    rows = [r for n in sizes for r in bench_size(n, queries, args)]
    runs = [{"sizes": sizes, "load_average_at_start": [round(x, 2) for x in load_start],
             "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}]
    if args.append and OUT_JSON.is_file():
        before = json.loads(OUT_JSON.read_text())
        rows = [r for r in before["rows"] if r["n_docs"] not in sizes] + rows
        rows.sort(key=lambda r: r["n_docs"])
        runs = before.get("runs", []) + runs
    skipped = sorted(set(args.sizes) - {r["n_docs"] for r in rows})
    fits = fit_exponents(rows, args.fit_from)
    print(f"{'system':<28} {'n_docs':>10} {'p50 ms':>9} {'x bm25s':>8} {'bytes/doc':>10}")
    for r in rows:
        print(f"{r['system']:<28} {r['n_docs']:>10,} {r['p50_ms']:>9.3f} {r['x_bm25s']:>8.3f} "
              f"{r['index_bytes_per_doc']:>10}")
    for system, fit in fits.items():
        print(f"{system:<28} exponent {fit['exponent']:.3f} over N in {fit['sizes']}")
    loads = [x for run in runs for x in (run["load_average_at_start"][0], run["load_average_at_end"][0])]
    plot(rows, fits, OUT_PNG, f"1-min load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores; bm25s "
                              "on dictionary text of the same N; ratios only within one N", args.fit_from)
    result = {"script": "benchmarks/speed/growth.py", **record(config, settings), "threads": 1, "k": K,
              "skipped_sizes": skipped, "runs": runs, "fits": fits, "rows": rows}
    OUT_JSON.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {OUT_JSON} and {OUT_PNG}")


if __name__ == "__main__":
    main()
