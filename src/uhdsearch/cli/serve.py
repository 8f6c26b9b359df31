"""`uhdsearch serve`: the HTTP search service (extra: serve) over a static or segmented index."""
from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from uhdsearch.errors import UsageError

logger = logging.getLogger(__name__)


def serve(
    index_dir: Path = typer.Argument(..., help="Index directory: static (uhdsearch index) or segmented."),
    model: Path = typer.Option(..., "--model", help="The model directory that built the index."),
    data: Optional[Path] = typer.Option(None, "--data", help="BEIR directory or corpus.jsonl with the documents' "
                                        "titles and texts (hits, /documents and the document side of /explain)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on; on loopback, requests must name "
                             "a loopback Host."),
    port: int = typer.Option(8000, "--port"),
    api_key_file: Optional[Path] = typer.Option(None, "--api-key-file", help="A file holding the token that "
                                                "POST/DELETE /documents and POST /commit need. Else "
                                                "UHDSEARCH_API_KEY, else a new token written to "
                                                "INDEX_DIR/serve-api-key (mode 0600) and printed once."),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="The token on the command line (warns: "
                                          "visible in ps); prefer --api-key-file or UHDSEARCH_API_KEY."),
    bm25: bool = typer.Option(False, "--bm25", help="Build a BM25 index of --data for the page's side-by-side "
                              "comparison (/search?system=bm25)."),
    discard_pending: bool = typer.Option(False, "--discard-pending", help="At shutdown, drop the added and "
                                         "deleted documents not yet committed (default: commit them)."),
    max_segments: int = typer.Option(10, "--max-segments", help="When a commit leaves more segments than this, "
                                     "merge them in the background (searches and writes go on; the merge is "
                                     "published by a commit of its own, or with the next one while changes are "
                                     "pending). 0: never merge. Applies to a writable segmented index."),
    read_only: bool = typer.Option(False, "--read-only", help="No writes: never take the segmented index's write "
                                   "lock, no API key."),
    typical_sample: int = typer.Option(300, "--typical-sample", help="Documents of --data sampled (in the "
                                       "background) for each dimension's typical tokens; 0: off."),
    max_k: int = typer.Option(1000, "--max-k"),
    max_batch: int = typer.Option(64, "--max-batch", help="Queries per POST /search."),
    max_query_chars: int = typer.Option(2000, "--max-query-chars"),
    max_body_bytes: int = typer.Option(1_048_576, "--max-body-bytes"),
    queue_timeout: float = typer.Option(10.0, "--queue-timeout", help="Seconds a request may wait for a worker "
                                        "before it gets 503 with Retry-After; work that has started always "
                                        "runs to completion."),
    max_queue: int = typer.Option(64, "--max-queue", help="Requests waiting for a worker; beyond, 503 with "
                                  "Retry-After at once."),
    encode_batch: int = typer.Option(32, "--encode-batch", help="Queries of concurrent requests encoded in one "
                                     "call, at most; 1: each request alone."),
    encode_wait_ms: float = typer.Option(3.0, "--encode-wait-ms", help="How long a batch of queries waits for "
                                         "more before it queues for a worker."),
    explain_cache: int = typer.Option(512, "--explain-cache", help="Documents whose tokens /explain keeps "
                                      "encoded (~80 KB each), most recently asked first; 0: none."),
    workers: int = typer.Option(0, "--workers", help="Requests encoding or searching at once (the rest queue); "
                                "0: one per CPU core, each with one torch thread."),
    onnx: bool = typer.Option(False, "--onnx", help="Encode queries with the backbone in ONNX Runtime (~2x "
                              "faster on a CPU; the same float32 graph, as `uhdsearch search --onnx`)."),
    lookup: bool = typer.Option(False, "--lookup", help="Encode queries by table lookup (MODEL/query_lookup.npz, "
                                "built by `uhdsearch lookup`): ~0.3 ms a query, lower quality; /explain shows the "
                                "table's dims; documents added are encoded by the full model."),
    student: Optional[Path] = typer.Option(None, "--student", help="Encode queries with a distilled query student "
                                           "(a .safetensors file, as `uhdsearch search --student`); documents "
                                           "added are encoded by the full model; /explain shows the student's "
                                           "dims with the full model's token lists."),
    shards: int = typer.Option(0, "--shards", help="Split the index (static, or a segmented one's live "
                               "documents) into N shards searched in parallel on Ray actors (extra: ray); "
                               "read-only. 0: one index in this process."),
    replicas: int = typer.Option(1, "--replicas", help="With --shards: actors per shard; requests spread over "
                                 "them and a dead one's go to another."),
    ray_address: Optional[str] = typer.Option(None, "--ray", help="With --shards: a Ray cluster address, or "
                                              "'local' (the default) for a local cluster."),
    shard_dir: Optional[Path] = typer.Option(None, "--shard-dir", help="With --shards: where the shards are "
                                             "written (reused when they match the index); default: a temp dir."),
) -> None:
    """Serve an index over HTTP: /search, /explain, /documents, the page at /, /metrics (extra: serve)."""
    from uhdsearch._optional import require

    require("fastapi", "serve")
    uvicorn = require("uvicorn", "serve")
    from uhdsearch.serving.app import create_app
    from uhdsearch.serving.settings import ServeSettings, is_loopback

    if not 0 < port < 65536:
        raise UsageError(f"--port {port} must be between 1 and 65535")
    loopback = is_loopback(host)
    if not loopback:
        logger.warning("listening on %s: reachable beyond this machine", host)
    if workers < 0:
        raise UsageError(f"--workers {workers} must be 0 (one per core) or a positive number")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = workers or cores
    torch_threads = max(1, cores // workers)  # workers x threads fits the cores
    settings = ServeSettings(max_query_chars=max_query_chars, max_k=max_k, max_batch=max_batch,
                             max_body_bytes=max_body_bytes, queue_timeout_s=queue_timeout, max_queue=max_queue,
                             loopback=loopback, workers=workers, encode_batch=encode_batch,
                             encode_wait_s=encode_wait_ms / 1000, explain_cache=explain_cache,
                             commit_at_shutdown=not discard_pending)
    if max_segments < 0:
        raise UsageError(f"--max-segments {max_segments} must be 0 (never merge) or a positive number of segments")
    if shards < 0:
        raise UsageError(f"--shards {shards} must be 0 (no sharding) or a positive number of shards")
    if (ray_address or shard_dir or replicas != 1) and not shards:
        raise UsageError("--ray, --shard-dir and --replicas apply to --shards N")
    if replicas < 1:
        raise UsageError(f"--replicas {replicas} must be a positive number of actors per shard")
    if lookup and (onnx or shards):
        raise UsageError("--lookup encodes queries by its table: --onnx (the backbone's runtime) and --shards "
                         "(whose actors encode with the full model) do not combine with it")
    if student is not None and (lookup or shards):
        raise UsageError("--student does not combine with --lookup (another query encoder) or --shards (whose "
                         "actors encode with the full model)")
    from uhdsearch.io.clib import return_large_blocks

    return_large_blocks()  # resident memory that stays flat under load (io/clib.py says why)
    sharding = (shards, None if ray_address in (None, "local") else ray_address, shard_dir, replicas) \
        if shards else None
    service = open_service(index_dir, model, data, bm25, not read_only, typical_sample, sharding,
                           onnx_threads=torch_threads if onnx else None, lookup=lookup, student=student,
                           max_segments=max_segments or None)
    if service.write_refusal is None:  # writable: never without a key
        try:
            settings = replace(settings, api_key=_write_key(index_dir, api_key, api_key_file))
        except BaseException:
            service.close()  # the write lock
            raise
    import torch

    torch.set_num_threads(torch_threads)  # only now: option errors must leave the calling process as it was
    app = create_app(service, settings)
    import gc

    # What is loaded by now (ids, texts, index arrays) lives as long as the server: the garbage collector's full
    # passes under load need not walk it again and again, and each such pass holds every thread.
    gc.freeze()
    # At SIGTERM, connections get this long to finish; work already started ends in any case (create_app).
    uvicorn.run(app, host=host, port=port, timeout_graceful_shutdown=30, log_level="info")


def _write_key(index_dir: Path, api_key: Optional[str], api_key_file: Optional[Path]):
    from uhdsearch.serving.keys import resolve_api_key

    key, written = resolve_api_key(index_dir, api_key, api_key_file)
    if written is not None:  # printed once, never logged
        print(f"writes need this API key (also in {written}, mode 0600): {key.reveal()}", flush=True)
    return key


def open_service(index_dir: Path, model: Path, data: Optional[Path], bm25: bool, writable: bool,
                 typical_sample: int, sharding: tuple[int, Optional[str], Optional[Path], int] | None = None,
                 onnx_threads: int | None = None, lookup: bool = False, student: Optional[Path] = None,
                 max_segments: int | None = None):
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.encoder.query import open_query_encoder
    from uhdsearch.evaluation.datasets import load_corpus
    from uhdsearch.serving.service import SearchService

    if bm25 and data is None:
        raise UsageError("--bm25 needs --data (the texts to index)")
    if sharding is not None and (lookup or student is not None):
        raise UsageError("--lookup and --student do not combine with --shards (whose actors encode with the full "
                         "model)")
    encoder = UHDEncoder.from_pretrained(model)  # documents, /explain's tokens, and queries unless told otherwise
    kind = "table" if lookup else "student" if student is not None else "onnx" if onnx_threads else "full"
    # read before the corpus, BM25 and the index (a writable one is locked)
    query_encoder = open_query_encoder(model, kind, model=encoder, student=student,
                                       onnx=student is not None and onnx_threads is not None, threads=onnx_threads)
    if query_encoder is encoder:  # the full model (in ONNX Runtime with --onnx) encodes queries too
        query_encoder = None
    corpus = None
    if data is not None:
        corpus = load_corpus(data / "corpus.jsonl" if data.is_dir() else data)
    retriever = None
    if bm25:
        from uhdsearch.baselines.bm25 import BM25Retriever

        retriever = BM25Retriever.build(corpus, show_progress=False)
    logger.info("serving %s with %s", index_dir, model)
    if sharding is not None:
        from uhdsearch.scale.sharded_service import open_sharded_service

        n_shards, address, shard_dir, replicas = sharding
        return open_sharded_service(encoder, index_dir, n_shards, address, shard_dir, corpus, retriever,
                                    typical_sample if corpus else 0, replicas=replicas)
    service = SearchService.open(encoder, index_dir, corpus, writable, retriever, typical_sample if corpus else 0,
                                 max_segments=max_segments)
    service.query_encoder = query_encoder
    return service
