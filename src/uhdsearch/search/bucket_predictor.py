"""Per-query bucket weights (paper A.3's future work): pick one weight vector of a grid for each query.

Features of a query, per bucket, from its own encoding and one bucket-alone search of the index: log(1 + active
dims), and the best and 10th-best score divided by the query's self-score (its active count for binary scoring,
its squared norm for weighted), i.e. how well that bucket alone matches the collection. A ridge regression per
grid vector predicts the query's nDCG@10 under that vector from the standardised features; the predictor picks
the argmax (the first of equal ones). Fitted in closed form (deterministic), stored as JSON beside the model.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from uhdsearch.errors import ModelFormatError, UsageError
from uhdsearch.io import read_json, write_json
from uhdsearch.sparse import SparseEncoding

FILE = "bucket_predictor.json"
FORMAT = "uhd-bucket-predictor"
DEPTH = 10  # the feature search's depth: best and 10th-best score


@dataclass(frozen=True)
class BucketWeightPredictor:
    """grid: (n_vectors, n_buckets) weight vectors; the linear model maps standardised features to their utility."""

    grid: np.ndarray
    scoring: str  # the scoring the features and utilities were measured with
    mean: np.ndarray  # (n_features,)
    scale: np.ndarray  # (n_features,)
    coef: np.ndarray  # (n_features, n_vectors)
    intercept: np.ndarray  # (n_vectors,)
    alpha: float = 1.0

    def __post_init__(self) -> None:
        n_vectors, n_buckets = self.grid.shape
        n_features = 3 * n_buckets
        shapes = {"mean": (n_features,), "scale": (n_features,), "coef": (n_features, n_vectors),
                  "intercept": (n_vectors,)}
        for name, shape in shapes.items():
            if getattr(self, name).shape != shape:
                raise ModelFormatError(f"bucket predictor: {name} has shape {getattr(self, name).shape}, expected "
                                       f"{shape} for {n_vectors} weight vectors of {n_buckets} buckets")
        if self.scoring not in ("binary", "weighted"):
            raise ModelFormatError(f"bucket predictor: scoring {self.scoring!r} is not 'binary' or 'weighted'")
        if not all(np.isfinite(getattr(self, n)).all() for n in ("grid", "mean", "scale", "coef", "intercept")):
            raise ModelFormatError("bucket predictor: NaN or infinite values")

    @property
    def n_buckets(self) -> int:
        return int(self.grid.shape[1])

    @classmethod
    def fit(cls, features: np.ndarray, utilities: np.ndarray, grid: np.ndarray, scoring: str,
            alpha: float = 1.0) -> BucketWeightPredictor:
        """Ridge regression of each query's utility (e.g. nDCG@10) under each grid vector on its features.

        Args:
            features: (n_queries, 3 * n_buckets) from `features`; utilities: (n_queries, n_vectors).
        """
        if features.shape[0] != utilities.shape[0] or utilities.shape[1] != grid.shape[0]:
            raise UsageError(f"features {features.shape}, utilities {utilities.shape} and grid {grid.shape} disagree")
        mean = features.mean(axis=0)
        scale = features.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        x = (features - mean) / scale
        target = utilities - utilities.mean(axis=0)
        coef = np.linalg.solve(x.T @ x + alpha * np.eye(x.shape[1]), x.T @ target)
        return cls(np.asarray(grid, dtype=np.float64), scoring, mean, scale, coef, utilities.mean(axis=0), alpha)

    def choose(self, features: np.ndarray) -> np.ndarray:
        """(n_queries,) the row of `grid` each query gets."""
        predicted = ((features - self.mean) / self.scale) @ self.coef + self.intercept
        return np.argmax(predicted, axis=1)

    @staticmethod
    def features(queries: SparseEncoding, index, scoring: str) -> np.ndarray:
        """(n_queries, 3 * n_buckets): per bucket log(1 + active), best and 10th-best self-normalised score."""
        columns = []
        n_buckets = len(queries.buckets)
        for b, q in enumerate(queries.buckets):
            one_hot = [1.0 if i == b else 0.0 for i in range(n_buckets)]
            _, scores = index.search_encoded(queries, DEPTH, one_hot, scoring)
            if scores.shape[1] < DEPTH:  # fewer documents than DEPTH: the missing ranks score 0
                scores = np.pad(scores, ((0, 0), (0, DEPTH - scores.shape[1])))
            active = np.diff(q.indptr)
            self_score = active if scoring == "binary" else np.asarray(q.multiply(q).sum(axis=1)).ravel()
            self_score = np.maximum(self_score, 1e-12)
            columns += [np.log1p(active), scores[:, 0] / self_score, scores[:, DEPTH - 1] / self_score]
        return np.stack(columns, axis=1).astype(np.float64)

    # ------------------------------------------------------------ persistence
    def save(self, model_dir: str | os.PathLike) -> Path:
        """Write bucket_predictor.json into the model's directory (atomically)."""
        path = Path(model_dir) / FILE
        write_json(path, {"format": FORMAT, "format_version": 1, "scoring": self.scoring, "alpha": self.alpha,
                          "grid": self.grid.tolist(), "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                          "coef": self.coef.tolist(), "intercept": self.intercept.tolist()})
        return path

    @classmethod
    def load(cls, model_dir: str | os.PathLike) -> BucketWeightPredictor | None:
        """The predictor stored beside a model, or None where the model has none.

        Raises:
            ModelFormatError: the file is not a bucket predictor or its arrays disagree.
        """
        path = Path(model_dir) / FILE
        if not path.is_file():
            return None
        try:
            obj = read_json(path)
        except ValueError as exc:
            raise ModelFormatError(str(exc)) from None
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            raise ModelFormatError(f"{path}: not a bucket predictor (format {FORMAT!r} expected)")
        try:
            arrays = {k: np.asarray(obj[k], dtype=np.float64) for k in ("grid", "mean", "scale", "coef", "intercept")}
            return cls(scoring=obj["scoring"], alpha=float(obj["alpha"]), **arrays)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFormatError(f"{path}: invalid bucket predictor: {exc!r}") from None
