"""Density statistics of the trained quickstart model on SciFact, the input of the synthetic postings."""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.lib.settings import RESULTS
from benchmarks.lib.speed_common import log
from benchmarks.lib.synthetic import DensityProfile
from uhdsearch.sparse import SparseEncoding

RESULTS_DIR = RESULTS
STATS_JSON = RESULTS_DIR / "uhd_density_scifact.json"
STATS_NPZ = RESULTS_DIR / "uhd_density_scifact.npz"
QUANTILES = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)



def compute_stats(model_dir: Path, stats_index: Path | None, batch_size: int) -> None:
    """Encode SciFact (bundled) with the trained model once; store density statistics and the query rows."""
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir

    model = UHDEncoder.from_pretrained(model_dir)
    data = load_beir(bundled_dataset_dir("scifact"), "test")
    t0 = time.perf_counter()
    if stats_index is not None:  # an index the same model built (e.g. the quickstart's): its vectors, no re-encoding
        documents, digest = _index_vectors(stats_index)
        if digest != model.digest():
            raise SystemExit(f"{stats_index} was built by encoder {digest}, not {model.digest()} "
                             f"({model_dir}); drop --stats-index to encode the corpus")
        source = f"vectors of {stats_index} (built by the same model)"
    else:
        texts = [d.full_text for d in data.corpus.values()]
        documents = model.encode_document(texts, batch_size=batch_size).buckets[0]
        source = f"encoded now ({len(texts)} documents, {time.perf_counter() - t0:.0f} s)"
    queries = model.encode_query([q.text for q in data.queries]).buckets[0]
    profile = DensityProfile.from_vectors(documents)
    q_active = np.diff(queries.indptr)
    df_sorted = np.sort(profile.doc_frequency)[::-1]
    stats = {
        "model": str(model_dir), "encoder_digest": model.digest(), "dataset": "scifact (bundled), test queries",
        "source": source, "dim": profile.dim, "wta_k": model.config.wta_k, "query_k": model.config.query_k,
        "document_max_length": model.config.document_max_length, "n_documents": int(documents.shape[0]),
        "n_queries": int(queries.shape[0]),
        "doc_active_dims": _summary(profile.doc_lengths, bins=np.arange(0, int(profile.doc_lengths.max()) + 250, 250)),
        "query_active_dims": _summary(q_active, bins=np.arange(0, int(q_active.max()) + 50, 50)),
        "df_share_sorted": {
            "note": "document frequency / n_documents of every dimension, sorted descending, at 257 evenly spaced ranks",
            "ranks": np.linspace(0, profile.dim - 1, 257).astype(int).tolist(),
            "shares": np.round(df_sorted[np.linspace(0, profile.dim - 1, 257).astype(int)], 6).tolist(),
            "dims_never_active": int((profile.doc_frequency == 0).sum()),
            "top_1pct_dims_posting_share": float(df_sorted[: profile.dim // 100].sum() / df_sorted.sum()),
        },
        "value_quantiles": {"q": list(np.linspace(0, 1, 11).round(2)),
                            "value": profile.value_quantiles[::100].round(6).tolist()},
        "query_touched_postings_per_document": float(np.mean(  # sum of the df shares of a query's dims
            [profile.doc_frequency[queries.indices[a:b]].sum() for a, b in zip(queries.indptr[:-1], queries.indptr[1:])]
        )),
        "arrays": STATS_NPZ.name,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(STATS_NPZ, doc_frequency=np.round(profile.doc_frequency * documents.shape[0]).astype(np.int32),
                        n_documents=np.int64(documents.shape[0]), doc_lengths=profile.doc_lengths.astype(np.int32),
                        value_quantiles=profile.value_quantiles, query_indptr=queries.indptr.astype(np.int64),
                        query_dims=queries.indices.astype(np.int32), query_values=queries.data.astype(np.float32),
                        query_ids=np.array([q.query_id for q in data.queries]))
    STATS_JSON.write_text(json.dumps(stats, indent=1) + "\n", encoding="utf-8")
    log(f"wrote {STATS_JSON} and {STATS_NPZ} ({STATS_NPZ.stat().st_size / 1e6:.2f} MB)")


def _index_vectors(directory: Path) -> tuple[sp.csr_matrix, str | None]:
    """Document vectors (bucket 0) of a weighted index: a loadable one, or the raw .npy of format version 1."""
    from uhdsearch.errors import IndexFormatError
    from uhdsearch.index.inverted import InvertedIndex

    try:
        index = InvertedIndex.load(directory)
        if index.variant != "weighted":
            raise SystemExit(f"{directory} is a {index.variant} index; the value distribution needs a weighted one")
        return index.document_vectors().buckets[0], index.encoder_digest
    except IndexFormatError:
        meta = json.loads((directory / "index_meta.json").read_text(encoding="utf-8"))
        if meta.get("format_version") != 1 or meta.get("variant") != "weighted":
            raise
        arrays = {name: np.load(directory / f"bucket_0.{name}.npy", allow_pickle=False)
                  for name in ("indptr", "docs", "weights")}
        csc = sp.csc_matrix((arrays["weights"], arrays["docs"], arrays["indptr"]),
                            shape=(meta["n_documents"], meta["dim"]))
        return csc.tocsr(), meta.get("encoder_digest")


def _summary(values: np.ndarray, bins: np.ndarray) -> dict:
    counts, edges = np.histogram(values, bins=bins)
    return {"mean": float(values.mean()), "quantiles": dict(zip(map(str, QUANTILES),
                                                               np.quantile(values, QUANTILES).round(1).tolist())),
            "histogram": {"edges": edges.astype(int).tolist(), "counts": counts.tolist()}}


def load_stats() -> tuple[DensityProfile, SparseEncoding, str]:
    with np.load(STATS_NPZ, allow_pickle=False) as z:
        n = int(z["n_documents"])
        profile = DensityProfile(z["doc_frequency"] / n, z["doc_lengths"], z["value_quantiles"])
        dim = profile.dim
        queries = sp.csr_matrix((z["query_values"], z["query_dims"], z["query_indptr"]),
                                shape=(z["query_indptr"].shape[0] - 1, dim))
        h = hashlib.sha256()  # of the contents: the .npz bytes carry zip timestamps
        for name in sorted(z.files):
            h.update(name.encode() + np.ascontiguousarray(z[name]).tobytes())
    digest = h.hexdigest()[:12]
    return profile, SparseEncoding([queries]), digest

