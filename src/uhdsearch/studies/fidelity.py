"""Fidelity study (Luan et al. §3, Figures 2-3): how large a Rademacher random projection of boolean and BM25
bag-of-words vectors must be to keep a triple's pairwise ranking (95 % of projections agree), against the
normalized margin delta's 1/(delta^2 - delta^3); and where UHD-binary, a learned 32k-dimensional code, falls.

Triples (q, d1, d2): for sampled test queries, pairs from the sparse model's own top documents with
score(d1) > score(d2). A projection A keeps the triple when (Aq).(Ad1 - Ad2) > 0; the first k rows of one
k_max-row draw give every k of the grid at once (cumulative sums), over `draws` independent draws.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from uhdsearch.studies import measures
from uhdsearch.studies.registry import Study, model_provenance, register

DEFAULTS: dict[str, Any] = {
    "data": None,  # BEIR-layout directory; None: the bundled SciFact
    "model": "out/quickstart/model",  # UHD model whose binary index is `uhd_index`; "" skips UHD
    "uhd_index": "out/quickstart/index-binary",
    "queries": 60,
    "triples_per_query": 5,
    "top": 100,  # d1, d2 come from the sparse model's top `top` documents
    "k_max": 8192,
    "grid": 50,  # k values, log-spaced from 2 to k_max (the paper's grid has 50 values)
    "draws": 40,  # projections per triple and k
    "max_error": 0.05,
    "seed": 0,
}
REPRESENTATIONS = ("boolean", "bm25")


def run(out_dir: Path, cache_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
    from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir

    data_dir = Path(options["data"]) if options["data"] else bundled_dataset_dir("scifact")
    data = load_beir(data_dir, "test")
    rng = np.random.default_rng(options["seed"])
    queries = [data.queries[i] for i in sorted(rng.permutation(len(data.queries))[: options["queries"]])]
    doc_ids = list(data.corpus)
    vectors = bag_of_words([d.full_text for d in data.corpus.values()], [q.text for q in queries])
    ks = np.unique(np.geomspace(2, options["k_max"], options["grid"]).astype(int))
    result: dict[str, Any] = {"data": {"collection": str(data_dir), "split": "test", "queries": len(queries),
                                       "documents": len(doc_ids), "tokenizer": "bm25s (Lucene stopwords, no stemming)"},
                              "ks": ks.tolist(), "tables": {}, "figures": {}}
    uhd = _uhd_scorer(options, doc_ids, queries, result) if options["model"] else None
    for rep in REPRESENTATIONS:
        path = cache_dir / f"{rep}-{options['seed']}-{options['queries']}-{options['k_max']}-{options['draws']}.npz"
        if not path.is_file():
            triples = sample_triples(vectors["queries"], vectors[rep], options["top"], options["triples_per_query"], rng)
            errors, deltas = projection_errors(vectors["queries"], vectors[rep], triples, ks, options["draws"],
                                               np.random.default_rng(options["seed"] + 1), rep)
            np.savez(path, triples=triples, errors=errors, deltas=deltas)
        with np.load(path) as f:
            triples, errors, deltas = f["triples"], f["errors"], f["deltas"]
        agree_uhd = uhd(triples) if uhd is not None else None
        result[rep] = _summary(ks, errors, deltas, options["max_error"], agree_uhd)
        result["tables"][f"{rep}: minimum k per 1/(delta^2-delta^3) bin"] = result[rep]["bins"]
    result["figures"] = _plots(out_dir, ks, result)
    return result


def bag_of_words(doc_texts: list[str], query_texts: list[str]) -> dict[str, sp.csr_matrix]:
    """Boolean and BM25 document vectors over one vocabulary, and boolean query vectors (bm25s tokens).

    The BM25 vectors hold bm25s's per-term document scores, so a boolean query's dot product is its BM25 score.
    """
    import bm25s

    tokens = bm25s.tokenize(doc_texts, stopwords="en", show_progress=False)
    model = bm25s.BM25(k1=0.9, b=0.4)
    model.index(tokens, show_progress=False)
    s = model.scores
    bm25 = sp.csc_matrix((s["data"], s["indices"], s["indptr"]), shape=(s["num_docs"], len(s["indptr"]) - 1)).tocsr()
    boolean = bm25.copy()
    boolean.data = np.ones_like(boolean.data)
    vocab = model.vocab_dict
    rows, cols = [], []
    for i, q in enumerate(bm25s.tokenize(query_texts, stopwords="en", show_progress=False, return_ids=False)):
        ids = sorted({vocab[t] for t in q if t in vocab})
        rows += [i] * len(ids)
        cols += ids
    queries = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(query_texts), bm25.shape[1]))
    return {"boolean": boolean.astype(np.float32), "bm25": bm25.astype(np.float32), "queries": queries}


def sample_triples(queries: sp.csr_matrix, docs: sp.csr_matrix, top: int, per_query: int,
                   rng: np.random.Generator) -> np.ndarray:
    """(n, 3) rows (query, d1, d2) with score(d1) > score(d2): d1 among the query's top 10 documents, d2 among
    its ranks 11 to `top` (pairs with margins that a few thousand dimensions can keep; sampled pairs from one
    crowded top list mostly have deltas near 0)."""
    scores = (queries @ docs.T).toarray()
    triples = []
    for qi, row in enumerate(scores):
        order = np.argsort(-row, kind="stable")[:top]
        order = order[row[order] > 0]
        if len(order) < 12:
            continue
        for _ in range(per_query):
            d1, d2 = order[rng.integers(0, 10)], order[rng.integers(10, len(order))]
            if row[d1] > row[d2]:
                triples.append((qi, d1, d2))
    return np.array(triples, dtype=np.int64).reshape(-1, 3)


def projection_errors(queries: sp.csr_matrix, docs: sp.csr_matrix, triples: np.ndarray, ks: np.ndarray,
                      draws: int, rng: np.random.Generator, desc: str = "") -> tuple[np.ndarray, np.ndarray]:
    """(errors (n_triples, len(ks)), deltas (n_triples,)): the share of Rademacher projections that fail to
    keep each triple's ranking at each k, and its normalized margin."""
    k_max = int(ks.max())
    errors = np.zeros((len(triples), len(ks)))
    deltas = np.zeros(len(triples))
    for t, (qi, d1, d2) in enumerate(tqdm(triples, desc=f"projections ({desc})", leave=False)):
        q, u = queries[qi], docs[d1] - docs[d2]
        terms = np.union1d(q.indices, u.indices)
        v = np.stack([q[:, terms].toarray()[0], u[:, terms].toarray()[0]], axis=1).astype(np.float32)
        deltas[t] = measures.normalized_margin(v[:, 0], v[:, 0] + v[:, 1], v[:, 0])
        # a.v with a in {-1, 1} is 2 b.v - sum(v) for bits b; the 1/sqrt(k) scale does not change a sign
        kept = np.zeros(len(ks))
        for start in range(0, draws, 4):  # a few draws at a time bound the memory of the sign matrix
            n = min(4, draws - start)
            size = n * k_max * len(terms)
            bits = np.unpackbits(np.frombuffer(rng.bytes(size // 8 + 1), np.uint8))[:size]
            proj = (2 * bits.reshape(n * k_max, len(terms)).astype(np.float32) @ v - v.sum(axis=0))
            proj = proj.reshape(n, k_max, 2)
            kept += (np.cumsum(proj[:, :, 0] * proj[:, :, 1], axis=1)[:, ks - 1] > 0).sum(axis=0)
        errors[t] = 1 - kept / draws
    return errors, deltas


def minimum_k(errors: np.ndarray, ks: np.ndarray, max_error: float) -> np.ndarray:
    """Per triple, the smallest k of the grid with an error below `max_error` (nan: none in the grid).

    Examples:
        >>> minimum_k(np.array([[0.5, 0.04, 0.0], [0.5, 0.3, 0.2]]), np.array([2, 4, 8]), 0.05).tolist()
        [4.0, nan]
    """
    ok = errors < max_error
    first = np.argmax(ok, axis=1)
    return np.where(ok.any(axis=1), ks[first], np.nan).astype(np.float64)


def _summary(ks, errors, deltas, max_error, agree_uhd) -> dict[str, Any]:
    x = np.where((deltas > 0) & (deltas < 1), 1 / np.clip(deltas ** 2 - deltas ** 3, 1e-12, None), np.nan)
    kmin = minimum_k(errors, ks, max_error)
    ok = np.isfinite(kmin) & np.isfinite(x)
    edges = np.unique(np.quantile(x[np.isfinite(x)], np.linspace(0, 1, 11)))
    bins = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = np.isfinite(x) & (x >= lo) & (x <= hi)
        row = {"x_low": float(lo), "x_high": float(hi), "triples": int(inside.sum()),
               "reached": int((inside & ok).sum()),
               "mean_min_k": float(np.mean(kmin[inside & ok])) if (inside & ok).any() else None,
               "rademacher_agreement_k128": float(1 - errors[inside, np.searchsorted(ks, 128)].mean())}
        if agree_uhd is not None:
            row["uhd_binary_agreement"] = float(agree_uhd[inside].mean())
        bins.append(row)
    out = {"triples": len(deltas), "reached_95pct": int(ok.sum()), "bins": bins,
           "spearman_min_k_vs_x": _spearman(kmin[ok], x[ok]),
           "slope_min_k_per_x": float(np.sum(kmin[ok] * x[ok]) / np.sum(x[ok] ** 2)) if ok.any() else None,
           "median_delta": float(np.median(deltas)), "x": x.tolist(), "min_k": kmin.tolist(),
           "agreement_by_k": (1 - errors.mean(axis=0)).tolist()}
    if agree_uhd is not None:
        agreement = float(agree_uhd.mean())
        out["uhd_binary_agreement"] = agreement
        reach = np.nonzero(1 - errors.mean(axis=0) >= agreement)[0]
        out["rademacher_k_matching_uhd"] = int(ks[reach[0]]) if len(reach) else None
    return out


def _spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic) if len(a) > 2 else None


def _uhd_scorer(options, doc_ids, queries, result):
    """agree(triples) -> per triple 1.0 where UHD-binary ranks d1 above d2 as the sparse model does (0.5: a tie)."""
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.errors import IndexFormatError
    from uhdsearch.index.inverted import BinaryIndex
    from uhdsearch.studies.neural import uhd_scores

    model = UHDEncoder.from_pretrained(options["model"]).eval()
    index = BinaryIndex.load(options["uhd_index"])
    if index.encoder_digest != model.digest():
        raise IndexFormatError(f"{options['uhd_index']} was built by another model than {options['model']}")
    position = {d: i for i, d in enumerate(index.doc_ids)}
    order = np.array([position[d] for d in doc_ids])
    docs = index.document_vectors().buckets[0][order]
    q = model.encode([x.text for x in queries], "query").buckets[0]
    result.update(model_provenance(model, options["model"]))
    result["uhd_index"] = str(options["uhd_index"])

    def agree(triples: np.ndarray) -> np.ndarray:
        s1 = np.array([uhd_scores(q[i], docs[j], "binary")[0, 0] for i, j in triples[:, :2]])
        s2 = np.array([uhd_scores(q[i], docs[j], "binary")[0, 0] for i, j in triples[:, [0, 2]]])
        return np.where(s1 > s2, 1.0, np.where(s1 == s2, 0.5, 0.0))

    return agree


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _plots(out_dir: Path, ks: np.ndarray, result: dict[str, Any]) -> dict[str, str]:
    from uhdsearch.studies.plotting import save, subplots

    figures = {}
    for rep, fig_no in zip(REPRESENTATIONS, (2, 3)):
        r = result[rep]
        fig, (ax, ax2) = subplots(2)
        x, kmin = np.array(r["x"], dtype=float), np.array(r["min_k"], dtype=float)
        ax.scatter(x, kmin, s=6, alpha=0.3, label="triples")
        mids = [np.sqrt(b["x_low"] * b["x_high"]) for b in r["bins"] if b["mean_min_k"]]
        ax.plot(mids, [b["mean_min_k"] for b in r["bins"] if b["mean_min_k"]], "o-", color="C3", label="bin mean")
        if r["slope_min_k_per_x"]:
            grid = np.geomspace(np.nanmin(x), np.nanmax(x), 50)
            ax.plot(grid, r["slope_min_k_per_x"] * grid, "--", color="gray", label="k proportional to x")
        ax.set(xscale="log", yscale="log", xlabel="1/(delta^2 - delta^3)", ylabel="min k with error < 5 %",
               title=f"{rep} (Luan Fig. {fig_no}), Spearman {_fmt(r['spearman_min_k_vs_x'])}")
        ax.legend(fontsize=7)
        ax2.plot(ks, r["agreement_by_k"], "o-", ms=3, label="Rademacher projection")
        if "uhd_binary_agreement" in r:
            ax2.axhline(r["uhd_binary_agreement"], color="C2", ls="--",
                        label=f"UHD-binary (dim 32,768): {r['uhd_binary_agreement']:.2f}")
        ax2.set(xscale="log", xlabel="k", ylabel=f"pairwise agreement with {rep}", title="agreement over all triples")
        ax2.legend(fontsize=7)
        for a in (ax, ax2):
            a.grid(alpha=0.3)
        figures[rep] = save(fig, out_dir / f"fidelity_{rep}.png")
    return figures


register(Study("fidelity", "Random-projection fidelity vs the normalized margin, and UHD-binary on the same axes",
               "Luan et al., Sparse, Dense, and Attentional Representations, §3, Figures 2-3", run, DEFAULTS))
