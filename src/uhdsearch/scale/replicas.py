"""Replicas of shard actors: R actors per shard, calls spread over them, a dead replica's call retried on another.

Ray restarts a crashed actor by itself, but while it restarts its calls wait; with replicas a call that fails
because its actor died goes at once to the shard's next live replica, and the dead one leaves the rotation.
"""
from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

logger = logging.getLogger(__name__)


class ShardUnavailableError(RuntimeError):
    """Every replica of a shard has died: no copy of its documents is left to search."""


class ReplicaGroups:
    """`replicas` Ray actors per shard, made by `start(shard_number)`; `call` runs one method on every shard.

    Args:
        ray: the connected `ray` module.
        n_shards, replicas: shards, and actors per shard (each loads its own copy of the shard).
        start: makes one actor for a shard number.
    """

    def __init__(self, ray, n_shards: int, replicas: int, start: Callable[[int], Any]) -> None:
        self._ray = ray
        self._groups = [[start(i) for _ in range(replicas)] for i in range(n_shards)]
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self.closed = False

    @property
    def n_shards(self) -> int:
        return len(self._groups)

    def live(self, shard: int) -> list:
        """The shard's replicas still in the rotation."""
        with self._lock:
            return list(self._groups[shard])

    def everyone(self) -> list:
        return [actor for shard in range(self.n_shards) for actor in self.live(shard)]

    def call(self, method: str, args: Sequence[tuple]) -> list:
        """`method(*args[i])` on one replica of each shard i, in parallel; results in shard order.

        Successive calls start at successive replicas (round robin), so R replicas share the requests.

        Raises:
            ShardUnavailableError: a shard whose replicas have all died.
        """
        turn = next(self._turn)
        chosen = [self._pick(i, turn) for i in range(self.n_shards)]
        pending = [getattr(actor, method).remote(*a) for actor, a in zip(chosen, args)]
        return [self._get(i, actor, ref, method, a, turn)
                for i, (actor, ref, a) in enumerate(zip(chosen, pending, args))]

    def _pick(self, shard: int, turn: int):
        if self.closed:
            raise ShardUnavailableError("the sharded index is closed: its actors have ended")
        live = self.live(shard)
        if not live:
            raise ShardUnavailableError(f"every replica of shard {shard} has died")
        return live[turn % len(live)]

    def _get(self, shard: int, actor, ref, method: str, args: tuple, turn: int):
        while True:
            try:
                return self._ray.get(ref)
            except self._ray.exceptions.RayActorError as exc:
                if self.closed:
                    raise
                self._drop(shard, actor, exc)
                actor = self._pick(shard, turn)  # another live replica (raises when none is left)
                ref = getattr(actor, method).remote(*args)

    def _drop(self, shard: int, actor, exc: Exception) -> None:
        with self._lock:
            group = self._groups[shard]
            if any(a is actor for a in group):
                group[:] = [a for a in group if a is not actor]
                logger.warning("a replica of shard %d died (%s); %d left", shard, type(exc).__name__, len(group))

    def kill_all(self) -> None:
        self.closed = True
        for actor in self.everyone():
            self._ray.kill(actor)
        with self._lock:
            self._groups = [[] for _ in self._groups]
