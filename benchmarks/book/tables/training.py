"""What training earns: the kept head against the untrained start, per collection, and the query limit."""
from __future__ import annotations

from ..render import Table, table
from ..sources import Results, bold, cpu, f4, signed
from .quality import COLLECTIONS, NAMES, QUICKSTART


@table("training-earns")
def training_earns(results: Results) -> Table:
    """The shipped quickstart models against the untrained centred head at the same query limit (test, once)."""
    compared = results("length_norm.json")["untrained_devnorm"]
    rows = []
    for name in COLLECTIONS:
        run, extra = results(f"quickstart_{name}.json"), results(f"quickstart_{name}_extra.json")
        chosen, steps = run["config"]["dev_selection"], run["config"]["training_steps"]
        dev = dict(extra["dev_evals"])
        best_step = max(dev, key=lambda step: (dev[step], -step))
        kept = ("the untrained head (step 0)" if chosen["head"] == "untrained"
                else f"step {best_step} of {steps}")
        pair = compared[name]
        if pair["shipped_digest"] != run["model_digest"]:
            raise ValueError(f"length_norm.json compares model {pair['shipped_digest']}, "
                             f"quickstart_{name}.json ships {run['model_digest']}")
        gain = pair["shipped_normalized"] - pair["untrained_normalized"]
        rows.append([NAMES[name], f"{f4(dev[0])} → {f4(max(dev.values()))}", kept, str(chosen["query_max_length"]),
                     f4(pair["untrained_normalized"]), bold(f4(pair["shipped_normalized"]), gain > 0),
                     signed(gain), f"{f4(pair['untrained_plain'])} / {f4(pair['shipped_plain'])}"])
    return Table(["collection", "dev nDCG@10, step 0 → best", "kept", "query tokens",
                  "test: untrained head", "test: shipped model", "gain", "plain counts: untrained / shipped"], rows,
                 [*(f"quickstart_{n}.json" for n in COLLECTIONS), "length_norm.json"],
                 QUICKSTART.replace("--out out/quickstart", "--data DIR --out OUT")
                 + "; python -m benchmarks.experiments.length_norm untrained --result-key untrained_devnorm",
                 cpu(results("quickstart_scifact.json")),
                 ["Test nDCG@10 of UHD-binary with the search defaults. The dev split is 10 % of the train queries "
                  "(SciFact) or of the corpus's own ICT queries judged by the dense backbone (CISI, Medline); "
                  "the untrained head (step 0) competes in every choice, so training is kept only where it wins "
                  "on dev."])


@table("query-limits")
def query_limits(results: Results) -> Table:
    rows, sources = [], []
    for name in ("cisi", "medline"):
        for variant, label in (("_untrained", "untrained head"), ("", "trained head")):
            file = f"query_length_{name}{variant}.json"
            sources.append(file)
            run = results(file)
            dev = {r["query_max_length"]: r["dev_binary"] for r in run["rows"]}
            cells = [bold(f4(dev.get(n)), n == run["chosen"]) if n in dev else "—" for n in (32, 64, 128, 256)]
            rows.append([NAMES[name], label, *cells, f4(run["test_binary"]["nDCG@10"]),
                         f4(run["test_weighted"]["nDCG@10"])])
    return Table(["collection", "model", "dev: 32 tokens", "64", "128", "256", "test binary at the choice",
                  "test weighted"], rows, sources,
                 "python -m benchmarks.experiments.query_length --data DIR --model MODEL --test-once",
                 cpu(results(sources[0])),
                 ["Dev nDCG@10 (plain binary counts) per query token limit, the choice in bold; test scored once, "
                  "at the choice. The recipe now makes this choice itself (`Recipe.query_lengths`)."])


# recipes/presets.py COMPACT, whose dev figures are a cheaper_recipe run read at fewer checks (test_book.py checks)
COMPACT_DIM, COMPACT_EVAL_EVERY = 16_384, 100


