"""UHD-BERT Figure 4: the wta_k sweep at inference with a fixed trained model, and the dimension sweep with untrained
centred heads, both on one cached backbone pass of the same documents and queries.

The backbone is frozen, so every setting reads the same token states; only the WTA projection runs again. The
wta_k sweep projects each token once and keeps its sorted top max(wta_ks) winners, whose prefixes are the
winners at every smaller wta_k. Scores are exact (sparse products over the document subset), nDCG@10 and R@100.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from uhdsearch.io import atomic_write_text
from uhdsearch.studies.registry import Study, model_provenance, register

logger = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {
    "data": None,  # BEIR-layout directory; None: the bundled SciFact
    "model": "out/quickstart/model",  # the fixed trained model of the wta_k sweep (read only)
    # Documents scored: the test queries' relevant ones, then a seeded sample of the others (None: the corpus).
    # Each setting projects every token to `dim` dimensions: about 8 min per 32,768 dims for 500 SciFact
    # abstracts on one loaded core.
    "documents": 500,
    "wta_ks": [4, 10, 20, 40, 80, 200, 400],
    "dims": [8192, 32768, 81920],
    "seed": 0,
    "tokens_per_batch": 2048,  # bounds the (tokens, dim) projection held at once
}


def run(out_dir: Path, cache_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
    import torch

    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.encoder.precision import product_dtype
    from uhdsearch.encoder.wta import WTALayer
    from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
    from uhdsearch.studies.uhd_analyses import _scores_row

    data_dir = Path(options["data"]) if options["data"] else bundled_dataset_dir("scifact")
    data = load_beir(data_dir, "test")
    model = UHDEncoder.from_pretrained(options["model"]).eval()
    layer = model.layers[0]
    doc_ids = _documents(data, options["documents"], int(options["seed"]))
    data.queries = [q for q in data.queries if any(d in set(doc_ids) for d in data.qrels.get(q.query_id, {}))]
    key = f"{model.digest()[:16]}-{len(doc_ids)}-{options['seed']}"
    d_states = _states(model, [data.corpus[d].full_text for d in doc_ids], "document", cache_dir / f"docs-{key}.pt")
    q_states = _states(model, [q.text for q in data.queries], "query", cache_dir / f"queries-{key}.pt")
    dtype = product_dtype(model.config.wta_dtype)
    batch = int(options["tokens_per_batch"])

    ks = sorted(int(k) for k in options["wta_ks"])
    wta = model.buckets.wta[str(layer)]
    rows_file = cache_dir / f"wta-{key}-{'-'.join(map(str, ks))}.json"  # each finished sweep is kept: a rerun resumes
    if not rows_file.is_file():
        docs_k = _encode(wta, d_states, layer, ks, dtype, batch, "wta_k sweep: documents")
        queries_k = _encode(wta, q_states, layer, ks, dtype, batch, "wta_k sweep: queries")
        atomic_write_text(rows_file, json.dumps(
            [{"wta_k": k, "dim": wta.dim, "head": "the model's", **_density(docs_k[k], queries_k[k]),
              **_scores_row(queries_k[k], docs_k[k], doc_ids, data, ("binary", "weighted"))} for k in ks]))
    wta_rows = json.loads(rows_file.read_text())

    dim_rows = []
    mean = d_states.layer(layer).float().mean(dim=0)
    for dim in sorted(int(d) for d in options["dims"]):
        k = model.config.wta_k
        row_file = cache_dir / f"dim-{key}-{dim}-{k}.json"
        if not row_file.is_file():
            head = WTALayer(model.backbone.hidden_size, dim, model.config.weight_sparsity, seed=model.config.seed)
            head.center_(mean)  # the untrained centred head the quickstart starts from, at this width
            docs = _encode(head, d_states, layer, [k], dtype, batch, f"dim {dim}: documents")[k]
            queries = _encode(head, q_states, layer, [k], dtype, batch, f"dim {dim}: queries")[k]
            atomic_write_text(row_file, json.dumps(
                {"dim": dim, "wta_k": k, "head": "untrained, centred", **_density(docs, queries),
                 **_scores_row(queries, docs, doc_ids, data, ("binary", "weighted"))}))
        dim_rows.append(json.loads(row_file.read_text()))
    trained = next(r for r in wta_rows if r["wta_k"] == model.config.wta_k) if model.config.wta_k in ks else None
    figures = _plots(out_dir, wta_rows, dim_rows, trained)
    return {"data": {"collection": str(data_dir), "split": "test", "queries": len(data.queries),
                     "documents": len(doc_ids), "documents_chosen": "the test queries' relevant documents, then a "
                     f"seeded sample of the others (seed {options['seed']})"},
            **model_provenance(model, options["model"]),
            "tables": {"wta_k at inference, fixed trained model (Fig. 4 left)": wta_rows,
                       "dim, untrained centred heads at the model's wta_k (Fig. 4 right)":
                           dim_rows + ([trained] if trained else [])},
            "figures": figures}


def _documents(data, n: int | None, seed: int) -> list[str]:
    """Relevant documents of the test queries, then a seeded sample of the rest, up to `n` (None: all)."""
    relevant = sorted({d for rel in data.qrels.values() for d, g in rel.items() if g > 0 and d in data.corpus})
    others = [d for d in data.corpus if d not in set(relevant)]
    if n is None:
        return relevant + others
    relevant = relevant[:n]
    extra = np.random.default_rng(seed).permutation(len(others))[: max(0, n - len(relevant))]
    return relevant + [others[i] for i in sorted(extra)]


def _states(model, texts: list[str], kind: str, path: Path):
    """The model's bucket-layer token states of `texts`, cached in `path` (one backbone pass for every setting)."""
    import torch

    from uhdsearch.encoder.states import TokenStates

    if path.is_file():
        saved = torch.load(path, weights_only=False)
        return TokenStates(saved["layers"], saved["states"], saved["offsets"], saved["char_spans"])
    states = model.token_states(texts, kind)
    tmp = path.with_suffix(".tmp")
    torch.save({"layers": states.layers, "states": states.states, "offsets": states.offsets,
                "char_spans": states.char_spans}, tmp)
    tmp.replace(path)
    return states


