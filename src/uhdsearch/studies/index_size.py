"""Index-size study (Reimers & Gurevych §4-5): relevant documents of a collection's test queries plus a growing
number of distractors, real text or random strings; RR@10, Err and its relative rate against BM25, how often a
random string outranks the relevant document, and the false-positive probability of Eq. 1 at measured angles.

Every index size is a prefix of one seeded distractor sample, so a size's index contains the smaller ones. Dense
and UHD scores are exact (brute force over stored vectors); BM25 is rebuilt at each size (its IDF changes).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from uhdsearch.studies import measures
from uhdsearch.studies.distractors import dictionary_texts, random_strings
from uhdsearch.studies.registry import Study, model_provenance, register

logger = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {
    "data": None,  # BEIR-layout directory; None: the bundled SciFact
    "model": "out/quickstart/model",  # the quickstart's trained model (read only)
    # None: every neural system reads `model`'s backbone; "splade-tiny" (2 layers, hidden 128, ~10x cheaper): dense
    # is its mean-pooled states and UHD the untrained centred head on it (the large index sizes)
    "backbone": None,
    "backbone_uhd_dim": 8192,  # the untrained head's width with `backbone` (the WTA projection is most of its cost)
    # Neural sizes: what encodes in about half an hour on a shared 2-core CPU (0: the relevant documents alone).
    "sizes_real": [0, 1000, 3000],
    "sizes_random": [0, 1000, 3000],
    "bm25_sizes_real": [0, 1000, 3000, 10000, 30000, 100000],
    "bm25_sizes_random": [0, 1000, 3000, 10000, 100000, 1000000],
    "de_widths": [128, 256, None],
    "de_train_documents": 300,
    "seed": 0,
    "chunk": 1000,
}
UHD = ("uhd-binary", "uhd-weighted")
KS = [2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024]


def run(out_dir: Path, cache_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
    from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir

    data_dir = Path(options["data"]) if options["data"] else bundled_dataset_dir("scifact")
    data = load_beir(data_dir, "test")
    if (data_dir / "qrels" / "train.tsv").is_file():
        train = load_beir(data_dir, "train")
    else:  # no train split (CISI, Medline): DE heads learn from ICT pairs of the corpus alone, no labels
        from uhdsearch.evaluation.datasets import BeirData

        train = BeirData(data.name, "ict-only", data.corpus, [], {})
    queries = [q for q in data.queries if any(g > 0 for g in data.qrels.get(q.query_id, {}).values())]
    base_ids = sorted({d for q in queries for d, g in data.qrels[q.query_id].items() if g > 0 and d in data.corpus})
    base_texts = [data.corpus[d].full_text for d in base_ids]
    relevant = np.zeros((len(queries), len(base_ids)), dtype=bool)
    position = {d: i for i, d in enumerate(base_ids)}
    for qi, q in enumerate(queries):
        for d, g in data.qrels[q.query_id].items():
            if g > 0 and d in position:
                relevant[qi, position[d]] = True
    seed, chunk = int(options["seed"]), int(options["chunk"])
    n_real = max(options["sizes_real"] + options["bm25_sizes_real"], default=0)
    n_random = max(options["sizes_random"] + options["bm25_sizes_random"], default=0)
    texts = {"real": dictionary_texts(n_real, seed),
             "random": (random_strings(n_random, seed), "a-z and space, 20-150 chars, uniform lengths")}

    rows: list[dict[str, Any]] = []
    rows += _bm25_rows(queries, base_ids, base_texts, relevant, texts, options, cache_dir)
    angles: dict[str, list[float]] = {}
    provenance: dict[str, Any] = {}
    if options["sizes_real"] or options["sizes_random"]:
        from uhdsearch.studies.neural import NeuralSystems

        model_dir = Path(options["model"])
        if options["backbone"]:
            from uhdsearch.studies.untrained import untrained_dir

            model_dir = untrained_dir(data_dir, cache_dir, options["backbone"], indexes=False,
                                      dim=int(options["backbone_uhd_dim"])) / "model"
        neural = NeuralSystems.load(model_dir, train, options["de_widths"], cache_dir,
                                    int(options["de_train_documents"]), seed)
        provenance = model_provenance(neural.model, model_dir)
        encodings = cache_dir / f"encodings-{neural.model.digest()[:16]}"  # UHD vectors belong to one model
        encoded_q = neural.encode_cached([q.text for q in queries], "query", encodings / "queries", chunk, "queries")
        encoded_b = neural.encode_cached(base_texts, "document", encodings / "base", 200, "relevant documents")
        from uhdsearch.studies.neural import stack

        q, b = stack(encoded_q), stack(encoded_b)
        for group, sizes in (("real", options["sizes_real"]), ("random", options["sizes_random"])):
            if not sizes:
                continue
            parts = neural.encode_cached(texts[group][0][:max(sizes)], "document",
                                         encodings / f"{group}-{seed}", chunk, f"{group} distractors")
            rows += _neural_rows(neural, q, b, relevant, parts, group, sorted(sizes))
        angles = {name: _relevant_cosines(q[name], b[name], relevant).tolist() for name in neural.dense_names}
        provenance["dense_widths"] = neural.widths
        # what this run encoded (chunks read from the cache do not count); measured on a shared, loaded CPU
        provenance["encoding_texts_per_second"] = {k: round(n / max(t, 1e-9), 1) for k, (n, t) in
                                                   neural.encoded.items()}
        source = f"{data_dir.name}/train qrels + ICT pairs of its judged documents and a seeded sample" if \
            train.qrels else f"ICT pairs of a seeded sample of {data_dir.name}'s corpus (no train split, no labels)"
        provenance["de_heads"] = (f"DE-k heads (mean pooling, Linear + LayerNorm) trained on {source}, "
                                  f"{options['de_train_documents']} documents in all")
    _add_relative_errors(rows)
    theory = _theory(angles, provenance.get("dense_widths", {}), options)
    figures = _plots(out_dir, rows, theory)
    return {
        "data": {"collection": str(data_dir), "split": "test", "queries": len(queries),
                 "relevant_documents": len(base_ids),
                 "real_distractors": texts["real"][1], "random_distractors": texts["random"][1], "seed": seed},
        **provenance,
        "encoders": "BM25: bm25s (Lucene BM25, k1 0.9, b 0.4); every neural number: "
                    + ("SPLADE-tiny (2 layers, hidden 128): dense = its mean-pooled states, UHD = the untrained "
                       "centred head on it" if options["backbone"] == "splade-tiny" else
                       f"backbone {options['backbone']}, untrained centred UHD head" if options["backbone"] else
                       "the model's own MiniLM backbone") + ", on this CPU (no GPU)",
        "rows": rows, "theory": theory, "figures": figures,
    }


# ------------------------------------------------------------------ ranks per system
def _row(system: str, group: str, size: int, n_base: int, ranks: np.ndarray, beaten: np.ndarray) -> dict[str, Any]:
    return {"system": system, "distractors": group, "n_distractors": int(size), "index_size": int(size + n_base),
            "rr@10": float(measures.reciprocal_ranks(ranks).mean()), "err": measures.error_rate(ranks),
            "distractor_outranks_pct": float(100 * np.mean(beaten > 0)), "median_rank": float(np.median(ranks))}


def _bm25_rows(queries, base_ids, base_texts, relevant, texts, options, cache_dir: Path) -> list[dict[str, Any]]:
    from uhdsearch.baselines.bm25 import BM25Retriever
    from uhdsearch.types import Document

    rows = []
    jobs = [(g, s) for g in ("real", "random") for s in sorted(options[f"bm25_sizes_{g}"])]
    for group, size in tqdm(jobs, desc="BM25 sizes"):
        path = cache_dir / f"bm25-{group}-{options['seed']}-{size}.npz"
        if not path.is_file():
            docs = [Document(f"b{i}", t) for i, t in enumerate(base_texts)]
            docs += [Document(f"x{i}", t) for i, t in enumerate(texts[group][0][:size])]
            bm25 = BM25Retriever.build(docs, show_progress=False)
            tokens = bm25.tokenize_queries([q.text for q in queries])
            ranks, beaten = np.zeros(len(queries), np.int64), np.zeros(len(queries), np.int64)
            for qi, tok in enumerate(tokens):
                scores = bm25.score_all(tok)
                best = scores[: len(base_ids)][relevant[qi]].max()
                beaten[qi] = (scores[len(base_ids):] > best).sum()
                ranks[qi] = 1 + (scores[: len(base_ids)] > best).sum() + beaten[qi]
            np.savez(path, ranks=ranks, beaten=beaten)
        with np.load(path) as f:
            rows.append(_row("bm25", group, size, len(base_ids), f["ranks"], f["beaten"]))
    return rows


def _neural_rows(neural, q, b, relevant, parts, group: str, sizes: list[int]) -> list[dict[str, Any]]:
    """Ranks of the best relevant document per system and size, reading each chunk file once for every system."""
    systems = neural.dense_names + list(UHD)
    best, in_base, beaten = {}, {}, {}
    for name in systems:
        base_scores = _scores(name, q, b)
        best[name] = np.where(relevant, base_scores, -np.inf).max(axis=1)
        in_base[name] = (base_scores > best[name][:, None]).sum(axis=1)
        beaten[name] = np.zeros((len(sizes), len(best[name])), np.int64)
    start = 0
    for path in tqdm(parts, desc=f"score {group} distractors", unit="chunk"):
        part = load_part(path)
        for name in systems:
            scores = _scores(name, q, part)
            for si, size in enumerate(sizes):
                if size > start:
                    beaten[name][si] += (scores[:, : size - start] > best[name][:, None]).sum(axis=1)
        start += len(part[neural.dense_names[0]])
    return [_row(name, group, size, relevant.shape[1], 1 + in_base[name] + beaten[name][si], beaten[name][si])
            for name in systems for si, size in enumerate(sizes)]


def load_part(path: Path) -> dict[str, Any]:
    from uhdsearch.studies.neural import load_part as load

    return load(path)


def _scores(name: str, q: dict[str, Any], d: dict[str, Any]) -> np.ndarray:
    from uhdsearch.studies.neural import uhd_scores

    if name in UHD:
        return uhd_scores(q["uhd"], d["uhd"], name[4:])
    return q[name].astype(np.float64) @ d[name].astype(np.float64).T


def _relevant_cosines(q: np.ndarray, d: np.ndarray, relevant: np.ndarray) -> np.ndarray:
    """Per query, the cosine with its best-scoring relevant document."""
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    dn = d / np.linalg.norm(d, axis=1, keepdims=True)
    return np.where(relevant, qn @ dn.T, -np.inf).max(axis=1)


def _add_relative_errors(rows: list[dict[str, Any]]) -> None:
    bm25 = {(r["distractors"], r["n_distractors"]): r["err"] for r in rows if r["system"] == "bm25"}
    for r in rows:
        base = bm25.get((r["distractors"], r["n_distractors"]))
        r["relative_err_vs_bm25"] = measures.relative_error(r["err"], base) if base is not None else None


# ------------------------------------------------------------------ Eq. 1 at the measured angles
def _theory(angles: dict[str, list[float]], widths: dict[str, int], options: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"ks": KS}
    for name, cosines in angles.items():
        c = np.asarray(cosines)
        p_own = measures.false_positive_probability(c, widths[name])
        out[name] = {
            "width": widths[name], "median_cosine": float(np.median(c)),
            "median_angle_deg": float(np.degrees(np.arccos(np.clip(np.median(c), -1, 1)))),
            "mean_p_at_width": float(p_own.mean()),
            "expected_random_outrankers_at_1M": float(p_own.mean() * 1e6),
            "p_vs_k_at_median": measures.false_positive_probability(np.median(c), np.array(KS)).tolist(),
        }
    return out


# ------------------------------------------------------------------ figures
def _plots(out_dir: Path, rows: list[dict[str, Any]], theory: dict[str, Any]) -> dict[str, str]:
    from uhdsearch.studies.plotting import save, subplots

    figures = {}
    systems = list(dict.fromkeys(r["system"] for r in rows))
    for key, label, fname in (("rr@10", "RR@10", "rr10.png"), ("relative_err_vs_bm25", "relative Err vs BM25",
                                                                 "relative_error.png"),
                              ("distractor_outranks_pct", "% queries with a distractor above the relevant doc",
                               "outranks.png")):
        fig, axes = subplots(2)
        for ax, group in zip(axes, ("real", "random")):
            for s in systems:
                pts = sorted((r["index_size"], r[key]) for r in rows
                             if r["system"] == s and r["distractors"] == group and r[key] is not None)
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=s)
            ax.set_xscale("log")
            ax.set_xlabel("index size (relevant docs + distractors)")
            ax.set_ylabel(label)
            ax.set_title(f"{group} distractors")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=7)
        figures[key] = save(fig, out_dir / fname)
    dense = [n for n in theory if n != "ks"]
    if dense:
        fig, axes = subplots(1)
        for name in dense:
            t = theory[name]
            axes[0].plot(theory["ks"], t["p_vs_k_at_median"], marker=".",
                         label=f"{name}: median angle {t['median_angle_deg']:.0f} deg")
        axes[0].set_xscale("log")
        axes[0].set_yscale("log")
        axes[0].set_xlabel("dimension k")
        axes[0].set_ylabel("P(random vector above the relevant doc)")
        axes[0].set_title("Eq. 1 at the measured query-relevant angles")
        axes[0].legend(fontsize=7)
        axes[0].grid(alpha=0.3)
        figures["eq1"] = save(fig, out_dir / "false_positive_probability.png")
    return figures


register(Study("index-size", "Index size vs dense, sparse and UHD retrieval (real-text and random distractors)",
               "Reimers & Gurevych, The Curse of Dense Low-Dimensional IR, §4-5, Tables 1-3, Eq. 1", run, DEFAULTS))
