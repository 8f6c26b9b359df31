"""Teachers for distillation: any project retriever scores (query, document row) pairs; scores are cached.

A teacher has a `name` and `scores(queries, doc_rows) -> (n_queries, n_docs)` float32 torch tensor over the rows of
the training corpus list. `CachedTeacher` remembers every pair it has scored; `rank_with_teacher` computes each
query's top `depth` once and keeps it in memory and, optionally, in .npy files named by a digest of the teacher's
name, the corpus and the queries (never pickle). Teacher-mined negatives come from these rankings (negatives.py).
"""
from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from uhdsearch.errors import UsageError
from uhdsearch.io import atomic_save_npy, load_npy
from uhdsearch.topk import top_k
from uhdsearch.training.trainer import TeacherScorer
from uhdsearch.types import Document, Retriever

logger = logging.getLogger(__name__)


class DenseTeacher:
    """Cosine (inner product of unit vectors) of query and document embeddings, e.g. the dense backbone's.

    Args:
        query_vectors: query text -> (hidden,) float32 vector, known in advance; others come from `encode_queries`.
        document_vectors: (n_documents, hidden) float32, one row per corpus row.
        encode_queries: texts -> (n, hidden) float32 (e.g. DenseRetriever.encode_queries); results are kept.
    """

    def __init__(self, query_vectors: Mapping[str, np.ndarray] | None, document_vectors: np.ndarray,
                 encode_queries: Callable[[Sequence[str]], np.ndarray] | None = None, name: str = "dense") -> None:
        self.query_vectors = dict(query_vectors or {})
        self.document_vectors = torch.from_numpy(np.ascontiguousarray(document_vectors, dtype=np.float32))
        self.encode_queries = encode_queries
        self.name = name

    def scores(self, queries: Sequence[str], doc_rows: Sequence[int]) -> torch.Tensor:
        """Cosines of the query texts' vectors with the rows' vectors (new query texts are encoded once).

        Returns (len(queries), len(doc_rows)) float32: `queries` are texts, `doc_rows` rows of the corpus list.
        """
        missing = sorted({t for t in queries if t not in self.query_vectors})
        if missing:
            if self.encode_queries is None:
                raise KeyError(f"{len(missing)} queries have no vector and no encoder (first: {missing[0]!r})")
            self.query_vectors.update(zip(missing, self.encode_queries(missing)))
        q = torch.from_numpy(np.stack([self.query_vectors[t] for t in queries]).astype(np.float32))
        return q @ self.document_vectors[list(doc_rows)].t()




