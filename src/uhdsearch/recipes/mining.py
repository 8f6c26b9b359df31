"""Positives and negatives mined from a ranking: the teacher's (once, before training) or the model's own (ANCE,
re-mined while it trains).

On a collection without labels a corpus query (an ICT sentence) has one known positive, its source passage; the
teacher's top m documents are as likely relevant, so `teacher_mined_pairs` makes them positives too, and negatives
come from the teacher's ranking below a cut, never a positive (negatives.hard_negatives_from_rankings).
`ModelMiner` ranks a sample of the corpus by the model's own binary overlap score, as deployed, and draws each
pair's negative from that ranking (Xiong et al. 2021, ANCE); the trainer calls it every `remine_every` steps.
"""
from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.sparse as sp

from uhdsearch.encoder.states import TokenStates
from uhdsearch.topk import top_k
from uhdsearch.training.data import TrainingPair
from uhdsearch.training.negatives import hard_negatives_from_rankings, positives_by_query, teacher_negatives
from uhdsearch.recipes.teachers import CachedTeacher, TeacherRankings, rank_with_teacher
from uhdsearch.types import Document

logger = logging.getLogger(__name__)


def teacher_mined_pairs(pairs: Sequence[TrainingPair], rankings: Mapping[str, Sequence[int]],
                        top_m: int) -> list[TrainingPair]:
    """`pairs`, plus for each corpus query (an ICT pair, `drop` set) one pair per row of the teacher's top `top_m`
    that is not already its positive. Qrels pairs keep their judged positives only.

    >>> src = TrainingPair("cells divide.", 0, (0, 13))
    >>> [(p.query, p.doc_row) for p in teacher_mined_pairs([src], {"cells divide.": [0, 2, 1]}, top_m=2)]
    [('cells divide.', 0), ('cells divide.', 2)]
    """
    known = positives_by_query(pairs)
    out = list(pairs)
    for query in dict.fromkeys(p.query for p in pairs if p.drop is not None):
        for row in list(rankings.get(query, []))[:top_m]:
            if row not in known[query]:
                known[query].add(row)
                out.append(TrainingPair(query, int(row)))
    return out


def rank_for_mining(teacher: CachedTeacher, queries: Sequence[str], documents: Sequence[Document], depth: int,
                    first_stage: CachedTeacher | None = None) -> TeacherRankings:
    """The teacher's top `depth` for each query; a costly teacher (sum-of-max) scores only `first_stage`'s top
    max(100, 2 x depth). The scores are kept in the CachedTeacher, so distilling on mined documents costs nothing."""
    first = None
    if first_stage is not None:
        ranked = rank_with_teacher(first_stage.teacher, queries, documents, depth=max(100, 2 * depth),
                                   show_progress=False)
        first = ranked.as_dict()
    rankings = rank_with_teacher(teacher.teacher, queries, documents, depth=depth, candidates=first,
                                 show_progress=False)
    teacher.remember(rankings)
    return rankings


def mine_with_teacher(
    teacher: CachedTeacher, documents: Sequence[Document], pairs: list[TrainingPair], mined_positives: int,
    negative_depth: int, negative_skip: int, first_stage: CachedTeacher | None = None, seed: int = 0,
) -> tuple[list[TrainingPair], list[int | None] | None]:
    """The pairs with the teacher's top `mined_positives` added as positives of each corpus query, and one
    teacher-mined negative per pair from ranks max(negative_skip, mined_positives)..negative_depth, never a
    positive (None for all when negative_depth is 0). `first_stage`: see rank_for_mining."""
    depth = max(mined_positives, negative_depth)
    rankings = rank_for_mining(teacher, [p.query for p in pairs], documents, depth, first_stage).as_dict()
    if mined_positives:
        before = len(pairs)
        pairs = teacher_mined_pairs(pairs, rankings, mined_positives)
        logger.info("teacher %s: %d mined positive pairs beside %d", teacher.name, len(pairs) - before, before)
    if not negative_depth:
        return pairs, None
    return pairs, teacher_negatives(pairs, rankings, depth=negative_depth, skip=max(negative_skip, mined_positives),
                                    seed=seed)


class ModelMiner:
    """ANCE: each pair's hard negative from the model's own binary ranking of a corpus sample, never a positive.

    Args:
        query_states: token states of `queries` (sorted unique texts of the pairs), at the model's bucket layers.
        document_states: the corpus's token states; `n_documents` rows are sampled once (seeded): encoding the
            whole corpus at every re-mining would cost more than the steps between (positives are banned by row).
        depth, skip: the negative is drawn from the model's ranks skip..depth (the top few are often unjudged
            positives).
    """

    def __init__(self, pairs: Sequence[TrainingPair], queries: Sequence[str], query_states: TokenStates,
                 document_states: TokenStates, n_documents: int = 1_000, depth: int = 30, skip: int = 0,
                 seed: int = 0) -> None:
        self.pairs, self.queries = list(pairs), list(queries)
        self.query_states, self.document_states = query_states, document_states
        self.positives = positives_by_query(self.pairs)
        n = document_states.n
        self.rows = np.array(sorted(random.Random(seed).sample(range(n), min(n, n_documents))), dtype=np.int64)
        self.depth, self.skip, self.seed = depth, skip, seed
        self.calls = 0

    def rankings(self, model) -> dict[str, list[int]]:
        """Each query's top `depth` sample rows by the deployed score: the bucket-weighted count of shared dims."""
        queries = model.encode_states(self.query_states, "query", show_progress=False)
        documents = model.encode_states(self.document_states, "document", show_progress=False, rows=self.rows)
        scores = sum(w * (_ones(q) @ _ones(d).T).toarray() for w, q, d in
                     zip(model.config.weights, queries.buckets, documents.buckets))
        out = {}
        for i, query in enumerate(self.queries):
            positions, _ = top_k(np.asarray(scores[i], dtype=np.float32), self.depth, positive_only=False)
            out[query] = [int(r) for r in self.rows[positions]]
        return out

    def __call__(self, model) -> list[int | None]:
        """One negative row (or None) per pair from the model's current ranking; a new draw at each call."""
        self.calls += 1
        return hard_negatives_from_rankings(self.pairs, self.rankings(model), self.positives, depth=self.depth,
                                            seed=self.seed + self.calls, skip=self.skip)


def _ones(matrix: sp.csr_matrix) -> sp.csr_matrix:
    out = matrix.copy()
    out.data = np.ones_like(out.data, dtype=np.float32)
    return out
