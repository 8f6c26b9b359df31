"""Quality per collection: the main job's table, the README's headline and the comparison systems."""
from __future__ import annotations

from ..render import Table, table
from ..sources import Results, bold, cpu, f4, ms, ratio, system

QUICKSTART = ".venv/bin/uhdsearch quickstart --out out/quickstart"
METRICS = ("nDCG@10", "RR@10", "R@100", "R@1000")
COLLECTIONS = ("scifact", "cisi", "medline")
NAMES = {"scifact": "SciFact", "cisi": "CISI", "medline": "Medline"}


def marked(value: float, p_value: float | None) -> str:
    """A score with * when a paired t-test against BM25 found it significantly better (p < 0.05)."""
    return f4(value) + ("*" if p_value is not None and p_value < 0.05 else "")


@table("headline")
def headline(results: Results) -> Table:
    run, extra = results("quickstart_scifact.json"), results("quickstart_scifact_extra.json")
    hybrids = results("devnorm_compare_scifact.json")["systems"]
    speed = results("cascade_ln0.3.json")
    by_cascade = {row["cascade"]: row for row in speed["rows"]}
    default = by_cascade["0.1:300"]
    scores = run["systems"]
    rows = [
        ["**UHD-binary** (trained; the defaults)", bold(f4(system(scores, "uhd-binary")["nDCG@10"])),
         f"**{ms(default['p50_ms'])} ms ({ratio(default['x_bm25s'])})**"],
        ["UHD-weighted (trained)", f4(system(scores, "uhd-weighted")["nDCG@10"]), "—"],
        ["UHD impact planes (trained)", f4(scores["uhd-planes"]["nDCG@10"]), "—"],
        ["BM25 (bm25s)", f4(scores["bm25"]["nDCG@10"]), f"{ms(speed['bm25s_p50_ms'])} ms (1.00x)"],
        ["dense (all-MiniLM-L6-v2)", f4(scores["dense"]["nDCG@10"]), "—"],
        ["hybrid UHD-binary + BM25", f4(hybrids["hybrid-uhdnorm-bm25"]["nDCG@10"]), "—"],
        ["hybrid dense + BM25", f4(hybrids["hybrid-dense-bm25"]["nDCG@10"]), "—"],
    ]
    del extra
    return Table(["system", "SciFact test nDCG@10", "1M documents, search p50 (x bm25s), 1 thread"], rows,
                 ["quickstart_scifact.json", "devnorm_compare_scifact.json", "cascade_ln0.3.json"],
                 QUICKSTART + "; uhdsearch compare; python -m benchmarks.experiments.cascade speed", cpu(run))


@table("quickstart-scifact")
def quickstart_scifact(results: Results) -> Table:
    run, extra = results("quickstart_scifact.json"), results("quickstart_scifact_extra.json")
    p = extra["p_values_vs_bm25"]
    names = [("bm25", "BM25 (bm25s, k1=0.9, b=0.4)"), ("dense", "dense (MiniLM as shipped, mean pooling)"),
             ("uhd-binary", "**UHD-binary** (the defaults: stop dims, counts / active dims ** 0.3, cascade)"),
             ("uhd-weighted", "UHD-weighted (stop dims dropped)"),
             ("uhd-planes", "UHD impact planes (2-bit document levels, 3-bit query levels)")]
    rows = [[label, *(marked(system(run["systems"], name)[m], system(p, name, {}).get(m)) for m in METRICS)]
            for name, label in names]
    for key, label in (("uhd_binary_without_length_norm", "UHD-binary, plain counts (`--length-norm none`)"),
                       ("uhd_binary_without_stop_dimensions", "UHD-binary, every dimension (`--max-df none`)")):
        rows.append([label, *(f4(extra[key][m]) for m in METRICS)])
    rerank = system(extra["rerank_bm25_top1000"], "uhd-binary-rerank-bm25")
    rows.append(["UHD-binary re-ranking BM25's top 1000", *(f4(rerank[m]) for m in METRICS)])
    return Table(["system", *METRICS], rows, ["quickstart_scifact.json", "quickstart_scifact_extra.json"],
                 QUICKSTART, cpu(run),
                 ["\\* significantly better than BM25 (paired t-test, p < 0.05); rows without marks were not tested."])


@table("quickstart-collections")
def quickstart_collections(results: Results) -> Table:
    rows, sources = [], []
    for name in COLLECTIONS:
        file = f"quickstart_{name}.json"
        run, extra = results(file), results(f"quickstart_{name}_extra.json")
        sources.append(file)
        chosen = run["config"].get("dev_selection", {})
        kept = (f"{chosen.get('head', '?')} head, queries to {chosen.get('query_max_length', '?')} tokens"
                if chosen else "—")
        s = run["systems"]
        uhd = {n: system(s, n)["nDCG@10"] for n in ("uhd-binary", "uhd-weighted", "uhd-planes")}
        best_uhd = max(uhd, key=uhd.get)
        rows.append([NAMES[name], kept, *(bold(f4(score), n == best_uhd) for n, score in uhd.items()),
                     f4(extra["uhd_binary_without_length_norm"]["nDCG@10"]), f4(s["dense"]["nDCG@10"]),
                     f4(s["bm25"]["nDCG@10"])])
    return Table(["collection", "kept on dev", "UHD-binary", "UHD-weighted", "UHD planes", "binary, plain counts",
                  "dense", "BM25"], rows, sources,
                 QUICKSTART.replace("--out out/quickstart", "--data ../shared/data/NAME --out out/quickstart-NAME"),
                 cpu(results("quickstart_scifact.json")), ["Test nDCG@10; the best UHD system in bold."])


@table("comparison-systems")
def comparison_systems(results: Results) -> Table:
    runs = {name: results(f"baselines_{name}.json") for name in COLLECTIONS}
    systems = list(runs["scifact"]["systems"])
    rows = []
    for system in systems:
        cells = []
        for name in COLLECTIONS:
            scores = runs[name]["systems"].get(system)
            p = runs[name].get("p_values", {}).get(system, {}).get("nDCG@10")
            cells.append("—" if scores is None else marked(scores["nDCG@10"], p))
        rows.append([f"`{system}`", *cells])
    return Table(["system", *(NAMES[n] for n in COLLECTIONS)], rows,
                 [f"baselines_{n}.json" for n in COLLECTIONS],
                 "python -m benchmarks.experiments.baselines --data ../shared/data/NAME", cpu(runs["scifact"]),
                 ["Test nDCG@10 of every system `uhdsearch compare --systems all` builds; \\* significantly better "
                  "than BM25 (paired t-test, p < 0.05). The UHD systems here use the untrained centred head "
                  "of each collection with every dimension kept."])
