"""Trained buckets on SciFact (paper §3.5, §4.5, Tables 5-6, A.3): one bucket against several, joint against separate
training, equal against dev-tuned weights, a per-query weight predictor and the per-query oracle.

Chose one bucket on the last layer (the recipe's default): several buckets, trained jointly or separately,
with equal or dev-tuned weights, did not beat one bucket of the same total size.

Frozen MiniLM; the quickstart's recipe (InfoNCE through the binarized buckets, lr 1e-3, train qrels + ICT pairs,
dev early stopping in which step 0 competes) with the sizes of benchmarks/configs/buckets.toml. Dev = the recipe's
held-out 10 % of SciFact's TRAIN queries, scored over the whole corpus; weights, the predictor's ridge strength and
everything else are chosen there. The test split is scored once per chosen setting; the test figures of the other
grid vectors feed only the per-query oracle, an upper bound reported as such. Token states, models and encodings
are cached under --cache-dir, so a rerun resumes.

    nice -n 10 python -m benchmarks.experiments.buckets       # table on stdout, JSON in benchmarks/results/buckets_scifact.json
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from benchmarks.lib.settings import RESULTS, comma_list, parse_args, record
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.states import TokenStates, compute_token_states
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
from uhdsearch.evaluation.experiment import paired_ttest
from uhdsearch.evaluation.metrics import evaluate, per_query
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.io import read_json, write_json
from uhdsearch.search.bucket_predictor import BucketWeightPredictor
from uhdsearch.search.searcher import Searcher
from uhdsearch.sparse import SparseEncoding
from uhdsearch.recipes.buckets import bucket_config, bucket_scores, rank, train_jointly, train_separately, weight_grid
from uhdsearch.recipes.recipe import Recipe, train_on_collection, training_pairs

RESULT_JSON = RESULTS / "buckets_scifact.json"
MEASURES = ("nDCG@10", "RR@10")


def cached_states(backbone, texts, layers, max_length: int, path: Path) -> TokenStates:
    """Token states of `layers`, read from / written to `path`.*.npy (bfloat16 kept as its int16 bits)."""
    files = [Path(f"{path}.L{layer}.npy") for layer in layers] + [Path(f"{path}.{n}.npy") for n in ("offsets", "spans")]
    if all(f.is_file() for f in files):
        *bits, offsets, spans = (np.load(f, allow_pickle=False) for f in files)
        if offsets.shape[0] == len(texts) + 1:
            return TokenStates(list(layers), [torch.from_numpy(b).view(torch.bfloat16) for b in bits], offsets, spans)
    states = compute_token_states(backbone, texts, layers, max_length, desc=path.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = [s.view(torch.int16).numpy() for s in states.states] + [states.offsets, states.char_spans]
    for f, a in zip(files, arrays):
        np.save(f, a, allow_pickle=False)
    return states


def cached_model(path: Path, build) -> tuple[UHDEncoder, dict]:
    """The model saved at `path`, or build() -> (model, info) trained now and saved with its info."""
    if (path / "uhd_config.json").is_file() and (path / "training.json").is_file():
        return UHDEncoder.from_pretrained(path), read_json(path / "training.json")
    start = time.perf_counter()
    model, info = build()
    info["seconds"] = round(time.perf_counter() - start, 1)
    model.save_pretrained(path, overwrite=True)
    write_json(path / "training.json", info)
    return model, info


def cached_encoding(path: Path, encode) -> SparseEncoding:
    if path.is_file():
        z = np.load(path, allow_pickle=False)
        return SparseEncoding([sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))])
    encoded = encode()
    m = encoded.buckets[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, data=m.data, indices=m.indices, indptr=m.indptr, shape=np.array(m.shape))
    tmp.rename(path)
    return encoded


def encode_buckets(model: UHDEncoder, states: TokenStates, kind: str, cache: Path) -> SparseEncoding:
    """Each bucket encoded alone and cached by its WTA weights, so a bucket that kept its untrained start (or one
    shared by two models) is encoded once."""
    parts = []
    for i, layer in enumerate(model.layers):
        alone = UHDEncoder(model.backbone, bucket_config(model.config, i).replace(bucket_layers=(layer,)),
                           initialize=False)
        alone.buckets.wta[str(layer)].load_state_dict(model.buckets.wta[str(layer)].state_dict())
        key = hashlib.blake2b(digest_size=12)
        for tensor in alone.buckets.state_dict().values():
            key.update(tensor.contiguous().numpy().tobytes())
        key.update(repr((layer, model.config.wta_k, kind, states.n)).encode())
        parts.append(cached_encoding(cache / f"{kind}-L{layer}-{key.hexdigest()}.npz",
                                     lambda: alone.encode_states(states, kind, show_progress=kind == "document")))
    return SparseEncoding([p.buckets[0] for p in parts])


def result_info(result) -> dict:
    return {"steps": result.steps, "best_step": result.best_step, "dev_curve": result.evals,
            "train_seconds": round(result.seconds, 1)}


class Grid:
    """Per-query nDCG@10 and RR@10 of one model under every grid weight vector, for each split and scoring."""

    def __init__(self, queries: SparseEncoding, documents: SparseEncoding, doc_ids, splits, grid: np.ndarray):
        self.grid, self.splits = grid, splits
        self.values: dict = {}  # (scoring, split, measure) -> (n_split_queries, n_vectors)
        for scoring in ("binary", "weighted"):
            scores = bucket_scores(queries, documents, scoring)
            for split, (rows, qids, qrels) in splits.items():
                columns = {m: [] for m in MEASURES}
                for w in grid:
                    run = rank(sum(wb * s[rows] for wb, s in zip(w, scores)), qids, doc_ids, k=10)
                    values = per_query(run, qrels, list(MEASURES))
                    for m in MEASURES:
                        columns[m].append([values[m].get(q, 0.0) for q in qids])
                for m in MEASURES:
                    self.values[scoring, split, m] = np.array(columns[m]).T

    def per_query(self, vector: int | np.ndarray, qids) -> dict[str, float]:
        """Test binary nDCG@10 of each query at one grid row or one row per query."""
        v = self.values["binary", "test", "nDCG@10"]
        pick = v[:, vector] if np.ndim(vector) == 0 else v[np.arange(v.shape[0]), vector]
        return dict(zip(qids, pick.tolist()))

    def row(self, vector: int | np.ndarray, split: str = "test") -> dict:
        """Mean of each measure and scoring, at one grid row or one row per query."""
        out = {}
        for scoring in ("binary", "weighted"):
            for m in MEASURES:
                v = self.values[scoring, split, m]
                pick = v[:, vector] if np.ndim(vector) == 0 else v[np.arange(v.shape[0]), vector]
                out[f"{split}_{scoring}_{m}"] = float(pick.mean())
        return out

    def oracle(self, columns: np.ndarray, split: str = "test") -> dict:
        """Each query's best of the given grid rows, by each measure and scoring on its own: an upper bound."""
        return {f"{split}_{s}_{m}": float(self.values[s, split, m][:, columns].max(axis=1).mean())
                for s in ("binary", "weighted") for m in MEASURES}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--layers", type=comma_list(int))
    parser.add_argument("--out", default=str(RESULT_JSON), help="(default: results/buckets_scifact.json)")
    parser.add_argument("--only", type=comma_list(str), help="the models to run, of: untrained, separate, "
                        "single-fair, joint, single-fair untrained (default: all, in that order)")
    return parser


