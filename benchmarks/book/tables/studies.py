"""The papers' studies: isotropy of the backbone's states, and the UHD ablations."""
from __future__ import annotations

from ..render import Table, table
from ..sources import Results, cpu, f3, f4
from .quality import COLLECTIONS, NAMES


@table("isotropy")
def isotropy(results: Results) -> Table:
    runs = {name: results(f"isotropy_{name}.json") for name in COLLECTIONS}
    rows = []
    for key in runs["scifact"]["rows"]:
        rows.append([key, *(f"{f3(runs[n]['rows'][key]['I(W) held-out'])} / "
                            f"{f3(runs[n]['rows'][key]['avg_cos held-out'])}" for n in COLLECTIONS)])
    return Table(["states / transform", *(NAMES[n] for n in COLLECTIONS)], rows,
                 [f"isotropy_{n}.json" for n in COLLECTIONS], "python -m benchmarks.experiments.isotropy",
                 cpu(runs["scifact"]),
                 ["Jung et al.'s isotropy I(W) (1 is isotropic) / the mean cosine between texts, on held-out "
                  "documents; whitening and the flows are fit on other documents of the same collection."])


@table("ablations")
def ablations(results: Results) -> Table:
    run = results("ablations_scifact.json")
    rows = []
    for r in run["rows"]:
        if r.get("selection", "value") != "value" or r["scoring"] != "binary":
            continue
        rows.append([r["variant"], "all" if r["query_k"] is None else str(r["query_k"]), f4(r["nDCG@10"]),
                     f4(r["R@100"]), f"{r.get('active_per_doc', 0):,.0f}"])
    return Table(["variant", "query_k", "nDCG@10", "R@100", "active dims per document"], rows,
                 ["ablations_scifact.json"], "python -m benchmarks.experiments.ablations", cpu(run),
                 ["SciFact test, binary scoring, frozen all-MiniLM-L6-v2, 256-token documents, dim 32,768 "
                  "(the paper's Table 4 axes; plain counts, every dimension kept)."])