class SumOfMaxTeacher:
    """Late interaction (sum over query tokens of the best document token, cosine): the token-level teacher.

    Args:
        doc_tokens: (n_doc_tokens, hidden) unit token vectors of the corpus, packed; doc_offsets: (n_documents + 1,).
        encode_queries: texts -> one (n_tokens, hidden) float32 tensor of unit vectors per text; results are kept.
    """

    def __init__(self, doc_tokens: torch.Tensor, doc_offsets: np.ndarray,
                 encode_queries: Callable[[Sequence[str]], list[torch.Tensor]], name: str = "sum-of-max") -> None:
        self.doc_tokens = doc_tokens
        self.doc_offsets = np.asarray(doc_offsets, dtype=np.int64)
        self.encode_queries = encode_queries
        self.name = name
        self._query_tokens: dict[str, torch.Tensor] = {}

    @classmethod
    def from_reranker(cls, reranker, batch_size: int = 256) -> SumOfMaxTeacher:
        """Share a `baselines.multivector.SumOfMaxReranker`'s document tokens and query encoding."""
        from uhdsearch.encoder.states import compute_token_states

        last = reranker.backbone.n_layers

        def encode(texts: Sequence[str]) -> list[torch.Tensor]:
            states = compute_token_states(reranker.backbone, texts, [last], reranker.query_max_length, batch_size,
                                          show_progress=False)
            tokens = states.layer(last).float()
            if reranker.token_transform is not None:
                tokens = reranker.token_transform(tokens)
            if reranker.normalize:
                tokens = torch.nn.functional.normalize(tokens, dim=1)
            return [tokens[states.offsets[i] : states.offsets[i + 1]] for i in range(states.n)]

        return cls(reranker.doc_tokens, reranker.offsets, encode, reranker.name)

    def scores(self, queries: Sequence[str], doc_rows: Sequence[int]) -> torch.Tensor:
        """Sum-of-max late-interaction scores of the query texts against the rows' token states.

        Returns (len(queries), len(doc_rows)) float32: `queries` are texts, `doc_rows` rows of the corpus list.
        """
        from uhdsearch.baselines.multivector import sum_of_max

        missing = sorted({t for t in queries if t not in self._query_tokens})
        if missing:
            self._query_tokens.update(zip(missing, self.encode_queries(missing)))
        rows = np.asarray(doc_rows, dtype=np.int64)
        lengths = self.doc_offsets[rows + 1] - self.doc_offsets[rows]
        index = np.concatenate([np.arange(self.doc_offsets[r], self.doc_offsets[r + 1]) for r in rows])
        owner = torch.from_numpy(np.repeat(np.arange(rows.size), lengths))
        tokens = self.doc_tokens[torch.from_numpy(index)].float()
        with torch.no_grad():
            return torch.stack([sum_of_max(self._query_tokens[t], tokens, owner, rows.size) for t in queries])


class BM25Teacher:
    """BM25 scores of a `BM25Retriever` built over the same corpus list (its document numbers are the rows)."""

    def __init__(self, bm25, name: str = "bm25") -> None:
        self.bm25 = bm25
        self.name = name

    def scores(self, queries: Sequence[str], doc_rows: Sequence[int]) -> torch.Tensor:
        """BM25 scores of the query texts against the rows (the BM25 index's document numbers).

        Returns (len(queries), len(doc_rows)) float32: `queries` are texts, `doc_rows` rows of the corpus list.
        """
        rows = np.asarray(doc_rows, dtype=np.int64)
        tokens = self.bm25.tokenize_queries(list(queries))
        return torch.from_numpy(np.stack([self.bm25.score_all(t)[rows] for t in tokens]).astype(np.float32))


class HybridTeacher:
    """weight * first / scales[0] + (1 - weight) * second / scales[1]: scales put both on one footing
    (BM25 scores run to ~30, cosines to 1); the ranking of a linear fusion depends on them."""

    def __init__(self, first: TeacherScorer, second: TeacherScorer, weight: float = 0.5,
                 scales: tuple[float, float] = (1.0, 1.0), name: str | None = None) -> None:
        if not 0.0 <= weight <= 1.0:
            raise UsageError(f"weight={weight} must be between 0 and 1 (the first teacher's share)")
        self.first, self.second, self.weight, self.scales = first, second, float(weight), scales
        self.name = name or f"hybrid({first.name},{second.name},{weight:g},{scales[0]:g},{scales[1]:g})"

    def scores(self, queries: Sequence[str], doc_rows: Sequence[int]) -> torch.Tensor:
        """The weighted sum of both teachers' scores, each divided by its scale.

        Returns (len(queries), len(doc_rows)) float32: `queries` are texts, `doc_rows` rows of the corpus list.
        """
        return (self.weight * self.first.scores(queries, doc_rows) / self.scales[0]
                + (1 - self.weight) * self.second.scores(queries, doc_rows) / self.scales[1])


