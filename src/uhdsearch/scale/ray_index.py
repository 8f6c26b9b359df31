"""Encode a corpus on Ray Data (an actor pool, the model loaded once per actor) into a segmented index.

The driver owns the index: workers send encoded rows back through Ray's object store, the driver adds them in
corpus order and commits a segment every `segment_size` documents, so doc numbers follow the corpus exactly as in
`InvertedIndex.build`. Everything is written into a fresh directory that replaces `out` only at the end
(`io.atomic_directory`): a killed driver leaves the previous index as it was.
"""
from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from uhdsearch.errors import UsageError
from uhdsearch.index import format as fmt
from uhdsearch.index.live.segments import SegmentedIndex
from uhdsearch.io import atomic_directory
from uhdsearch.scale.cluster import connect, positive
from uhdsearch.sparse import SparseEncoding
from uhdsearch.types import Document

logger = logging.getLogger(__name__)


def build_on_ray(
    model_dir: str | os.PathLike,
    corpus: Mapping[str, Document] | Sequence[Document],
    out: str | os.PathLike,
    variant: fmt.Variant = "binary",
    address: str | None = None,
    n_workers: int = 2,
    batch_size: int = 32,
    rows_per_task: int = 256,
    segment_size: int = 100_000,
    merge: bool = True,
    max_retries: int | None = None,
    gpus_per_worker: float = 0.0,
    overwrite: bool = False,
    show_progress: bool = True,
) -> SegmentedIndex:
    """Encode `corpus` on `n_workers` Ray actors and write a segmented index at `out`.

    Args:
        model_dir: a saved UHDEncoder, readable at the same path on every node (a shared or copied directory).
        address: the Ray cluster (see `scale.cluster.connect`); None: this process's cluster, or a local one.
        n_workers: encoding actors; each loads the model once and uses cluster CPUs / n_workers torch threads.
        batch_size: texts per forward pass (as `UHDEncoder.encode_document`'s).
        rows_per_task: documents per Ray task; the unit that is retried when a worker dies.
        segment_size: documents per committed segment while the build runs.
        merge: merge the segments into one at the end (postings then equal a single-process build's bytes).
        max_retries: restarts of a dead actor and retries of its unfinished task; None: Ray Data's own fault
            tolerance (dead actors restarted and their tasks retried without limit). A number goes through
            map_batches' `ray_remote_args`, which Ray deprecates (gone in Ray 2.64).
        gpus_per_worker: GPUs Ray reserves per actor (0: CPU encoding); above 0 each actor encodes on the GPU Ray
            assigned it (`ray.get_gpu_ids()`, exposed to it as CUDA_VISIBLE_DEVICES), so the cluster needs at
            least n_workers * gpus_per_worker GPUs and torch with CUDA on its GPU nodes.
    Returns:
        The index, open read-only.
    Raises:
        FileExistsError: `out` exists and overwrite is False (checked before any work).
        UsageError: bad variant or counts, or GPUs asked of a cluster with too few (naming gpus_per_worker);
            DataFormatError: duplicate doc ids.
    """
    if variant not in fmt.VARIANTS:
        raise UsageError(f"variant={variant!r}; choose one of {fmt.VARIANTS}")
    for name, value in (("n_workers", n_workers), ("batch_size", batch_size), ("rows_per_task", rows_per_task),
                        ("segment_size", segment_size)):
        positive(value, name)
    if max_retries is not None and (isinstance(max_retries, bool) or not isinstance(max_retries, int)
                                    or max_retries < 0):
        raise UsageError(f"max_retries={max_retries!r} must be None or an integer >= 0")
    if isinstance(gpus_per_worker, bool) or not isinstance(gpus_per_worker, (int, float)) or not gpus_per_worker >= 0:
        raise UsageError(f"gpus_per_worker={gpus_per_worker!r} must be a number >= 0")
    documents = list(corpus.values()) if isinstance(corpus, Mapping) else list(corpus)
    if not documents:
        raise UsageError("the corpus has no documents")
    if Path(out).exists() and not overwrite:  # fail before the slow encoding
        raise FileExistsError(f"{out} already exists; pass overwrite=True (CLI: --overwrite) to replace it")
    model_dir = Path(model_dir).resolve()
    config, digest = _model_identity(model_dir)
    ray = connect(address)
    resources = ray.cluster_resources()
    _check_gpus(resources.get("GPU", 0.0), gpus_per_worker, n_workers)
    threads = max(1, int(resources.get("CPU", 1)) // n_workers)
    # Fault tolerance: Ray Data restarts dead actors and retries their tasks by default; only a chosen limit
    # needs the deprecated remote args.
    retries = {} if max_retries is None else {"max_restarts": max_retries, "max_task_retries": max_retries}
    dataset = ray.data.from_items([{"position": i, "text": d.full_text} for i, d in enumerate(documents)],
                                  override_num_blocks=-(-len(documents) // rows_per_task))
    encoded = dataset.map_batches(
        _EncodeActor, batch_size=rows_per_task, batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=n_workers),
        fn_constructor_kwargs={"model_dir": str(model_dir), "batch_size": batch_size, "threads": threads,
                               "use_gpu": gpus_per_worker > 0},
        num_cpus=threads, num_gpus=gpus_per_worker or None, **retries,
    )
    doc_ids = [d.doc_id for d in documents]
    with atomic_directory(out, overwrite=overwrite) as tmp:
        index = SegmentedIndex.create(tmp, variant, config["dim"], len(config["bucket_layers_absolute"]), digest)
        try:
            bar = tqdm(total=len(documents), desc="encode documents (ray)", unit="doc", disable=not show_progress)
            done = 0
            for encoding in _in_corpus_order(encoded.iter_rows(), segment_size, len(documents), config["dim"]):
                index.add(encoding, doc_ids[done:done + encoding.n])
                index.commit()
                done += encoding.n
                bar.update(encoding.n)
            bar.close()
            if merge and index.n_segments > 1:
                index.merge(1)
        finally:
            index.close()
    return SegmentedIndex.open(out)


class _EncodeActor:
    """One Ray actor: loads the encoder once, then encodes the batches Ray Data hands it."""

    def __init__(self, model_dir: str, batch_size: int, threads: int, use_gpu: bool = False) -> None:
        import ray
        import torch

        from uhdsearch.encoder.model import UHDEncoder

        torch.set_num_threads(threads)  # actors share the node's cores; torch would otherwise take all of them
        device = assigned_device(ray.get_gpu_ids() if use_gpu else [])
        self.model = UHDEncoder.from_pretrained(model_dir).to_device(device, "gpus_per_worker")
        logger.info("encoding actor on %s", device)
        self.batch_size = batch_size

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        encoding = self.model.encode_document(list(batch["text"]), batch_size=self.batch_size, show_progress=False)
        positions = np.asarray(batch["position"], np.int64)
        return {"position": positions[:1], "payload": np.array([_pack(positions, encoding)], dtype=object)}


def assigned_device(gpu_ids: Sequence[int | str]) -> str:
    """The torch device of an actor Ray gave `gpu_ids` (`ray.get_gpu_ids()`): Ray sets CUDA_VISIBLE_DEVICES to
    exactly those GPUs, so the first one the actor sees is "cuda:0"; no GPU ids: "cpu".

    Examples:
        >>> assigned_device([]), assigned_device([3])
        ('cpu', 'cuda:0')
    """
    return "cuda:0" if len(gpu_ids) else "cpu"


def _check_gpus(cluster_gpus: float, gpus_per_worker: float, n_workers: int) -> None:
    """Refuse GPU actors the cluster cannot hold now (Ray would wait for them without end).

    Examples:
        >>> _check_gpus(0.0, 1, 2)
        Traceback (most recent call last):
        ...
        uhdsearch.errors.UsageError: gpus_per_worker=1 (--gpus-per-worker) x 2 workers needs 2 GPUs; the cluster has 0
    """
    needed = gpus_per_worker * n_workers
    if needed > 0 and cluster_gpus + 1e-9 < needed:
        raise UsageError(f"gpus_per_worker={gpus_per_worker:g} (--gpus-per-worker) x {n_workers} workers needs "
                         f"{needed:g} GPUs; the cluster has {cluster_gpus:g}")


def _pack(positions: np.ndarray, encoding: SparseEncoding) -> bytes:
    """Rows of one task as .npz bytes (numeric arrays only: read back without unpickling)."""
    arrays = {"positions": positions}
    for b, m in enumerate(encoding.buckets):
        arrays.update({f"indptr_{b}": m.indptr, f"indices_{b}": m.indices, f"data_{b}": m.data})
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _unpack(payload: bytes, dim: int) -> tuple[np.ndarray, SparseEncoding]:
    with np.load(io.BytesIO(payload), allow_pickle=False) as z:
        positions = z["positions"]
        n_buckets = sum(1 for name in z.files if name.startswith("indptr_"))
        buckets = [sp.csr_matrix((z[f"data_{b}"], z[f"indices_{b}"], z[f"indptr_{b}"]), shape=(len(positions), dim))
                   for b in range(n_buckets)]
    return positions, SparseEncoding(buckets)


def _in_corpus_order(
    rows: Iterator[dict[str, Any]], segment_size: int, n_documents: int, dim: int
) -> Iterator[SparseEncoding]:
    """Encoded tasks (in any order) -> runs of consecutive corpus rows, `segment_size` each (the last shorter)."""
    waiting: dict[int, SparseEncoding] = {}  # runs of consecutive rows by first position
    ready: list[SparseEncoding] = []
    n_ready = start = 0
    for row in rows:
        positions, encoding = _unpack(row["payload"], dim)
        breaks = np.flatnonzero(np.diff(positions) != 1) + 1  # a batch may join blocks from apart in the corpus
        for run in np.split(np.arange(len(positions)), breaks):
            waiting[int(positions[run[0]])] = encoding[run]
        while start in waiting:
            encoding = waiting.pop(start)
            ready.append(encoding)
            n_ready += encoding.n
            start += encoding.n
            while n_ready >= segment_size:
                whole = SparseEncoding.concat(ready)
                yield whole[:segment_size]
                rest = whole[segment_size:]
                ready, n_ready = ([rest] if rest.n else []), rest.n
    if start != n_documents or waiting:
        raise RuntimeError(f"Ray returned {start} of {n_documents} documents in order; {len(waiting)} tasks stranded")
    if n_ready:
        yield SparseEncoding.concat(ready)


def _model_identity(model_dir: Path) -> tuple[dict[str, Any], str]:
    """(uhd_config.json, digest) read on the driver without loading the weights."""
    from uhdsearch.encoder.model import CONFIG_FILE
    from uhdsearch.errors import ModelFormatError
    from uhdsearch.io import read_json

    if not (model_dir / CONFIG_FILE).is_file():
        raise ModelFormatError(f"not a uhdsearch model: {model_dir} has no {CONFIG_FILE}")
    meta = read_json(model_dir / CONFIG_FILE)
    return meta, meta.get("digest")
