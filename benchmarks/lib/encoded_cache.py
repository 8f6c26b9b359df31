"""Encodings of a BEIR collection by one model, computed once and cached (corpus and every query, untruncated).

Encoding CISI or Medline with MiniLM takes minutes on 2 shared cores; the stop-dimension and lookup benchmarks
read them many times. The cache is keyed by the collection's directory name and the model's digest.

    .venv/bin/python -m benchmarks.lib.encoded_cache --model out/quickstart/model --data ../shared/data/cisi
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.lib.settings import ROOT
from uhdsearch.sparse import SparseEncoding

CACHE = ROOT / "out" / "encoded"


def _save(path: Path, encoding: SparseEncoding, ids: list[str]) -> None:
    arrays = {}
    for b, m in enumerate(encoding.buckets):
        arrays.update({f"b{b}_data": m.data, f"b{b}_indices": m.indices, f"b{b}_indptr": m.indptr})
    arrays["dim"] = np.array(encoding.dim)
    np.savez(path.with_suffix(".tmp.npz"), **arrays)
    path.with_suffix(".tmp.npz").rename(path)
    path.with_suffix(".ids.json").write_text(json.dumps(ids))


def _load(path: Path) -> tuple[SparseEncoding, list[str]]:
    with np.load(path, allow_pickle=False) as z:
        dim = int(z["dim"])
        n_buckets = sum(1 for name in z.files if name.endswith("_indptr"))
        buckets = [sp.csr_matrix((z[f"b{b}_data"], z[f"b{b}_indices"], z[f"b{b}_indptr"]),
                                 shape=(z[f"b{b}_indptr"].shape[0] - 1, dim)) for b in range(n_buckets)]
    return SparseEncoding(buckets), json.loads(path.with_suffix(".ids.json").read_text())


def encoded(model, data_dir: Path, kind: str, index: Path | None = None) -> tuple[SparseEncoding, list[str]]:
    """(encoding, ids) of the collection's corpus ("document") or all its queries ("query"), cached.

    index: a weighted index of this corpus built by `model`; its vectors are read instead of encoding again.
    """
    from uhdsearch.evaluation.datasets import load_corpus, load_queries

    path = CACHE / f"{Path(data_dir).name}-{model.digest()}-{kind}.npz"
    if path.exists():
        return _load(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "document" and index is not None:  # the documents an index already holds, same encoder
        from uhdsearch.index.inverted import InvertedIndex

        built = InvertedIndex.load(index)
        if built.variant != "weighted" or built.encoder_digest != model.digest():
            raise SystemExit(f"{index} is not a weighted index built by this model")
        encoding, ids = built.document_vectors(), list(built.doc_ids)
    elif kind == "document":
        corpus = load_corpus(Path(data_dir) / "corpus.jsonl")
        ids, texts = list(corpus), [d.full_text for d in corpus.values()]
        encoding = model.encode(texts, "document", batch_size=32, show_progress=True)
    else:
        queries = load_queries(Path(data_dir) / "queries.jsonl")
        ids, texts = list(queries), [q.text for q in queries.values()]
        encoding = model.encode(texts, "query", batch_size=64)
    _save(path, encoding, ids)
    return encoding, ids


def encoded_texts(model, name: str, texts: list[str]) -> SparseEncoding:
    """Documents encoding of `texts` (e.g. distractors), cached under `name` and the model's digest."""
    path = CACHE / f"{name}-{model.digest()}-document.npz"
    if path.exists():
        return _load(path)[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    encoding = model.encode(texts, "document", batch_size=64, show_progress=True)
    _save(path, encoding, [str(i) for i in range(len(texts))])
    return encoding


def backbone_digest(model) -> str:
    """The backbone's weights and the bucket layers: token states depend on nothing else (frozen backbones)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(repr(model.layers).encode())
    for name, tensor in model.backbone.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def token_states(model, data_dir: Path, kind: str, rows: np.ndarray | None = None):
    """(TokenStates, token ids (n_tokens,) int64, ids) of the collection's corpus or all its queries, cached.

    rows: only these texts (positions in the file), in this order; None: all.
    Keyed by the backbone alone, so every head on the same frozen backbone shares them; bfloat16 states, as the
    WTA product sees them, so `model.encode_states` gives what `model.encode` gives.
    """
    import torch

    from uhdsearch.encoder.states import TokenStates
    from uhdsearch.evaluation.datasets import load_corpus, load_queries

    max_length = model.config.document_max_length if kind == "document" else model.config.query_max_length
    subset = "" if rows is None else "-rows" + hashlib.blake2b(np.asarray(rows, np.int64).tobytes(),
                                                               digest_size=6).hexdigest()
    path = CACHE.parent / "states" / f"{Path(data_dir).name}-{kind}-{backbone_digest(model)}-{max_length}{subset}.pt"
    if path.exists():
        saved = torch.load(path, weights_only=False)
        return TokenStates(**saved["states"]), saved["token_ids"], saved["ids"]
    if kind == "document":
        corpus = load_corpus(Path(data_dir) / "corpus.jsonl")
        ids, texts = list(corpus), [d.full_text for d in corpus.values()]
    else:
        queries = load_queries(Path(data_dir) / "queries.jsonl")
        ids, texts = list(queries), [q.text for q in queries.values()]
    if rows is not None:
        ids, texts = [ids[r] for r in rows], [texts[r] for r in rows]
    states = model.token_states(texts, kind, batch_size=32 if kind == "document" else 64)
    encoded_ids = model.backbone.tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
    token_ids = np.concatenate([np.asarray(x, np.int64) for x in encoded_ids])
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = {"states": {"layers": states.layers, "states": states.states, "offsets": states.offsets,
                        "char_spans": states.char_spans}, "token_ids": token_ids, "ids": ids}
    torch.save(saved, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)
    return states, token_ids, ids


def load_model(spec: str, data_root: Path, seed: int = 0):
    """A saved model directory, or "untrained": the quickstart preset's head on MiniLM, its biases centred on the
    states of 1,000 sampled SciFact documents (the quickstart centres on its whole corpus); a model whose training
    has not finished yet, or the untrained start that every trained model must beat."""
    from uhdsearch.encoder.model import UHDEncoder

    if spec != "untrained":
        return UHDEncoder.from_pretrained(ROOT / spec)
    from uhdsearch.evaluation.datasets import load_corpus
    from uhdsearch.recipes.presets import PRESETS

    model = UHDEncoder.new(config=PRESETS["quickstart"].encoder).eval()
    data_dir = ROOT / data_root / "scifact"
    rows = np.sort(np.random.default_rng(seed).permutation(len(load_corpus(data_dir / "corpus.jsonl")))[:1000])
    states, _, _ = token_states(model, data_dir, "document", rows)
    model.center_buckets(states)
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, nargs="+", required=True)
    parser.add_argument("--index", type=Path, help="a weighted index of the (one) collection built by the model")
    args = parser.parse_args(argv)
    from uhdsearch.encoder.model import UHDEncoder

    model = UHDEncoder.from_pretrained(args.model)
    for data_dir in args.data:
        for kind in ("query", "document"):
            encoding, ids = encoded(model, data_dir, kind, args.index)
            print(f"{data_dir.name} {kind}: {encoding.n} rows, {encoding.active_per_row().mean():.0f} active dims",
                  file=sys.stderr)


if __name__ == "__main__":
    main()