class RetrieverTeacher:
    """A teacher from any `Retriever` (UHD, hybrid, ...): the scores of its top `depth` per query.

    Documents it does not list score that query's lowest listed score (0 when it lists none).

    Args:
        retriever: anything with ``search(queries, k) -> Run`` over the training corpus.
        doc_ids: the training corpus's doc_ids, in row order (the rows `scores` is asked for).
        depth: hits asked of the retriever per query.
        name: the teacher's name (it keys cached rankings); default the retriever's `name` or class name.
    """

    def __init__(self, retriever: Retriever, doc_ids: Sequence[str], depth: int = 100,
                 name: str | None = None) -> None:
        self.retriever = retriever
        self.row = {doc_id: i for i, doc_id in enumerate(doc_ids)}
        self.depth = depth
        self.name = name or getattr(retriever, "name", type(retriever).__name__)
        self._listed: dict[str, tuple[dict[int, float], float]] = {}

    def scores(self, queries: Sequence[str], doc_rows: Sequence[int]) -> torch.Tensor:
        """The retriever's scores where it lists a row in its top `depth`, else the query's lowest listed score.

        Returns (len(queries), len(doc_rows)) float32: `queries` are texts, `doc_rows` rows of the corpus list.
        """
        missing = sorted({t for t in queries if t not in self._listed})
        if missing:
            run = self.retriever.search({str(i): t for i, t in enumerate(missing)}, k=self.depth)
            for i, text in enumerate(missing):
                listed = {self.row[h.doc_id]: h.score for h in run.results.get(str(i), []) if h.doc_id in self.row}
                self._listed[text] = (listed, min(listed.values(), default=0.0))
        out = [[self._listed[t][0].get(r, self._listed[t][1]) for r in doc_rows] for t in queries]
        return torch.tensor(out, dtype=torch.float32).reshape(len(queries), len(doc_rows))


class CachedTeacher:
    """Wraps a teacher; every (query, row) score is computed once and then read from memory."""

    def __init__(self, teacher: TeacherScorer) -> None:
        self.teacher = teacher
        self.name = teacher.name
        self.memory: dict[tuple[str, int], float] = {}

    def remember(self, rankings: TeacherRankings) -> None:
        """Keep the scores a ranking computed (teacher-mined negatives then cost nothing to score)."""
        for query, rows, scores in zip(rankings.queries, rankings.rows, rankings.scores):
            for r, s in zip(rows, scores):
                if r >= 0:
                    self.memory[(query, int(r))] = float(s)

    def scores(self, queries: Sequence[str], doc_rows: Sequence[int]) -> torch.Tensor:
        """The wrapped teacher's scores, computing only the (query, row) pairs not seen before.

        Returns (len(queries), len(doc_rows)) float32: `queries` are texts, `doc_rows` rows of the corpus list.
        """
        rows = [int(r) for r in doc_rows]
        todo_q = sorted({q for q in queries for r in rows if (q, r) not in self.memory})
        if todo_q:
            todo_r = sorted({r for q in todo_q for r in rows if (q, r) not in self.memory})
            computed = self.teacher.scores(todo_q, todo_r).detach().float()
            for i, q in enumerate(todo_q):
                for j, r in enumerate(todo_r):
                    self.memory[(q, r)] = float(computed[i, j])
        return torch.tensor([[self.memory[(q, r)] for r in rows] for q in queries],
                            dtype=torch.float32).reshape(len(queries), len(rows))


@dataclass
class TeacherRankings:
    """Each query's top `depth` rows by teacher score, best first; rows (n, depth) int64 padded with -1,
    scores (n, depth) float32 padded with -inf."""

    name: str
    queries: list[str]
    rows: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        self._position = {q: i for i, q in enumerate(self.queries)}

    def ranking(self, query: str) -> list[int]:
        """The query's rows, best first ([] for a query the teacher did not rank)."""
        i = self._position.get(query)
        return [] if i is None else [int(r) for r in self.rows[i] if r >= 0]

    def as_dict(self) -> dict[str, list[int]]:
        """query text -> its rows, best first (the padding left out): the rankings `negatives` draws from."""
        return {q: self.ranking(q) for q in self.queries}


