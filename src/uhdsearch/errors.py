"""Exceptions for bad input. Every one is a ValueError subclass so callers can catch broadly.

Examples:
    >>> try:
    ...     raise IndexFormatError("idx/index_meta.json is missing")
    ... except ValueError as exc:
    ...     print(type(exc).__name__, isinstance(exc, UhdError))
    IndexFormatError True
"""
from __future__ import annotations


class UhdError(ValueError):
    """Base class for uhdsearch errors caused by user input or files."""


class IndexFormatError(UhdError):
    """An index directory is missing, foreign, corrupted or of an unsupported version."""


class ModelFormatError(UhdError):
    """A model directory is missing files or has an unsupported format."""


class DimensionMismatchError(UhdError):
    """The encoder and the index disagree on dim or bucket count."""


class DataFormatError(UhdError):
    """A data file (JSONL, TSV, TREC) is malformed; the message names file and line."""


class IndexLockedError(UhdError):
    """Another writer holds an index's write lock, or a read-only index was asked to change."""


class UsageError(UhdError):
    """An argument or command-line option has an invalid value."""
