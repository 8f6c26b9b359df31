"""Admission control: at most `workers` requests compute at once, a bounded queue with a deadline on the wait,
and a deadline on reading the body.

The deadline is on the wait only. Work that has started runs to completion in its thread and holds its slot
until then, even if its client has gone (a cancelled await would free the slot while the thread still computes,
and a write answered 503 could still commit). Beyond `max_queue` waiting requests, a request gets 503 with
Retry-After at once: the queue never grows past what the workers clear within the deadline.
"""
from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

from uhdsearch.serving.service import ServiceError

T = TypeVar("T")


class Busy(ServiceError):
    """503 with Retry-After: the queue is full, or the wait for a worker passed its deadline."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(503, message)
        self.headers = {"Retry-After": str(max(1, math.ceil(retry_after_s)))}


class Admission:
    """Runs blocking calls on `workers` threads, admitting at most `max_queue` more to wait `queue_timeout_s`."""

    def __init__(self, workers: int, max_queue: int, queue_timeout_s: float) -> None:
        self.workers = workers
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        self.waiting = 0  # requests waiting for a slot now
        self.admitted = 0  # requests waiting or computing
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="uhdsearch-compute")
        self._slots: asyncio.Semaphore | None = None  # made in the event loop that uses it

    async def run(self, fn: Callable[..., T], *args, queued: bool = True) -> T:
        """fn(*args) on a worker thread once a slot is free; Busy when none frees within the deadline or the
        queue is full. queued=False: the server's own work (warm-up), which waits as long as it takes."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        slots = self._slots
        if queued and self.admitted >= self.workers + self.max_queue:  # counted here: no await since the check
            raise Busy(f"the server is busy: {self.admitted - self.workers} requests wait for its "
                       f"{self.workers} workers", 1)
        self.admitted += 1
        self.waiting += 1
        try:
            await asyncio.wait_for(slots.acquire(), self.queue_timeout_s if queued else None)
        except BaseException as exc:
            self.admitted -= 1
            if isinstance(exc, asyncio.TimeoutError):
                raise Busy(f"no worker was free within {self.queue_timeout_s:g} s", 1) from None
            raise
        finally:
            self.waiting -= 1

        def done(_) -> None:  # when the work ends, not when the await does
            self.admitted -= 1
            slots.release()

        try:
            future = asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except BaseException:
            done(None)
            raise
        future.add_done_callback(done)
        return await asyncio.shield(future)

    def close(self) -> None:
        """Wait for the work that has started (a write finishes before the writer is closed)."""
        self._executor.shutdown(wait=True)


class BodyLimit:
    """ASGI middleware: 413 for a body over `max_bytes` (declared or streamed), 408 for one that takes longer
    than `timeout_s` to arrive (a slow client must not hold a connection and its buffer for ever)."""

    def __init__(self, app, max_bytes: int, timeout_s: float, refuse) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.refuse = refuse  # refuse(status, message) -> an ASGI response

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._too_large(scope, receive, send)
        if scope["method"] in ("GET", "HEAD", "DELETE", "OPTIONS") and declared is None:
            return await self.app(scope, receive, send)
        try:
            body = await asyncio.wait_for(self._read(receive), self.timeout_s)
        except asyncio.TimeoutError:
            return await self.refuse(408, f"the request body took longer than {self.timeout_s:g} s to arrive")(
                scope, receive, send)
        if body is None:
            return await self._too_large(scope, receive, send)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read(self, receive) -> bytes | None:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                return None
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        return b"".join(chunks)

    async def _too_large(self, scope, receive, send) -> None:
        await self.refuse(413, f"the request body is over {self.max_bytes} bytes")(scope, receive, send)
