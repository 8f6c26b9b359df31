"""create_app(service, settings) -> FastAPI: the search API, the page at `/`, JSON errors, limits, metrics.

Every error is `{"error": message}` with a 4xx status (5xx only for a bug, or 503 when busy), never a traceback.
Blocking work (encoding, index search) runs in worker threads, at most `settings.workers` at once, so the event
loop keeps answering and the cores are not oversubscribed; admission.py bounds the queue in front of them.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path

from fastapi import Depends, FastAPI, Query as Param, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from uhdsearch.errors import UhdError
from uhdsearch.search.options import SearchOptions
from uhdsearch.search.searcher import MAX_QUERY_CHARS
from uhdsearch.serving import limits
from uhdsearch.serving.admission import Admission, BodyLimit
from uhdsearch.serving.batching import PreEncoded, QueryBatcher
from uhdsearch.serving.explain import WinnersCache
from uhdsearch.serving.guards import add_guards, write_guard
from uhdsearch.serving.metrics import Metrics
from uhdsearch.serving.schemas import SEARCH_OPTIONS, AddRequest, DocumentOut, SearchRequest, SearchResponse
from uhdsearch.serving.service import SearchService, ServiceError, Snapshot
from uhdsearch.serving.settings import ServeSettings
from uhdsearch.types import Document, Query, Run

logger = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).resolve().parent / "static"


def create_app(service: SearchService, settings: ServeSettings | None = None) -> FastAPI:
    """The FastAPI app serving `service`; the service is closed (writer lock released) at shutdown."""
    from contextlib import asynccontextmanager

    settings = settings or ServeSettings()
    metrics = Metrics()
    # Searchers encode queries through PreEncoded: rows the batcher encoded with other requests' queries, or
    # alone. It reports the time of real encodings only.
    pre_encoded = PreEncoded(service.query_encoder or service.encoder, metrics.encode.observe)
    service.query_encoder, service.on_encode = pre_encoded, lambda seconds: None
    service.document_winners = WinnersCache(settings.explain_cache)
    ready, stopping = threading.Event(), threading.Event()

    def warm_up() -> None:
        try:
            searcher = service.searcher(service.snapshot)
            searcher.warm_up(SearchOptions.default())  # also the cascade's doc-major rows, which it uses
            searcher.search([Query("warm-up", "warm up")], 1, options=SearchOptions.default())
        except Exception:
            if not stopping.is_set():
                raise
            # shut down before warm-up ended (e.g. a sharded index's actors already ended): nothing to warm
            logger.debug("warm-up cut short by shutdown", exc_info=True)
            return
        ready.set()

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        if service.typical is not None:
            service.typical.start()
        warming = asyncio.ensure_future(admission.run(warm_up, queued=False))  # on a worker: it computes
        warming.add_done_callback(_log_failure)
        yield
        stopping.set()
        warming.cancel()  # if it still waits for a worker
        admission.close()  # work that has started ends before the writer closes
        _commit_pending(service, settings.commit_at_shutdown)
        service.close()

    # No /docs or /redoc: FastAPI's Swagger UI and ReDoc load from a CDN. The schema stays at /openapi.json.
    app = FastAPI(title="uhdsearch", summary="UHD-BERT sparse retrieval over HTTP", lifespan=lifespan,
                  docs_url=None, redoc_url=None)
    app.state.service, app.state.settings, app.state.metrics, app.state.ready = service, settings, metrics, ready
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s,
                       refuse=_error)
    app.add_middleware(_Measure, metrics=metrics)
    add_guards(app, settings)
    _add_error_handlers(app)
    may_write = Depends(write_guard(settings, lambda: service.write_refusal))

    admission = Admission(settings.workers, settings.max_queue, settings.queue_timeout_s)
    app.state.admission = admission
    blocking = admission.run
    batcher = QueryBatcher(pre_encoded, blocking, settings.encode_batch, settings.encode_wait_s)
    app.state.batcher = batcher

    async def search(queries: list[Query], k: int, options: SearchOptions, candidates=None) -> tuple[Run, Snapshot]:
        """The queries encoded in a batch with other requests' (batching.py), then searched on a worker."""
        rows = await batcher.encode([q.text[:MAX_QUERY_CHARS] for q in queries])

        def searching():
            with pre_encoded.given(rows):
                return service.search(queries, k, options, candidates)

        return await blocking(searching)

    def hits(run: Run, query: Query, snapshot: Snapshot) -> dict:
        found = []
        for rank, hit in enumerate(run.results.get(query.query_id, []), 1):
            document = snapshot.texts.get(hit.doc_id) or Document(hit.doc_id, "")
            found.append({"doc_id": hit.doc_id, "score": hit.score, "rank": rank, "title": document.title,
                          "snippet": _snippet(document.text, settings.snippet_chars)})
        return {"query_id": query.query_id, "text": query.text, "hits": found}

    def respond(system: str, k: int, queries: list[Query], run: Run, snapshot: Snapshot) -> dict:
        limits.check_scores(run)
        return {"system": system, "k": k, "generation": snapshot.generation,
                "results": [hits(run, q, snapshot) for q in queries]}

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/search", response_model=SearchResponse)
    async def search_get(
        q: str = Param(..., description="query text; an empty query gets no hits"),
        k: int = Param(10, ge=1), scoring: str | None = Param(None, pattern="^(binary|weighted)$"),
        query_k: int | None = Param(None, ge=0), bucket_weights: str | None = Param(None, description="e.g. 1,0.5"),
        system: str = Param("uhd", pattern="^(uhd|bm25)$"),
        max_df: str = Param("auto", description="stop dimensions: auto, none, or a fraction in (0, 1]"),
        cascade: str = Param("auto", description="two-pass search: auto, none (exact), or FIRST_MAX_DF:DEPTH[:probe]"),
        length_norm: str = Param("auto", description="binary counts / active dims ** ALPHA: auto, none, or ALPHA"),
        idf: bool = Param(False, description="weight query dims by IDF"),
    ) -> dict:
        """One query: the top-k documents with title and snippet (system=bm25: the BM25 ranking)."""
        limits.check_queries([q], k, settings)
        queries = [Query("q1", q)]
        if system == "bm25":
            run = await blocking(service.bm25_search, queries, k)
            return respond("bm25", k, queries, run, service.snapshot)
        options = _options(dict(scoring=scoring, query_k=query_k, bucket_weights=bucket_weights, max_df=max_df,
                                idf=idf, cascade=cascade, length_norm=length_norm), settings.max_k)
        limits.check_options(options.query_k, options.bucket_weights, settings)
        run, snapshot = await search(queries, k, options)
        return respond("uhd", k, queries, run, snapshot)

    @app.post("/search", response_model=SearchResponse)
    async def search_post(body: SearchRequest) -> dict:
        """A batch of queries; with `candidates`, re-rank those doc_ids instead of searching the whole index."""
        limits.check_queries([q.text for q in body.queries], body.k, settings, "queries")
        limits.check_candidates(body.candidates, settings)
        ids = [q.query_id for q in body.queries]
        if len(set(ids)) != len(ids):
            raise ServiceError(422, "queries: a query_id appears twice")
        queries = [Query(q.query_id, q.text) for q in body.queries]
        options = _options(body.model_dump(include=set(SEARCH_OPTIONS)), settings.max_k)
        limits.check_options(options.query_k, options.bucket_weights, settings)
        run, snapshot = await search(queries, body.k, options, body.candidates)
        return respond("uhd", body.k, queries, run, snapshot)

    @app.get("/documents/{doc_id}", response_model=DocumentOut)
    async def document(doc_id: str) -> dict:
        found = service.document(doc_id)
        if found is None:
            raise ServiceError(404, f"doc_id {doc_id!r} is not in the index")
        return {"doc_id": found.doc_id, "title": found.title, "text": found.text}

    @app.get("/explain")
    async def explain(q: str = Param(..., min_length=1), doc_id: str = Param(..., min_length=1),
                      scoring: str | None = Param(None, pattern="^(binary|weighted)$"),
                      query_k: int | None = Param(None, ge=0), bucket_weights: str | None = None,
                      max_df: str = Param("auto"), length_norm: str = Param("auto"),
                      idf: bool = Param(False, description="weight query dims by IDF"),
                      cascade: str = Param("auto", description="as /search: which dims the first pass reads")) -> dict:
        """The latent dimensions query and document share, per bucket: contribution, tokens, typical tokens.

        Takes /search's options; the score is the one /search gives the document with them (a cascade's hits are
        scored exactly), and with a cascade each dim says whether its first pass reads it."""
        limits.check_queries([q], 1, settings)
        options = _options(dict(scoring=scoring, query_k=query_k, bucket_weights=bucket_weights, max_df=max_df,
                                idf=idf, cascade=cascade, length_norm=length_norm), settings.max_k)
        limits.check_options(options.query_k, options.bucket_weights, settings)
        explained = await blocking(service.explain, q, doc_id, options)
        limits.check_finite(explained["score"], "the score")
        return explained

    @app.post("/documents")
    async def add_documents(body: AddRequest, _: None = may_write, commit: bool = Param(False, description=
                            "commit in the same call: searches see the documents when it answers")) -> dict:
        """Encode and add documents; pending (not searched, lost at shutdown) until POST /commit or ?commit=true."""
        limits.check_documents(body.documents, settings)
        documents = [Document(d.doc_id, d.text, d.title) for d in body.documents]
        pending = await blocking(service.add, documents, body.replace, commit)
        return {"added": len(documents), **_write_state(service, pending, commit)}

    @app.delete("/documents/{doc_id}")
    async def delete_document(doc_id: str, _: None = may_write, commit: bool = Param(False, description=
                              "commit in the same call: searches stop returning it when it answers")) -> dict:
        """Delete a document; searches still return it until POST /commit or ?commit=true."""
        pending = await blocking(service.delete, doc_id, commit)
        return {"deleted": doc_id, **_write_state(service, pending, commit)}

    @app.post("/commit")
    async def commit(_: None = may_write) -> dict:
        """Make added and deleted documents durable and visible to searches, all at once."""
        done = await blocking(service.commit)
        metrics.documents.set(done["n_documents"])
        return done

    @app.get("/health")
    async def health() -> dict:
        snapshot = service.snapshot
        return {"status": "ok", "n_documents": snapshot.index.n_documents, "generation": snapshot.generation,
                "variant": snapshot.index.variant, "n_buckets": snapshot.index.n_buckets,
                "bm25": service.bm25 is not None, "document_texts": bool(snapshot.texts),
                "writes": service.write_refusal is None and settings.api_key is not None,
                "typical_tokens": service.typical is not None and service.typical.ready,
                "n_segments": getattr(snapshot.index, "n_segments", None),
                "merging": service.merging,
                "pending_changes": service.pending_changes}

    @app.get("/ready")
    async def is_ready() -> JSONResponse:
        if not ready.is_set():
            return JSONResponse({"error": "warming up"}, status_code=503)
        return JSONResponse({"ready": True})

    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        snapshot = service.snapshot
        metrics.documents.set(snapshot.index.n_documents)
        metrics.generation.set(-1 if snapshot.generation is None else snapshot.generation)
        metrics.segments.set(getattr(snapshot.index, "n_segments", 1))
        metrics.pending.set(service.pending_changes)
        cache = service.document_winners
        metrics.explain_cache.labels("hit").set(cache.hits)
        metrics.explain_cache.labels("miss").set(cache.misses)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _write_state(service: SearchService, pending: int, committed: bool) -> dict:
    """What a write's answer says about visibility: committed, or pending until POST /commit."""
    state = {"committed": committed, "pending_changes": pending, "generation": service.snapshot.generation}
    if not committed:
        state["note"] = ("pending: searches do not see this change until POST /commit (a graceful shutdown commits "
                         "it, a crash loses it)")
    return state


