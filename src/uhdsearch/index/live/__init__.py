"""Live updates: SegmentedIndex (segments.py), an updatable index of immutable static indexes (Lucene-style).

commit (commit points, segment and deletion files), lock (the single-writer lock), deletions (live doc ids and
masks), additions (uncommitted documents), merges (foreground and background), leftovers (garbage collection of
interrupted writes), segment_search (search and document frequencies across segments).
"""
