"""Search speed and growth, the WTA product on each kind of CPU, and the main job's time."""
from __future__ import annotations

from ..render import Table, table
from ..sources import Results, bold, cpu, f4, held_to_avx2, ms, ratio, system


@table("wta-paths")
def wta_paths(results: Results) -> Table:
    files = ["wta_paths.json", "wta_paths_avx2.json", "wta_paths_avx2_only.json"]
    runs = [results(file) for file in files]
    columns = [{row["computation"]: row for row in run["encoding"]} for run in runs]
    rows = []
    for computation in columns[0]:
        cells = []
        for run, by_name in zip(runs, columns):
            row = by_name[computation]
            taken = computation == f"bfloat16 {run['machine']['wta_path']}"
            cells.append(bold(f"{ms(row['ms_per_document'])} ({ratio(row['x_float32'])})", taken))
        rows.append([computation, *cells])
    return Table(["ms per document (x float32)", *(_capability(r) for r in runs)],
                 rows, files, "python -m benchmarks.speed.wta_paths",
                 "; ".join(cpu(r) for r in runs),
                 ["The quickstart head (dim 32,768, wta_k 40) on 256-token SciFact documents, medians. In bold, the "
                  "path each CPU takes by default (`uhdsearch info` prints it; `UHDSEARCH_WTA_PATH` forces one)."])


def _capability(run: dict) -> str:
    return f"capability {run['machine']['cpu_capability']}" + (" (held)" if held_to_avx2(run["machine"]) else "")


@table("main-job-time")
def main_job_time(results: Results) -> Table:
    files = ("quickstart_scifact.json", "quickstart_scifact_native.json", "quickstart_scifact_avx2.json",
             "quickstart_scifact_compact_avx2.json", "quickstart_scifact_avx2_only.json")
    rows = []
    for file in files:
        run = results(file)
        wall = run.get("wall_seconds")
        rows.append([cpu(run), run.get("machine", {}).get("wta_path", "native"),
                     f"{run['config']['recipe']['encoder']['dim']:,}", _steps(run["config"]),
                     f"{run['seconds']['train']:,.0f}", f"{run['seconds']['index']:,.0f}",
                     "—" if wall is None else f"{wall / 60:.1f}", f4(system(run["systems"], "uhd-binary")["nDCG@10"])])
    return Table(["CPU", "WTA path", "head dim", "training steps", "training s", "indexing s", "wall minutes",
                  "UHD-binary nDCG@10"], rows, list(files),
                 ".venv/bin/uhdsearch quickstart --out out/quickstart [--preset compact]", "in the first column",
                 ["Training stops at its 20-minute cap (`TrainingArgs.max_minutes`) where the CPU is slow; the dev "
                  "check then keeps the best step reached. Indexing seconds include the backbone's pass over the "
                  "corpus, which training shares. A 16,384-dim head is the compact preset (`--preset compact`)."])


def _steps(config: dict) -> str:
    if config.get("training_out_of_time"):
        return f"{config['training_steps']} of {config['training_planned_steps']}"
    return str(config["training_steps"])


@table("ci-time")
def ci_time(results: Results) -> Table:
    runs = results("ci_time.json")["runs"]

    def minutes(seconds: float | None) -> str:
        return "—" if seconds is None else f"{seconds / 60:.1f}"

    rows = [[cpu(run), run["commit"], minutes(run["seconds"]["total"]), minutes(run["seconds"]["quickstart_fast"]),
             minutes(run["seconds"]["tests"]), minutes(run["seconds"]["slow_tests"]), run["tests"]] for run in runs]
    return Table(["CPU", "commit", "total min", "quickstart --fast min", "test command min", "slow tests min",
                  "tests"], rows, ["ci_time.json"], "bash .ci/run (in a fresh clone)", "in the first column",
                 ["Install, `uhdsearch info`, the smoke run, the test suite, the docs build and the slow tests, on "
                  "2 cores; the rest of the total is the install and the docs build. CI's budget is 30 minutes. "
                  "The AVX2-only run's slow tests shared the cores with one test file for their last 3 minutes."])


@table("search-speed")
def search_speed(results: Results) -> Table:
    rows = []
    for row in results("search_speed.json"):
        if row["n_docs"] < 100_000 or row.get("p50_ms") is None:
            continue
        recall = row.get("recall@10_vs_exact")
        size = row.get("index_bytes_per_doc")
        rows.append([f"{row['n_docs']:,}", row["method"], str(row["threads"]), ms(row["p50_ms"]), ms(row["p95_ms"]),
                     "—" if recall is None else f"{recall:.3f}", "—" if size is None else f"{size:,.0f}"])
    first = results("search_speed.json")[0]
    return Table(["documents", "method", "threads", "p50 ms", "p95 ms", "recall@10 vs exact", "index bytes/doc"],
                 rows, ["search_speed.json"], "python -m benchmarks.speed.search_speed --methods uhd,bm25s,scipy,seismic",
                 cpu(first),
                 ["Synthetic postings at the trained quickstart model's density; bm25s on real dictionary text of "
                  "the same size; exact search (no stop dimensions, no cascade) for UHD. Seismic rows are its "
                  "approximate settings, with their recall against exact."])