def corpus_digest(documents: Sequence[Document]) -> str:
    """Fingerprint of a corpus list (ids, titles and texts in order) for cache file names."""
    h = hashlib.blake2b(digest_size=12)
    for d in documents:
        h.update(f"{d.doc_id}\x00{d.title}\x00{d.text}\x01".encode())
    return h.hexdigest()


def rank_with_teacher(
    teacher: TeacherScorer, queries: Sequence[str], documents: Sequence[Document], depth: int = 100,
    candidates: Mapping[str, Sequence[int]] | None = None, cache_dir: str | os.PathLike | None = None,
    batch_size: int = 64, show_progress: bool = True,
) -> TeacherRankings:
    """Each query's top `depth` documents by teacher score, computed once (and read from `cache_dir` if there).

    Args:
        queries: query texts (duplicates are scored once).
        documents: the corpus list whose rows the teacher scores.
        candidates: query -> rows to score (e.g. a first stage's list for a costly teacher such as sum-of-max);
            None scores every row (fine for dense and BM25 teachers).
        cache_dir: where `<name>-<digest>.rows.npy` and `.scores.npy` live; the digest covers the teacher's
            name, the corpus, the queries, depth and candidates, so a changed input never reads a stale file.
    Returns:
        TeacherRankings over the unique queries in sorted order.
    """
    if depth < 1:
        raise UsageError(f"depth={depth} must be positive")
    unique = sorted(set(queries))
    paths = None
    if cache_dir is not None:
        h = hashlib.blake2b(digest_size=12)
        h.update(f"{teacher.name}\x00{corpus_digest(documents)}\x00{depth}\x00".encode())
        for q in unique:
            h.update(q.encode() + b"\x00")
            if candidates is not None:
                h.update(np.asarray(candidates.get(q, []), dtype=np.int64).tobytes() + b"\x01")
        stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in teacher.name)[:40]
        base = Path(cache_dir) / f"{stem}-{h.hexdigest()}"
        paths = (Path(f"{base}.rows.npy"), Path(f"{base}.scores.npy"))
        if all(p.is_file() for p in paths):
            rows, scores = load_npy(paths[0]), load_npy(paths[1])
            if rows.shape == scores.shape == (len(unique), depth):
                logger.info("teacher %s: rankings read from %s", teacher.name, paths[0])
                return TeacherRankings(teacher.name, unique, rows.astype(np.int64), scores.astype(np.float32))
            logger.warning("ignoring %s: shape %s, expected %s", paths[0], rows.shape, (len(unique), depth))
    rows_out = np.full((len(unique), depth), -1, dtype=np.int64)
    scores_out = np.full((len(unique), depth), -np.inf, dtype=np.float32)
    all_rows = np.arange(len(documents))
    for start in tqdm(range(0, len(unique), batch_size), desc=f"teacher {teacher.name}", disable=not show_progress):
        batch = unique[start : start + batch_size]
        if candidates is None:
            block = teacher.scores(batch, all_rows).numpy()
            for i in range(len(batch)):
                _keep_top(block[i], all_rows, depth, rows_out[start + i], scores_out[start + i])
        else:
            for i, q in enumerate(batch):
                cand = np.unique(np.asarray(candidates.get(q, []), dtype=np.int64))
                if cand.size:
                    s = teacher.scores([q], cand).numpy()[0]
                    _keep_top(s, cand, depth, rows_out[start + i], scores_out[start + i])
    if paths is not None:
        paths[0].parent.mkdir(parents=True, exist_ok=True)
        for path, array in zip(paths, (rows_out, scores_out)):
            atomic_save_npy(path, array)
    return TeacherRankings(teacher.name, unique, rows_out, scores_out)


def _keep_top(scores: np.ndarray, rows: np.ndarray, depth: int, rows_out: np.ndarray, scores_out: np.ndarray) -> None:
    # `rows` ascend, so the one tie rule (score desc, then position) keeps corpus order among ties.
    positions, best = top_k(scores, depth, positive_only=False)
    rows_out[: positions.size] = rows[positions]
    scores_out[: positions.size] = best
