"""Batched query encoding: the queries of concurrent requests, gathered for a few milliseconds, encoded in one call.

One query alone costs the backbone's fixed per-call overhead; a batch of them costs little more than its longest
member. `QueryBatcher.encode` waits at most `max_wait_s` for other requests (or until `max_batch` texts are in),
then encodes the batch on one worker (admission.py: it counts as one computing thread). Each request gets its own
rows; when the batch fails, each request is encoded alone, so that an error belongs to the request that caused it.

The searches then run as before: `PreEncoded`, the encoder the service's Searchers call, answers their
`encode(texts, "query")` with the rows given for the calling thread, and encodes anything else itself.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import contextmanager

from uhdsearch.serving.admission import Busy
from uhdsearch.sparse import SparseEncoding

Rows = dict[str, SparseEncoding]  # text -> its one-row raw encoding


class PreEncoded:
    """The query encoder with given rows for the calling thread; reports the time of each real encoding."""

    def __init__(self, encoder, report: Callable[[float], None] = lambda seconds: None) -> None:
        self._encoder = encoder
        self._report = report
        self._local = threading.local()

    def __getattr__(self, name):
        return getattr(self._encoder, name)

    def wraps(self, encoder) -> bool:
        """Whether `encoder` is the one this encodes with."""
        return self._encoder is encoder

    @contextmanager
    def given(self, rows: Rows):
        """Within the block, this thread's query encodings come from `rows` where they hold every text."""
        self._local.rows = rows
        try:
            yield
        finally:
            self._local.rows = None

    def encode(self, texts: Sequence[str], kind: str = "query", *args, **kwargs) -> SparseEncoding:
        rows = getattr(self._local, "rows", None)
        texts = list(texts)
        if rows and kind == "query" and not args and not kwargs and texts and all(t in rows for t in texts):
            return SparseEncoding.concat([rows[t] for t in texts])
        start = time.perf_counter()
        try:
            return self._encoder.encode(texts, kind, *args, **kwargs)
        finally:
            self._report(time.perf_counter() - start)


class QueryBatcher:
    """Gathers query texts from concurrent requests and encodes them together (raw: no query_k, as the
    encoder's `encode(texts, "query")`); `run(fn, *args)` runs blocking work on a worker (admission.py).

    A batch stays open for `max_wait_s`, then waits for a worker, still taking texts until the worker starts
    it or it holds `max_batch` texts: under load, batches grow while the workers are busy.
    """

    def __init__(self, encoder: PreEncoded, run: Callable, max_batch: int, max_wait_s: float) -> None:
        self.encoder = encoder
        self._run = run
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self._open: _Batch | None = None
        self._tasks: set[asyncio.Task] = set()  # referenced until done
        self.sizes: deque[int] = deque(maxlen=1024)  # texts per encoding call, the latest (tests)

    async def encode(self, texts: Sequence[str]) -> Rows:
        """Each distinct non-empty text's raw encoding, encoded together with other requests' texts."""
        texts = list(dict.fromkeys(t for t in texts if t.strip()))
        if not texts:
            return {}
        future = asyncio.get_running_loop().create_future()
        batch = self._open
        if batch is None or not batch.join(texts, future, self.max_batch):
            batch = self._open = _Batch()
            batch.join(texts, future, self.max_batch)
            self._start_later(batch)
        if batch.n_texts >= self.max_batch:
            self._start(batch)
        return await future

    def _start_later(self, batch: _Batch) -> None:
        if self.max_wait_s <= 0:
            self._start(batch)
        else:
            batch.timer = asyncio.get_running_loop().call_later(self.max_wait_s, self._start, batch)

    def _start(self, batch: _Batch) -> None:
        if self._open is batch and batch.n_texts >= self.max_batch:
            self._open = None  # full: the next request opens the next batch
        if batch.queued:
            return
        batch.queued = True
        if batch.timer is not None:
            batch.timer.cancel()
        task = asyncio.ensure_future(self._encode(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _encode(self, batch: _Batch) -> None:
        try:
            rows = await self._run(self._encode_batch, batch)
        except Exception as exc:
            requests = batch.close()
            if self._open is batch:
                self._open = None
            if len(requests) == 1 or isinstance(exc, Busy):  # nobody's fault but the load's: 503 for all
                for _, future in requests:
                    _settle(future, exception=exc)
                return
            for texts, future in requests:  # alone, so that an error is its own request's
                try:
                    _settle(future, await self._run(self._encode_rows, texts))
                except Exception as own:
                    _settle(future, exception=own)
            return
        for texts, future in batch.close():
            _settle(future, {t: rows[t] for t in texts})

    def _encode_batch(self, batch: _Batch) -> Rows:
        """On the worker: the batch takes no more texts from here on."""
        return self._encode_rows(list(dict.fromkeys(t for texts, _ in batch.close() for t in texts)))

    def _encode_rows(self, texts: list[str]) -> Rows:
        self.sizes.append(len(texts))
        encoded = self.encoder.encode(texts, "query")
        return {t: encoded[i:i + 1] for i, t in enumerate(texts)}


class _Batch:
    """Requests (texts, future) joining until the worker closes it; joined from the event loop, closed from the
    worker thread, hence the lock."""

    def __init__(self) -> None:
        self.requests: list[tuple[list[str], asyncio.Future]] = []
        self.n_texts = 0
        self.closed = self.queued = False
        self.timer: asyncio.TimerHandle | None = None
        self._lock = threading.Lock()

    def join(self, texts: list[str], future: asyncio.Future, max_batch: int) -> bool:
        with self._lock:
            if self.closed or (self.requests and self.n_texts + len(texts) > max_batch):
                return False
            self.requests.append((texts, future))
            self.n_texts += len(texts)
            return True

    def close(self) -> list[tuple[list[str], asyncio.Future]]:
        with self._lock:
            self.closed = True
            return list(self.requests)


def _settle(future: asyncio.Future, result=None, exception: BaseException | None = None) -> None:
    """From the event loop only."""
    if future.done():  # its request was cancelled (client gone)
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)