@table("growth")
def growth(results: Results) -> Table:
    run = results("growth.json")
    rows = [[system, f"{fit['exponent']:.2f}", ms(fit["ms_at_1m"]),
             f"{min(fit['sizes']):,} – {max(fit['sizes']):,}"] for system, fit in run["fits"].items()]
    return Table(["system", "exponent of p50 time in documents", "p50 ms at 1M (fit)", "sizes fitted"], rows,
                 ["growth.json"], "python -m benchmarks.speed.growth", cpu(run),
                 [f"{run['threads']} thread, k={run['k']}; a time growing as n ** exponent."])


@table("end-to-end")
def end_to_end(results: Results) -> Table:
    run = results("end_to_end.json")
    rows = [[name, ms(row["encode"]["p50_ms"]), ms(row["search"]["p50_ms"]), ms(row["total"]["p50_ms"]),
             f"{row['query_active_dims_p50']:.0f}"] for name, row in run["rows"].items() if "pre-issue" not in name]
    return Table(["query encoder", "encode p50 ms", "search p50 ms", "total p50 ms", "query dims (p50)"], rows,
                 ["end_to_end.json"], "python -m benchmarks.speed.end_to_end", cpu(run),
                 [f"{run['settings']['n_docs']:,} documents ({run['index_kind']}), {run['settings']['threads']} "
                  f"threads, {run['settings']['runtime']} runtime for the backbone."])


@table("index-load")
def index_load(results: Results) -> Table:
    run = results("index_load.json")
    rows = [[("memory-mapped" if load["mmap"] else "read"), ms(load["median_ms"]["with_checks"]),
             ms(load["median_ms"]["without_checks"]), ms(load["checks_cpu_ms"])] for load in run["loads"]]
    return Table(["load", "median ms with checks", "without", "CPU ms of the checks"], rows, ["index_load.json"],
                 "python -m benchmarks.speed.index_load --repeats 9", cpu(run),
                 [f"A {run['n_documents']:,}-document binary index ({run['index_bytes'] / 1e9:.1f} GB); the checks "
                  "refuse damaged files before a kernel reads them."])


@table("searcher-before-after")
def searcher_before_after(results: Results) -> Table:
    run = results("searcher_before_after.json")
    rows = [[r["side"], str(r["queries_timed"]), ms(r["p50_ms"]), ms(r["p95_ms"])] for r in run["rows"]]
    rows.append(["after / before", "", ratio(run["p50_after_over_before"]), ""])
    s = run["settings"]
    return Table(["Searcher", "searches timed", "p50 ms", "p95 ms"], rows, ["searcher_before_after.json"],
                 run["command"], cpu(run),
                 [f"`Searcher(model, index).search` one query at a time with the default options, on "
                  f"`{s['index']}` with the model `{s['model']}`, the {run['n_queries']} SciFact test queries in "
                  f"{s['rounds']} alternating rounds per side; identical rankings: "
                  f"{'yes' if run['identical_rankings'] else '**no**'}."])


@table("wta-product")
def wta_product(results: Results) -> Table:
    runs = [results("wta_product_xeon.json"), results("wta_product_xeon_avx2.json")]
    rows = []
    for i, row in enumerate(runs[0]["rows"]):
        label = row["path"].split(" (")[0]
        rows.append([label, *(f"{ms(run['rows'][i]['ms'])} ({ratio(run['rows'][i]['x_float32'])})" for run in runs)])
    return Table(["the product, ms (x float32)", *(f"capability {r['machine']['cpu_capability']}" for r in runs)],
                 rows, ["wta_product_xeon.json", "wta_product_xeon_avx2.json"],
                 "python -m benchmarks.speed.wta_product --threads 2", "; ".join(cpu(r) for r in runs),
                 [f"The head's product alone ({runs[0]['settings']['tokens']} token states by a 384 x "
                  f"{runs[0]['settings']['dim']:,} head, random values, 2 threads pinned to 2 cores, torch "
                  f"{runs[0]['torch']}), on the CPU of a lent GPU machine; `wta_product` is the function every "
                  "caller uses, on the path it picks."])
