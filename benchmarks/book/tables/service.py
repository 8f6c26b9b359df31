"""The service under load, scale-out on Ray, and what survives a kill or a damaged file."""
from __future__ import annotations

from ..render import Table, table
from ..sources import Results, cpu, ms, ratio


def load_rows(run: dict) -> list[list[str]]:
    rows = []
    for one in run["runs"]:
        total, steady = one["total"], one.get("after_warm_up")
        cache = one.get("explain_cache")
        rows.append([one["name"], f"{total['requests']:,}", str(total["failures"]), f"{total['rps']:.1f}",
                     ms(total["p50_ms"]), ms(total["p99_ms"]),
                     f"{ms(steady['p50_ms'])} / {ms(steady['p99_ms'])}" if steady else "—",
                     f"{one['cores_busy']['server']:.2f}" if one.get("cores_busy") else "—",
                     f"{cache['hit']:,} / {cache['miss']:,}" if cache else "—",
                     f"{100 * one['rss_growth']:.1f} %"])
    return rows


def serve_options(settings: dict) -> list[str]:
    options = settings.get("serve_options", [])
    return options.split() if isinstance(options, str) else list(options)


HEADER = ["run", "requests", "failures", "requests/s", "p50 ms", "p99 ms", "measured minute: p50 / p99 ms",
          "server cores busy", "/explain cache hits / misses", "memory growth"]


def load_settings(run: dict) -> str:
    s = run["settings"]
    return (f"{s['users']} locust users, {s['warm_up']} s warm-up + {s['duration']} s measured, "
            f"{int(100 * s['explain_share'])} % /explain, server options `{' '.join(serve_options(s))}`."
            + (f" Note: {run['label']}." if run.get("label") else ""))


@table("serve-load")
def serve_load(results: Results) -> Table:
    run = results("serve_load.json")
    return Table(HEADER, load_rows(run), ["serve_load.json"], "python -m benchmarks.speed.serve_load",
                 cpu(run, f"not recorded ({run['cpu_count']} cores)"),
                 [load_settings(run)
                  + "".join(f" {one['name']}: {one['consistency_checks']}"
                            + (f"; it ended with {one['n_segments_end']} segments (`--max-segments` 10)."
                               if one.get("n_segments_end") is not None else ".")
                            for one in run["runs"] if one.get("consistency_checks"))])


def load_table(results: Results, file: str, command: str) -> Table:
    """One load run's table: its rows, its settings and its CPU."""
    run = results(file)
    return Table(HEADER, load_rows(run), [file], command, cpu(run), [load_settings(run)])


@table("serve-before-after")
def serve_before_after(results: Results) -> Table:
    return load_table(results, "serve_load_before_after.json",
                      "python -m benchmarks.speed.serve_load --baseline-src OLD/src --runs static")


@table("serve-no-explain-cache")
def serve_no_explain_cache(results: Results) -> Table:
    return load_table(results, "serve_load_no_cache.json", "python -m benchmarks.speed.serve_load --runs static "
                      "--serve-options '--onnx --explain-cache 0'")


@table("serve-capacity")
def serve_capacity(results: Results) -> Table:
    return load_table(results, "serve_load_capacity.json",
                      "python -m benchmarks.speed.serve_load --baseline-src OLD/src --runs static --users 150")


@table("serve-overload")
def serve_overload(results: Results) -> Table:
    run = results("serve_load_overload.json")
    rows = []
    for one in run["runs"]:
        total = one["total"]
        refused = sum(n for error, n in one["errors"].items() if "code=503" in error)
        other = total["failures"] - refused
        rows.append([one["name"], f"{total['requests']:,}", f"{total['requests'] - total['failures']:,}",
                     f"{refused:,}", str(other), ms(total["p50_ms"]), ms(total["p99_ms"])])
    s = run["settings"]
    return Table(["run", "requests", "answered with results", "refused with 503", "any other failure", "p50 ms",
                  "p99 ms"], rows, ["serve_load_overload.json"],
                 f"python -m benchmarks.speed.serve_load --runs static --users {s['users']}",
                 cpu(run, f"not recorded ({run['cpu_count']} cores)"),
                 [f"{s['users']} locust users against the same server: what admission control answers beyond its "
                  "queue (`--max-queue`, `--queue-timeout`) is a 503 with `Retry-After`, at once."])


@table("scale-encode")
def scale_encode(results: Results) -> Table:
    run = results("scale.json")
    rows = [[r["system"], f"{r['n_docs']:,}", f"{r['docs_per_s']:.2f}", ratio(r.get("ratio_to_single", 1.0))]
            for r in run["rows"] if r["what"] == "encode"]
    return Table(["encoding", "documents", "documents/s", "x one process"], rows, ["scale.json"],
                 "python -m benchmarks.speed.scale", cpu(run, f"not recorded ({run['cpu_count']} cores)"))


@table("scale-search")
def scale_search(results: Results) -> Table:
    run = results("scale.json")
    rows = [[r["system"], ms(r["p50_ms"]), f"{r['qps']:.0f}", ratio(r.get("qps_ratio_to_one_index", 1.0)),
             "yes" if r.get("identical_results", True) else "**no**"]
            for r in run["rows"] if r["what"] == "search"]
    s = run["settings"]
    return Table(["search", "p50 ms", "queries/s", "x one index", "same results"], rows, ["scale.json"],
                 "python -m benchmarks.speed.scale", cpu(run, f"not recorded ({run['cpu_count']} cores)"),
                 [f"{s['n_docs']:,} documents, k={s['k']}; every shard and replica on the same "
                  f"{run['cpu_count']} cores, so this measures the overhead of the Ray path, not a speed-up."])


@table("crash-harness")
def crash_harness(results: Results) -> Table:
    run = results("crash_harness.json")
    rows = [[w["writer"], str(w["kills"]), ", ".join(f"{k} {v}" for k, v in sorted(w["outcomes"].items())),
             str(w["failures"])] for w in run["writers"]]
    return Table(["writer", "SIGKILLs", "opened afterwards as (kill point: version)", "failures"], rows,
                 ["crash_harness.json"], "python -m tests.hardening.crash_harness",
                 cpu(run, "not recorded (x86-64, 2 cores)"),
                 ["`step` kills land at every step of the swap, `random` ones at random moments; a failure would "
                  "be a directory that opens to neither the old nor the new version."])


@table("fuzz-formats")
def fuzz_formats(results: Results) -> Table:
    run = results("fuzz_formats.json")
    rows = [[name, f"{counts.get('error', 0):,}", f"{counts.get('ok', 0):,}"]
            for name, counts in sorted(run["by_format"].items())]
    rows.append(["**all**", f"{run['outcomes'].get('error', 0):,}", f"{run['outcomes'].get('ok', 0):,}"])
    return Table(["format", "refused with IndexFormatError", "opened and searched"], rows, ["fuzz_formats.json"],
                 "python -m tests.hardening.fuzz_formats --cases " + str(run["n_cases"]),
                 cpu(run, f"not recorded ({run.get('cpu', 'x86-64')})"),
                 [f"{run['n_cases']:,} damaged files ({', '.join(run['mutations'])}); crashes: {run['n_crashes']}, "
                  f"unclear errors: {run['n_unclear']}."])