def _commit_pending(service: SearchService, commit: bool) -> None:
    """At shutdown: changes acknowledged but not committed are committed (or, if so configured, dropped)."""
    if not service.pending_changes:
        return
    if not commit:
        logger.warning("shutting down: %d pending changes dropped (--discard-pending)", service.pending_changes)
        return
    n = service.pending_changes
    done = service.commit()
    logger.info("shutting down: %d pending changes committed (generation %s)", n, done["generation"])


def _log_failure(task: asyncio.Future) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("warm-up failed", exc_info=task.exception())


def _options(values: dict, max_k: int) -> SearchOptions:
    """The request's search options, parsed as the CLI's (a bad value is a 422 naming the option)."""
    from uhdsearch.search.cascade import Cascade

    options = SearchOptions.parse(values)
    cascade = options.cascade
    if isinstance(cascade, Cascade) and cascade.depth > max_k:
        raise ServiceError(422, f"cascade={values['cascade']!r}: the depth may be at most max_k={max_k}")
    return options


def _snippet(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut + " …"


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return _error(exc.status, str(exc), getattr(exc, "headers", None))

    @app.exception_handler(UhdError)
    async def user_error(_: Request, exc: UhdError) -> JSONResponse:
        return _error(422, " ".join(str(exc).split()))

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return _error(400, "the body is not valid JSON")
        parts = [f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg')}" for e in errors[:5]]
        return _error(422, "; ".join(parts))

    @app.exception_handler(Exception)
    async def bug(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error")
        return _error(500, f"internal error ({type(exc).__name__}); see the server log")


class _Measure:
    """Request count and latency per route template (not per URL, which would be unbounded)."""

    def __init__(self, app, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500

        async def sending(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", "unmatched")
            self.metrics.requests.labels(endpoint, scope["method"], str(status)).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - start)