def main() -> None:
    args, config_path, settings = parse_args(build_parser(), "buckets")
    torch.set_num_threads(args.threads)
    cache = Path(args.cache_dir)
    layers = [int(x) for x in args.layers]
    data_dir = bundled_dataset_dir("scifact")
    train_data, test_data = load_beir(data_dir, "train"), load_beir(data_dir, "test")
    documents = list(train_data.corpus.values())
    doc_ids = [d.doc_id for d in documents]
    backbone = Backbone.from_pretrained(None)
    encoder = EncoderConfig(dim=args.dim, wta_k=args.wta_k, query_k=None, bucket_layers=tuple(layers),
                            document_max_length=args.document_max_length)
    recipe = Recipe(encoder=encoder, max_steps=args.max_steps, eval_every=args.eval_every,
                    max_minutes=args.max_minutes, dev_length_norm=0.0)  # plain-count dev, as its README figures
    fair = encoder.replace(dim=args.dim * len(layers), wta_k=args.wta_k * len(layers), bucket_layers=(layers[-1],))
    pairs, dev = training_pairs(documents, train_data, recipe)
    states_dir = cache / "states"
    doc_states = cached_states(backbone, [d.full_text for d in documents], layers, args.document_max_length,
                               states_dir / "documents")
    pair_states = cached_states(backbone, sorted({p.query for p in pairs}), layers, encoder.query_max_length,
                                states_dir / "pairs-queries")
    eval_queries = list(train_data.queries) + list(test_data.queries)
    eval_states = cached_states(backbone, [q.text for q in eval_queries], layers, encoder.query_max_length,
                                states_dir / "eval-queries")
    n_train = len(train_data.queries)
    dev_ids = {q.query_id for q in dev[0]}
    splits = {}
    for split, rows, qrels in (
        ("fit", [i for i in range(n_train) if eval_queries[i].query_id not in dev_ids], train_data.qrels),
        ("dev", [i for i in range(n_train) if eval_queries[i].query_id in dev_ids], train_data.qrels),
        ("test", list(range(n_train, len(eval_queries))), test_data.qrels),
    ):
        qids = [eval_queries[i].query_id for i in rows]
        splits[split] = (np.array(rows), qids, {q: qrels[q] for q in qids if q in qrels})

    test_qids = splits["test"][1]

    def untrained(config):
        def build():
            model = UHDEncoder(backbone, config)
            model.center_buckets(doc_states)
            return model, {"steps": 0}
        return build

    def single_fair():
        model = UHDEncoder(backbone, fair)
        result, _ = train_on_collection(model, documents, train_data,
                                        dataclasses.replace(recipe, encoder=fair, query_lengths=()),
                                        states=doc_states, query_states=pair_states)
        return model, result_info(result)

    def separate():
        model, results = train_separately(backbone, documents, train_data, recipe, doc_states, pair_states)
        return model, {"buckets": [result_info(r) for r in results]}

    def joint():
        model, result = train_jointly(backbone, documents, train_data, recipe, doc_states, pair_states)
        return model, result_info(result)

    builds = {"untrained": untrained(encoder), "separate": separate, "single-fair": single_fair, "joint": joint,
              "single-fair untrained": untrained(fair)}
    unknown = set(args.only or ()) - set(builds)
    if unknown:
        raise SystemExit(f"--only: unknown models {sorted(unknown)}; choose from {', '.join(builds)}")
    builds = {name: build for name, build in builds.items() if not args.only or name in args.only}
    grid = weight_grid(len(layers), args.grid)
    rows_out, info, paired = [], {}, {}
    for name, build in builds.items():
        slug = name.replace(" ", "-")
        model, info[name] = cached_model(cache / "models" / slug, build)
        print(f"{name}: {info[name]}", file=sys.stderr, flush=True)
        docs = encode_buckets(model, doc_states, "document", cache / "encodings")
        queries = encode_buckets(model, eval_states, "query", cache / "encodings")
        model_grid = grid if model.config.n_buckets > 1 else np.ones((1, 1))
        g = Grid(queries, docs, doc_ids, splits, model_grid)
        active = float(np.mean([docs.buckets[b].getnnz(axis=1).mean() for b in range(len(docs.buckets))]))
        base = {"model": name, "active_dims_per_document_per_bucket": round(active, 1)}
        if model.config.n_buckets == 1:
            rows_out.append({**base, "strategy": f"one bucket, layer {layers[-1]}, dim {fair.dim}, k {fair.wta_k}",
                             **g.row(0, "dev"), **g.row(0)})
            paired[name, "one bucket"] = g.per_query(0, test_qids)
            report(args, config_path, settings, recipe, grid, splits, len(documents), info, rows_out, paired)
            continue
        for b, layer in enumerate(layers):
            one_hot = int(np.flatnonzero((grid == np.eye(len(layers))[b]).all(axis=1))[0])
            rows_out.append({**base, "strategy": f"bucket {layer} alone (dim {args.dim}, k {args.wta_k})",
                             **g.row(one_hot, "dev"), **g.row(one_hot)})
            paired[name, f"bucket {layer} alone"] = g.per_query(one_hot, test_qids)
        rows_out.append({**base, "strategy": "equal weights", "weights": grid[0].tolist(), **g.row(0, "dev"),
                         **g.row(0)})
        dev_binary = g.values["binary", "dev", "nDCG@10"].mean(axis=0)
        tuned = int(np.argmax(dev_binary))  # first of equal scores: equal weights, then nearest to them
        rows_out.append({**base, "strategy": "dev-tuned weights", "weights": grid[tuned].tolist(),
                         **g.row(tuned, "dev"), **g.row(tuned)})
        paired[name, "equal weights"] = g.per_query(0, test_qids)
        paired[name, "dev-tuned weights"] = g.per_query(tuned, test_qids)
        # predictor: features from a binary index of this model; utilities = binary nDCG@10 on the fit queries
        index = BinaryIndex.from_encoding(docs, doc_ids, None, model.digest())
        feats = {s: BucketWeightPredictor.features(queries[splits[s][0]], index, "binary") for s in splits}
        tried = []
        for alpha in args.alphas:
            p = BucketWeightPredictor.fit(feats["fit"], g.values["binary", "fit", "nDCG@10"], grid, "binary", alpha)
            tried.append((g.row(p.choose(feats["dev"]), "dev")["dev_binary_nDCG@10"], alpha, p))
        best = max(tried, key=lambda t: t[0])  # first of equal: the smaller alpha
        choice = best[2].choose(feats["test"])
        rows_out.append({**base, "strategy": "per-query predictor", "alpha": best[1],
                         "dev_tried": [(a, d) for d, a, _ in tried], **g.row(best[2].choose(feats["dev"]), "dev"),
                         **g.row(choice), "test_vectors_used": int(np.unique(choice).size)})
        paired[name, "per-query predictor"] = g.per_query(choice, test_qids)
        single = [int(np.flatnonzero((grid == np.eye(len(layers))[b]).all(axis=1))[0]) for b in range(len(layers))]
        rows_out.append({**base, "strategy": "oracle: best bucket per query (upper bound)",
                         **g.oracle(np.array(single), "dev"), **g.oracle(np.array(single))})
        rows_out.append({**base, "strategy": "oracle: best grid vector per query (upper bound)",
                         **g.oracle(np.arange(len(grid)), "dev"), **g.oracle(np.arange(len(grid)))})
        if name == "separate":  # ship it: tuned weights in the config, the predictor beside it
            shipped = cache / "models" / "separate-tuned"
            model.config = model.config.replace(bucket_weights=tuple(grid[tuned]))
            model.save_pretrained(shipped, overwrite=True)
            best[2].save(shipped)
            # cross-check through the real search path (queries re-encoded by the float32 backbone)
            searcher = Searcher(UHDEncoder.from_pretrained(shipped), index, "binary",
                                bucket_predictor=BucketWeightPredictor.load(shipped))
            fixed = Searcher(UHDEncoder.from_pretrained(shipped), index, "binary", max_df=None, length_norm=None)
            info["searcher check (test binary nDCG@10)"] = {
                "predictor": evaluate(searcher.search(test_data.queries, k=100), test_data.qrels, ["nDCG@10"]),
                "tuned weights": evaluate(fixed.search(test_data.queries, k=100), test_data.qrels, ["nDCG@10"])}
        print(f"{name}: done at {time.strftime('%H:%M:%S')}", file=sys.stderr, flush=True)
        # written after every model, so a run cut short keeps what it measured
        report(args, config_path, settings, recipe, grid, splits, len(documents), info, rows_out, paired)


