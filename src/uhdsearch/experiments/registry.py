"""The one registry of comparison systems: name -> `System` (a builder and what it learns from).

A system registers itself in its own module under `uhdsearch.experiments.systems`; importing this package
loads them all. A builder takes the shared `SystemContext` and returns a retriever with ``search(queries, k)``.
What a system learns from is declared where it registers, so the runner and the notes need no list of names:

- ``fits_on_source``: fits unsupervised post-processing (whitening, flows, WTA centring) on the source corpus;
- ``trains_on_source``: trains a learned part (the UHD head, a DE/ME head) on the source collection;
- ``standalone``: the baselines' common-signature builder, for building the system without a context.

Out of domain the source is the training collection; in domain it is the evaluated one.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uhdsearch.errors import UsageError
from uhdsearch.types import Retriever

if TYPE_CHECKING:
    from uhdsearch.experiments.context import SystemContext

Builder = Callable[["SystemContext"], Retriever]
BASELINE = "bm25"  # the baseline of every paired t-test; always run first


@dataclass(frozen=True)
class System:
    """One registered system.

    Attributes:
        name: The name in tables, result JSON and ``--systems``.
        build: builder(ctx) -> retriever.
        fits_on_source: Fits unsupervised post-processing on the source corpus (out of domain: not the target).
        trains_on_source: Trains a learned part on the source collection (out of domain: not the target).
        standalone: The common-signature builder of `uhdsearch.experiments.builders` (corpus, queries_train,
            qrels_train, backbone_dir, states, **options) with this system's options fixed, or None.
    """

    name: str
    build: Builder
    fits_on_source: bool = False
    trains_on_source: bool = False
    standalone: Callable[..., Any] | None = None


SYSTEMS: dict[str, System] = {}


def register(name: str, *, fits_on_source: bool = False, trains_on_source: bool = False,
             standalone: Callable[..., Any] | None = None) -> Callable[[Builder], Builder]:
    """Decorator: add `builder` to `SYSTEMS` under `name`, with what it learns from.

    Raises:
        ValueError: `name` is already registered (two modules must not claim one name).
    """

    def add(builder: Builder) -> Builder:
        if name in SYSTEMS:
            raise UsageError(f"system {name!r} is already registered")
        SYSTEMS[name] = System(name, builder, fits_on_source, trains_on_source, standalone)
        return builder

    return add


def resolve_systems(names: str | Sequence[str] | None) -> list[str]:
    """Check system names (comma-separated or a list; None or "all": every registered one), BM25 first.

    Raises:
        ValueError: an unknown name (the message lists the known ones) or an empty list.

    Examples:
        >>> resolve_systems("bm25-bi, splade-tiny,bm25-bi")
        ['bm25', 'bm25-bi', 'splade-tiny']
    """
    if names is None or names == "all":
        chosen = list(SYSTEMS)
    else:
        chosen = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    if not chosen:
        raise UsageError(f"no systems given; choose from: {', '.join(SYSTEMS)}")
    unknown = [n for n in chosen if n not in SYSTEMS]
    if unknown:
        raise UsageError(f"unknown system(s) {', '.join(map(repr, unknown))}; known: {', '.join(SYSTEMS)}")
    return [BASELINE] + [n for n in dict.fromkeys(chosen) if n != BASELINE]


def build_system(name: str, corpus, queries_train=None, qrels_train=None, backbone_dir=None, states=None,
                 **options) -> Retriever:
    """Build a system that has a standalone builder, without a comparison (the baselines' common signature).

    Raises:
        ValueError: an unknown name or one without a standalone builder (the message lists those that have one).

    Examples:
        >>> from uhdsearch.types import Document
        >>> build_system("bm25", [Document("d1", "text")])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        uhdsearch.errors.UsageError: unknown system 'bm25'; known: dense, de-32, de-64, ...
    """
    standalone = {n: s.standalone for n, s in SYSTEMS.items() if s.standalone is not None}
    if name not in standalone:
        raise UsageError(f"unknown system {name!r}; known: {', '.join(standalone)}")
    return standalone[name](corpus, queries_train, qrels_train, backbone_dir, states, **options)