@table("cheaper-recipes")
def cheaper_recipes(results: Results) -> Table:
    """Cheaper variants of the quickstart recipe on SciFact dev (issue 33), beside the preset's own dev checks."""
    extra, preset = results("quickstart_scifact_extra.json"), results("quickstart_scifact.json")
    dev = dict(extra["dev_evals"])
    steps, dim = preset["config"]["training_steps"], preset["config"]["recipe"]["encoder"]["dim"]
    rows = []
    for every in (50, 150):  # the preset's own checks, and the same run read at every 150 steps only
        seen = {s: v for s, v in dev.items() if s % every == 0}
        best = max(seen, key=lambda s: (seen[s], -s))
        rows.append([f"quickstart preset{'' if every == 50 else f', read at every {every} steps'}",
                     f"{dim:,}", str(steps),
                     "256", ", ".join(map(str, seen)), f"{f4(seen[0])} → {f4(seen[best])} (step {best})",
                     f"{preset['seconds']['train']:.0f} (the quickstart's run)" if every == 50 else "—"])
    run = results("cheaper_recipe.json")
    for v in run["variants"]:
        readings = [(v["variant"], v["dev_evals"])]
        if v["fields"] == {"dim": COMPACT_DIM}:
            readings.append((f"{v['variant']}, read at every {COMPACT_EVAL_EVERY} steps (the compact preset)",
                             [(s, score) for s, score in v["dev_evals"]
                              if s % COMPACT_EVAL_EVERY == 0 or s == v["steps"]]))
        for name, evals in readings:
            best = max(evals, key=lambda e: (e[1], -e[0]))
            rows.append([name, f"{v['fields'].get('dim', dim):,}", str(v["steps"]),
                         str(v["fields"].get("document_tokens", 256)), ", ".join(str(s) for s, _ in evals),
                         f"{f4(evals[0][1])} → {f4(best[1])} (step {best[0]})",
                         f"{v['train_seconds']:.0f}" if name == v["variant"] else "—"])
    return Table(["recipe", "head dim", "steps", "document tokens in training", "dev checks at",
                  "dev nDCG@10, step 0 → kept", "training s"], rows,
                 ["quickstart_scifact_extra.json", "cheaper_recipe.json"],
                 "python -m benchmarks.experiments.cheaper_recipe", cpu(run),
                 ["SciFact dev split only (10 % of the train queries); test is not read. Training seconds include "
                  "the dev checks and the head and query-length choice, natively on the CPU named here; the first "
                  "two variants shared the cores with test runs for part of their time."])


@table("compact-check")
def compact_check(results: Results) -> Table:
    """The search defaults on dev for both heads, and the paired test of their test runs (issue 33)."""
    run = results("compact_check.json")
    alphas = run["settings"]["length_norm"]
    rows = []
    for name, grid in run["dev_grid"].items():
        best = max(r["dev nDCG@10"] for r in grid)
        for max_df in run["settings"]["max_df"]:
            cells = {r["length_norm"]: r["dev nDCG@10"] for r in grid if r["max_df"] == max_df}
            rows.append([name, "every dimension" if max_df >= 1.0 else f"{max_df:g}",
                         *(bold(f4(cells[a]), cells[a] == best) for a in alphas)])
    paired = run["test_paired"]
    return Table(["head", "stop dimensions: max_df", *(f"length norm {a:g}" for a in alphas)], rows,
                 ["compact_check.json"], "python -m benchmarks.experiments.compact_check", cpu(run),
                 [f"Dev nDCG@10 of UHD-binary: the recipe's {run['dev_queries']} held-out train queries over the whole "
                  "corpus; the search defaults are max_df 0.3 and length norm 0.3; each head's best in bold. On the "
                  f"{paired['queries']} test queries, already reported, compact (held to AVX2) minus the quickstart "
                  "(natively) is "
                  f"{signed(paired['difference'])} (paired t-test p = {paired['p']:.2f}; compact better on "
                  f"{paired['compact_better']} queries, worse on {paired['quickstart_better']})."])