COMPARISONS = [  # (a, b): test binary nDCG@10 of a minus b, paired over the test queries
    (("separate", "dev-tuned weights"), ("single-fair", "one bucket")),
    (("separate", "dev-tuned weights"), ("separate", "bucket 6 alone")),
    (("separate", "dev-tuned weights"), ("separate", "equal weights")),
    (("joint", "dev-tuned weights"), ("separate", "dev-tuned weights")),
    (("joint", "dev-tuned weights"), ("single-fair", "one bucket")),
    (("separate", "per-query predictor"), ("separate", "dev-tuned weights")),
    (("separate", "dev-tuned weights"), ("untrained", "dev-tuned weights")),
]


def paired_rows(paired: dict) -> list[dict]:
    out = []
    for a, b in COMPARISONS:
        if a in paired and b in paired:
            diff = np.mean([paired[a][q] - paired[b][q] for q in paired[a]])
            out.append({"a": " / ".join(a), "b": " / ".join(b), "test_binary_nDCG@10_difference": float(diff),
                        "paired_t_test_p": paired_ttest(paired[a], paired[b])})
    return out


def report(args, config_path, settings, recipe, grid, splits, n_documents, info, rows_out, paired) -> None:
    print(f"\nSciFact: dev = {len(splits['dev'][1])} held-out train queries, test = {len(splits['test'][1])} "
          f"queries, whole corpus ({n_documents:,}); layers {args.layers}, dim {args.dim}, wta_k {args.wta_k} per "
          f"bucket; {args.max_steps} steps max")
    print(f"{'model':22s} {'strategy':48s} {'dev bin':>7s} {'test bin':>8s} {'test wtd':>8s} {'RR bin':>7s} "
          f"{'RR wtd':>7s}")
    for r in rows_out:
        print(f"{r['model']:22s} {r['strategy']:48s} {r['dev_binary_nDCG@10']:7.4f} {r['test_binary_nDCG@10']:8.4f} "
              f"{r['test_weighted_nDCG@10']:8.4f} {r['test_binary_RR@10']:7.4f} {r['test_weighted_RR@10']:7.4f}")
    for key, value in info.items():
        print(f"{key}: {value}")
    comparisons = paired_rows(paired)
    for c in comparisons:
        print(f"{c['a']} - {c['b']}: {c['test_binary_nDCG@10_difference']:+.4f} (paired t-test p = "
              f"{c['paired_t_test_p']:.3f})")
    write_json(args.out, {"dataset": "scifact", "dev": "10% of train queries (recipe split, seed 0), whole corpus",
                          "backbone": "all-MiniLM-L6-v2 (frozen)", "grid": grid.tolist(),
                          "recipe": recipe.to_json(),
                          **record(config_path, settings), "training": info, "rows": rows_out,
                          "paired_test_binary_nDCG@10": comparisons})
    print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
