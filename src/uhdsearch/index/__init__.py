"""Indexes: the searchable-index contract (base), static (inverted, impacts), live (live/), the kernels;
`open_index(path)` opens any of them from disk (opener.py)."""
from uhdsearch.index.live.commit import commit_exists
from uhdsearch.index.opener import index_kind, open_index

__all__ = ["commit_exists", "index_kind", "open_index"]
