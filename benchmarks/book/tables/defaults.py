"""How each search default was chosen: every grid on train or dev data, the choice in bold."""
from __future__ import annotations

from ..render import Table, table
from ..sources import Results, bold, cpu, f4, ms, ratio


@table("stop-dims")
def stop_dims(results: Results) -> Table:
    run = results("stop_dims.json")
    rows = [[bold(str(r["max_df"]), r["max_df"] == run["chosen_max_df"]), f"{r['query_dims']:.0f}",
             f"{r['postings_saving']:.2f}x", f4(r["binary"]), f4(r["binary-idf4"]), f4(r["weighted"])]
            for r in run["grids"][run["settings"]["choose_on"]]]
    return Table(["max_df", "query dims kept", "fewer postings", "binary", "binary, 4-level IDF", "weighted"], rows,
                 ["stop_dims.json"], "python -m benchmarks.experiments.stop_dims", cpu(run),
                 [f"{run['settings']['choose_on']} nDCG@10 of the quickstart model; chosen: max_df "
                  f"{run['chosen_max_df']} (query dimensions active in more of the documents are dropped, on "
                  "indexes of 1,000 documents or more)."])


@table("length-norm")
def length_norm(results: Results) -> Table:
    run = results("length_norm.json")
    grids = run["grids"]
    alphas = list(grids["scifact:train:alone"])
    keys = [k for k in ("scifact:train:alone", "scifact:train:+100000") if k in grids]
    rows = [[bold(a, float(a) == run["chosen_alpha"]), *(f4(grids[k][a]) for k in keys)] for a in alphas]
    return Table(["alpha", *(k.replace("scifact:train:", "SciFact train, ").replace("+100000", "+100k distractors")
                             for k in keys)], rows, ["length_norm.json"],
                 "python -m benchmarks.experiments.length_norm", cpu(run),
                 [f"Binary counts divided by the document's active dims ** alpha; rule: {run['rule']}; "
                  f"chosen: {run['chosen_alpha']}."])


@table("cascade")
def cascade(results: Results) -> Table:
    run = results("cascade_ln0.3.json")
    chosen = "0.1:300"
    rows = [[bold(r["cascade"], r["cascade"] == chosen), ms(r["p50_ms"]), ms(r["p95_ms"]), ratio(r["x_bm25s"]),
             ratio(r["x_exact"]), f4(r["train_nDCG@10"]), f4(r["train_alone_nDCG@10"])] for r in run["rows"]]
    return Table(["cascade (first-pass max_df : depth)", "p50 ms", "p95 ms", "x bm25s", "x exact",
                  "train nDCG@10, +100k distractors", "train nDCG@10, alone"], rows, ["cascade_ln0.3.json"],
                 "python -m benchmarks.experiments.cascade speed --length-norm 0.3", cpu(run),
                 [f"{run['n_documents']:,} documents, {run['n_queries']} queries, {run['threads']} thread, "
                  f"k={run['k']}; bm25s {ms(run['bm25s_p50_ms'])} ms in the same run. Chosen for length-normalized "
                  f"counts: {chosen} (the fastest cell that keeps exact search's SciFact train score)."])
