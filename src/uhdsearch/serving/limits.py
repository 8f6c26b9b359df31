"""Caps on everything one request can make big: the checks the routes run before any work (settings.py holds
the numbers). Each raises ServiceError naming the field: 413 for the size of a batch or response, else 422."""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from uhdsearch.serving.service import ServiceError
from uhdsearch.serving.settings import ServeSettings
from uhdsearch.types import Run


def check_queries(texts: Sequence[str], k: int, settings: ServeSettings, where: str = "q") -> None:
    """Batch size, query length, k, and the response's hits (queries x k)."""
    if len(texts) > settings.max_batch:
        raise ServiceError(413, f"{len(texts)} queries in one request; at most {settings.max_batch}")
    for i, text in enumerate(texts):
        if len(text) > settings.max_query_chars:
            name = where if len(texts) == 1 and where == "q" else f"{where}[{i}].text"
            raise ServiceError(422, f"{name}: the query has {len(text)} characters; at most "
                                    f"{settings.max_query_chars} are allowed")
    if k > settings.max_k:
        raise ServiceError(422, f"k={k} is over the limit of {settings.max_k}")
    if len(texts) * k > settings.max_hits:
        raise ServiceError(413, f"{len(texts)} queries x k={k} would answer {len(texts) * k} hits; at most "
                                f"{settings.max_hits} in one response (fewer queries or a smaller k)")


def check_options(query_k: int | None, bucket_weights: Iterable[float] | None, settings: ServeSettings) -> None:
    if query_k is not None and query_k > settings.max_query_k:
        raise ServiceError(422, f"query_k={query_k} is over the limit of {settings.max_query_k} (0 keeps every "
                                "active dimension)")
    for weight in bucket_weights or ():
        if not math.isfinite(weight) or abs(weight) > settings.max_bucket_weight:
            raise ServiceError(422, f"bucket_weights: {weight!r} is not a number within "
                                    f"±{settings.max_bucket_weight:g}")


def check_candidates(candidates: Mapping[str, Sequence[str]] | None, settings: ServeSettings) -> None:
    for query_id, doc_ids in (candidates or {}).items():
        if len(doc_ids) > settings.max_candidates:
            raise ServiceError(422, f"candidates[{query_id!r}]: {len(doc_ids)} doc_ids; at most "
                                    f"{settings.max_candidates} per query")


def check_documents(documents: Sequence, settings: ServeSettings) -> None:
    """Documents per add, and each one's title and text length."""
    if len(documents) > settings.max_documents_per_add:
        raise ServiceError(413, f"{len(documents)} documents in one request; at most "
                                f"{settings.max_documents_per_add}")
    for i, d in enumerate(documents):
        for name, limit in (("title", settings.max_title_chars), ("text", settings.max_text_chars)):
            if len(getattr(d, name)) > limit:
                raise ServiceError(422, f"documents[{i}].{name}: {len(getattr(d, name))} characters; at most "
                                        f"{limit}")


def check_finite(value: float, what: str) -> None:
    if not math.isfinite(value):
        raise ServiceError(422, f"{what} is not finite (overflow); use smaller bucket_weights")


def check_scores(run: Run) -> None:
    """422 rather than a 500 from the JSON encoder when a score overflowed (huge weights over many dims)."""
    for query_id, hits in run.results.items():
        if any(not math.isfinite(hit.score) for hit in hits):
            raise ServiceError(422, f"query {query_id!r}: a score is not finite (overflow); use smaller "
                                    "bucket_weights")
