"""UHD's own analyses (Jang et al. §4.3-4.5, A.2-A.4) on a trained model and the index it built: query_k (Table 4),
binarized vs real-valued scoring, active values (Fig. 3), density vs length (Fig. 5), activation frequency with
the stop dimensions (Fig. 6), a stop-dimension threshold study, and interpretability (Table 7, matched dims).

Document vectors come from the model's weighted index (no corpus re-encoding); queries are encoded here, and
the interpretability tables encode a small document sample token by token. Scores are exact sparse products.
Bucket strategies (Tables 5-6) need several trained multi-bucket models: pass them as ``bucket_models``
({label: [model_dir, weighted_index_dir]}); each is evaluated the same way, plus the per-query oracle.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from uhdsearch.encoder.backbone import tokenize_texts
from uhdsearch.errors import UsageError
from uhdsearch.studies.registry import Study, model_provenance, register

DEFAULTS: dict[str, Any] = {
    "data": None,  # BEIR-layout directory; None: the bundled SciFact
    "model": "out/quickstart/model",
    "index": "out/quickstart/index-weighted",  # a weighted index the model built over `data`
    "query_ks": [10, 20, 50, 100, 200, 400, None],
    "stop_fractions": [None, 0.5, 0.2, 0.1, 0.05, 0.02],  # a dim in more than this share of documents is dropped
    "sampled_dims": 8,
    "interpret_documents": 40,
    "bucket_models": {},
    "seed": 0,
}
MEASURES = ["nDCG@10", "R@100"]


def run(out_dir: Path, cache_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir

    data_dir = Path(options["data"]) if options["data"] else bundled_dataset_dir("scifact")
    data = load_beir(data_dir, "test")
    model = UHDEncoder.from_pretrained(options["model"]).eval()
    if len(model.layers) != 1:
        raise UsageError(f"{options['model']} has {len(model.layers)} buckets; these analyses read one "
                         "(multi-bucket models go to --set bucket_models=...)")
    doc_ids, docs = _index_documents(options["index"], model.digest())
    texts = [q.text for q in data.queries]
    queries = model.encode(texts, "query").buckets[0]  # every active dim; query_k applied below
    tables: dict[str, list[dict[str, Any]]] = {}
    tables["query_k (Table 4)"] = [
        {"query_k": k, "mean_query_dims": float(np.diff(_truncate(queries, k).indptr).mean()),
         **_scores_row(_truncate(queries, k), docs, doc_ids, data, ("binary", "weighted"))}
        for k in options["query_ks"]]
    tables["binarized vs real-valued (§4.5)"] = [
        {"query": "binary", "document": "binary", **_evaluate(_bin(queries) @ _bin(docs).T, doc_ids, data)},
        {"query": "real", "document": "binary", **_evaluate(queries @ _bin(docs).T, doc_ids, data)},
        {"query": "real", "document": "real", **_evaluate(queries @ docs.T, doc_ids, data)}]
    df = np.bincount(docs.indices, minlength=docs.shape[1]) / docs.shape[0]
    tables["stop dimensions: quality and postings touched vs df threshold"] = _stop_rows(
        queries, docs, doc_ids, data, df, options["stop_fractions"])
    q_tokens = np.array([len(x) for x in tokenize_texts(model.backbone.tokenizer, texts, truncation=True,
                                                        max_length=model.config.query_max_length)["input_ids"]])
    d_texts = [data.corpus[d].full_text for d in doc_ids]
    d_tokens = np.array([len(x) for x in tokenize_texts(
        model.backbone.tokenizer, d_texts, truncation=True, max_length=model.config.document_max_length)["input_ids"]])
    interp = _interpretability(model, data, doc_ids, docs, queries, df, options)
    tables.update(interp["tables"])
    if options["bucket_models"]:
        tables["bucket strategies (Tables 5-6)"] = _bucket_rows(options["bucket_models"], data)
    figures = _plots(out_dir, docs, queries, df, d_tokens, q_tokens, options["stop_fractions"], tables)
    return {"data": {"collection": str(data_dir), "split": "test", "queries": len(texts), "documents": len(doc_ids),
                     "index": str(options["index"])},
            **model_provenance(model, options["model"]),
            "summary": {"mean_doc_dims": float(np.diff(docs.indptr).mean()),
                        "mean_query_dims": float(np.diff(queries.indptr).mean()),
                        "dims_never_active": int((df == 0).sum()), "dims_in_over_10pct_of_docs": int((df > 0.1).sum()),
                        "spearman_doc_dims_vs_tokens": _spearman(np.diff(docs.indptr), d_tokens),
                        "spearman_query_dims_vs_tokens": _spearman(np.diff(queries.indptr), q_tokens)},
            "not_run_here": {"wta_k sweep and dim sweep (Fig. 4)": "a study of their own: uhdsearch study uhd-sweeps",
                             "bucket strategies (Tables 5-6)": "need multi-bucket models from the training "
                             "issue: pass --set 'bucket_models={\"label\": [model_dir, index_dir], ...}'"
                             if not options["bucket_models"] else "run"},
            "tables": tables, "figures": figures}


def _index_documents(index_dir, digest: str) -> tuple[list[str], sp.csr_matrix]:
    from uhdsearch.errors import IndexFormatError
    from uhdsearch.index.inverted import WeightedIndex

    index = WeightedIndex.load(index_dir)
    if index.encoder_digest != digest:
        raise IndexFormatError(f"{index_dir} was built by encoder {index.encoder_digest}, not this model ({digest})")
    return list(index.doc_ids), index.document_vectors().buckets[0].tocsr().astype(np.float32)


def _truncate(m: sp.csr_matrix, k: int | None) -> sp.csr_matrix:
    from uhdsearch.sparse import SparseEncoding

    return SparseEncoding([m]).truncate(k).buckets[0]


def _bin(m: sp.csr_matrix) -> sp.csr_matrix:
    out = m.copy()
    out.data = np.ones_like(out.data)
    return out


def _evaluate(scores, doc_ids: list[str], data, k: int = 100) -> dict[str, float]:
    from uhdsearch.evaluation.metrics import evaluate

    return evaluate(_run(scores, doc_ids, data, k), data.qrels, MEASURES)


def _run(scores, doc_ids, data, k: int = 100):
    from uhdsearch.topk import top_k
    from uhdsearch.types import Run, ScoredDoc

    scores = scores.toarray() if sp.issparse(scores) else scores
    run = Run({}, "uhd")
    for q, row in zip(data.queries, scores):
        numbers, values = top_k(row.astype(np.float64), k)
        run.results[q.query_id] = [ScoredDoc(doc_ids[n], float(v)) for n, v in zip(numbers, values)]
    return run


def _scores_row(q, docs, doc_ids, data, variants) -> dict[str, float]:
    row = {}
    for v in variants:
        scores = _bin(q) @ _bin(docs).T if v == "binary" else q @ docs.T
        row.update({f"{m} {v}": s for m, s in _evaluate(scores, doc_ids, data).items()})
    return row


def _stop_rows(queries, docs, doc_ids, data, df, fractions) -> list[dict[str, Any]]:
    rows = []
    postings = np.bincount(docs.indices, minlength=docs.shape[1])
    for fraction in fractions:
        keep = np.ones(docs.shape[1], bool) if fraction is None else df <= fraction
        q = queries @ sp.diags(keep.astype(np.float32))
        q.eliminate_zeros()
        rows.append({"df_threshold": fraction, "stop_dims": int((~keep).sum()),
                     "postings_touched_per_query": float(np.mean([postings[q.indices[a:b]].sum()
                                                                  for a, b in zip(q.indptr[:-1], q.indptr[1:])])),
                     **_scores_row(q, docs, doc_ids, data, ("binary", "weighted"))})
    return rows


def _spearman(a, b) -> float | None:
    from scipy.stats import spearmanr

    return None if np.ptp(a) == 0 or np.ptp(b) == 0 else float(spearmanr(a, b).statistic)


# ------------------------------------------------------------------ interpretability (Table 7)
def _token_winners(model, texts: list[str], kind: str):
    """Per token of `texts`: its text, its string, and its WTA winners (dims, values)."""
    import torch

    from uhdsearch.encoder.precision import product_dtype

    states = model.token_states(texts, kind, show_progress=False)
    layer = model.layers[0]
    tokens, owner = states.gather(range(states.n), [layer])
    with torch.inference_mode():
        values, dims = model.buckets.wta[str(layer)](tokens[0], model.config.wta_k, product_dtype(model.config.wta_dtype))
    strings = [texts[o][a:b] or "[special]" for o, (a, b) in zip(owner.tolist(), states.char_spans.tolist())]
    return owner.numpy(), strings, dims.numpy(), values.float().numpy()


def _interpretability(model, data, doc_ids, docs, queries, df, options) -> dict[str, Any]:
    rng = np.random.default_rng(options["seed"])
    q_texts = [q.text for q in data.queries]
    sample = sorted(rng.permutation(len(doc_ids))[: options["interpret_documents"]])
    d_texts = [data.corpus[doc_ids[i]].full_text for i in sample]
    q_win, d_win = _token_winners(model, q_texts, "query"), _token_winners(model, d_texts, "document")
    shared = np.intersect1d(np.unique(q_win[2]), np.unique(d_win[2]))
    shared = shared[(df[shared] > 0) & (df[shared] < 0.1)]  # content dims, not stop dims
    dims = rng.choice(shared, min(options["sampled_dims"], len(shared)), replace=False)
    rows = [{"dim": int(d), "doc_frequency": float(df[d]), "top query tokens": _top_tokens(q_win, d),
             "top document tokens": _top_tokens(d_win, d)} for d in sorted(dims)]
    # a query and its relevant document: which dims matched, and which tokens won them on each side
    position = {d: i for i, d in enumerate(doc_ids)}
    pair = next((q, d) for q in data.queries for d, g in data.qrels.get(q.query_id, {}).items()
                if g > 0 and d in position)
    pq = _token_winners(model, [pair[0].text], "query")
    pd = _token_winners(model, [data.corpus[pair[1]].full_text], "document")
    qi = next(i for i, q in enumerate(data.queries) if q.query_id == pair[0].query_id)
    matched = np.intersect1d(queries[qi].indices, docs[position[pair[1]]].indices)
    contrib = np.array([queries[qi, m] * docs[position[pair[1]], m] for m in matched])
    match_rows = [{"dim": int(m), "contribution": float(c), "query token": _top_tokens(pq, m, 1),
                   "document tokens": _top_tokens(pd, m, 3), "doc_frequency": float(df[m])}
                  for m, c in sorted(zip(matched, contrib), key=lambda t: -t[1])[:15]]
    return {"tables": {"interpretability: tokens that most activate sampled dims (Table 7)": rows,
                       f"matched dims: query {pair[0].query_id} vs relevant doc {pair[1]}": match_rows}}


def _top_tokens(winners, dim: int, n: int = 5) -> str:
    _, strings, dims, values = winners
    rows, cols = np.nonzero(dims == dim)
    order = np.argsort(-values[rows, cols])
    seen: list[str] = []
    for r in rows[order]:
        if strings[r].lower() not in seen:
            seen.append(strings[r].lower())
        if len(seen) == n:
            break
    return ", ".join(seen)


# ------------------------------------------------------------------ bucket strategies (hook)
def _bucket_rows(models: dict[str, list[str]], data) -> list[dict[str, Any]]:
    """Each labelled model with its weighted index, every bucket summed at the model's weights (Eq. 7), binary and
    weighted; then the per-query oracle over the models (by weighted nDCG@10)."""
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.metrics import per_query

    rows, per = [], {}
    for label, (model_dir, index_dir) in models.items():
        model = UHDEncoder.from_pretrained(model_dir).eval()
        doc_ids, buckets = _index_buckets(index_dir, model.digest())
        queries = model.encode([x.text for x in data.queries], "query").buckets
        weights = model.config.weights
        weighted = sum(w * (q @ d.T) for w, q, d in zip(weights, queries, buckets))
        binary = sum(w * (_bin(q) @ _bin(d).T) for w, q, d in zip(weights, queries, buckets))
        per[label] = per_query(_run(weighted, doc_ids, data), data.qrels, ["nDCG@10"])["nDCG@10"]
        rows.append({"strategy": label, "buckets": len(buckets), "weights": list(weights),
                     "nDCG@10": float(np.mean(list(per[label].values()))),
                     "nDCG@10 binary": _evaluate(binary, doc_ids, data)["nDCG@10"]})
    oracle = [max(p[qid] for p in per.values()) for qid in next(iter(per.values()))]
    rows.append({"strategy": "per-query oracle", "nDCG@10": float(np.mean(oracle))})
    return rows


def _index_buckets(index_dir, digest: str) -> tuple[list[str], list[sp.csr_matrix]]:
    from uhdsearch.errors import IndexFormatError
    from uhdsearch.index.inverted import WeightedIndex

    index = WeightedIndex.load(index_dir)
    if index.encoder_digest != digest:
        raise IndexFormatError(f"{index_dir} was built by encoder {index.encoder_digest}, not this model ({digest})")
    return list(index.doc_ids), [b.tocsr().astype(np.float32) for b in index.document_vectors().buckets]


def _plots(out_dir, docs, queries, df, d_tokens, q_tokens, fractions, tables) -> dict[str, str]:
    from uhdsearch.studies.plotting import save, subplots

    figures = {}
    fig, (ax,) = subplots(1)
    bins = np.linspace(0, max(docs.data.max(), queries.data.max()), 60)
    ax.hist(docs.data, bins, alpha=0.6, density=True, label="documents")
    ax.hist(queries.data, bins, alpha=0.6, density=True, label="queries")
    ax.set(yscale="log", xlabel="value of an active dimension (L2-normalised vector)", ylabel="density",
           title="active values (UHD Fig. 3)")
    ax.legend()
    figures["values"] = save(fig, out_dir / "active_values.png")
    fig, axes = subplots(2)
    for ax, m, n, what in ((axes[0], docs, d_tokens, "documents"), (axes[1], queries, q_tokens, "queries")):
        ax.scatter(n, np.diff(m.indptr), s=4, alpha=0.4)
        ax.set(xlabel="tokens", ylabel="active dimensions", title=f"density vs length: {what} (UHD Fig. 5)")
    figures["density"] = save(fig, out_dir / "density_vs_length.png")
    fig, (ax,) = subplots(1)
    order = np.sort(df)[::-1]
    ax.plot(np.arange(1, len(order) + 1), np.maximum(order, 1e-6))
    for f in [f for f in fractions if f is not None]:
        ax.axhline(f, ls=":", lw=0.8, color="gray")
        ax.text(1.2, f, f"stop dims above {f:g}: {(df > f).sum()}", fontsize=7, va="bottom")
    ax.set(xscale="log", yscale="log", xlabel="dimension (by frequency)", ylabel="share of documents active",
           title="activation frequency per dimension (UHD Fig. 6)")
    figures["frequency"] = save(fig, out_dir / "activation_frequency.png")
    stop = tables["stop dimensions: quality and postings touched vs df threshold"]
    fig, (ax,) = subplots(1)
    x = [r["postings_touched_per_query"] for r in stop]
    for v in ("binary", "weighted"):
        ax.plot(x, [r[f"nDCG@10 {v}"] for r in stop], "o-", label=f"UHD-{v}")
    for r in stop:
        ax.annotate("none" if r["df_threshold"] is None else f"{r['df_threshold']:g}",
                    (r["postings_touched_per_query"], r["nDCG@10 binary"]), fontsize=7)
    ax.set(xscale="log", xlabel="postings touched per query", ylabel="nDCG@10",
           title="stop-dimension threshold: quality vs work")
    ax.legend()
    figures["stop"] = save(fig, out_dir / "stop_dimensions.png")
    return figures


register(Study("uhd-analyses", "UHD's own analyses: query_k, binarization, density, stop dims, interpretability",
               "Jang et al., UHD-BERT, §4.3-4.5 and A.2-A.4 (Table 4, Figs 3, 5, 6, Table 7)", run, DEFAULTS))