def _encode(wta, states, layer: int, ks: list[int], dtype, tokens_per_batch: int, desc: str) -> dict[int, Any]:
    """Pooled unit vectors (CSR) of every text at each wta_k in `ks`, from one projection per token."""
    import torch

    from uhdsearch.encoder.pooling import l2_normalize, max_pool_winners
    from uhdsearch.encoder.precision import cast_for_product, wta_product

    offsets = states.offsets
    parts: dict[int, list[sp.csr_matrix]] = {k: [] for k in ks}
    starts = [0]
    for i in range(1, states.n + 1):  # texts grouped so a group holds about tokens_per_batch tokens
        if offsets[i] - offsets[starts[-1]] >= tokens_per_batch or i == states.n:
            starts.append(i)
    weight, bias = (cast_for_product(p.detach(), dtype) for p in (wta.weight, wta.bias))
    with torch.inference_mode():
        for a, b in tqdm(list(zip(starts[:-1], starts[1:])), desc=desc, leave=False):
            tokens, token_text = states.gather(range(a, b), [layer])
            z = wta_product(tokens[0], weight, bias, dtype)  # the encoder's product on this CPU's path
            values, indices = torch.topk(z, max(ks), dim=1, sorted=True)
            values = values.float()
            for k in ks:
                pooled = l2_normalize(max_pool_winners(values[:, :k], indices[:, :k], token_text, b - a, wta.dim))
                parts[k].append(sp.csr_matrix(pooled.numpy()))
    return {k: sp.vstack(p, format="csr") for k, p in parts.items()}


def _density(docs: sp.csr_matrix, queries: sp.csr_matrix) -> dict[str, float]:
    return {"mean_doc_dims": float(np.diff(docs.indptr).mean()), "mean_query_dims": float(np.diff(queries.indptr).mean())}


def _plots(out_dir: Path, wta_rows, dim_rows, trained) -> dict[str, str]:
    from uhdsearch.studies.plotting import save, subplots

    fig, axes = subplots(2)
    for v in ("binary", "weighted"):
        axes[0].plot([r["wta_k"] for r in wta_rows], [r[f"nDCG@10 {v}"] for r in wta_rows], "o-", label=f"UHD-{v}")
        axes[1].plot([r["dim"] for r in dim_rows], [r[f"nDCG@10 {v}"] for r in dim_rows], "o-",
                     label=f"UHD-{v}, untrained centred head")
        if trained:
            axes[1].plot([trained["dim"]], [trained[f"nDCG@10 {v}"]], "*", ms=12, label=f"the model (its head), {v}")
    axes[0].set(xscale="log", xlabel="wta_k at inference (model trained at one wta_k)", ylabel="nDCG@10",
                title="winners per token (UHD Fig. 4, left)")
    axes[1].set(xscale="log", xlabel="dimension n", ylabel="nDCG@10", title="dimension (UHD Fig. 4, right)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return {"fig4": save(fig, out_dir / "fig4_sweeps.png")}


register(Study("uhd-sweeps", "UHD's Figure 4: wta_k at inference (fixed trained model) and dimension (untrained heads)",
               "Jang et al., UHD-BERT, §4.3 Figure 4", run, DEFAULTS))
