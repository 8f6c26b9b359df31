"""open_index(path) tells every kind of index on disk apart; nothing outside index/ probes kinds or capabilities."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from uhdsearch.errors import IndexFormatError, UsageError
from uhdsearch.index import index_kind, open_index
from uhdsearch.index.base import IndexCapabilities, SearchableIndex
from uhdsearch.index.impacts import ImpactPlanes
from uhdsearch.index.inverted import BinaryIndex, InvertedIndex, WeightedIndex
from uhdsearch.index.live.segments import SegmentedIndex

SRC = Path(__file__).resolve().parents[2] / "src" / "uhdsearch"


def test_every_kind_opens_as_what_it_is(tmp_path, mini_encoding, mini_data):
    ids = list(mini_data.corpus)
    BinaryIndex.from_encoding(mini_encoding, ids, tmp_path / "binary")
    WeightedIndex.from_encoding(mini_encoding, ids, tmp_path / "weighted")
    ImpactPlanes.from_encoding(mini_encoding, ids, 2, 3).save(tmp_path / "planes")
    with SegmentedIndex.create(tmp_path / "live", "binary", dim=mini_encoding.dim,
                               n_buckets=mini_encoding.n_buckets) as live:
        live.add(mini_encoding[:10], ids[:10])
        live.commit()
    from uhdsearch.scale.shards import split_index

    split_index(tmp_path / "binary", 2, tmp_path / "shards")

    kinds = {name: index_kind(tmp_path / name) for name in ("binary", "weighted", "planes", "live", "shards")}
    assert kinds == {"binary": "binary", "weighted": "weighted", "planes": "planes", "live": "segmented",
                     "shards": "shards"}
    binary, weighted = open_index(tmp_path / "binary"), open_index(tmp_path / "weighted")
    assert type(binary) is BinaryIndex and type(weighted) is WeightedIndex and binary.doc_ids == ids
    assert isinstance(open_index(tmp_path / "planes"), ImpactPlanes)
    reader = open_index(tmp_path / "live")
    assert isinstance(binary, SearchableIndex) and isinstance(reader, SearchableIndex)
    assert isinstance(reader, SegmentedIndex) and reader.generation == 2 and reader.takes_writes  # create, commit
    writer = open_index(tmp_path / "live", writable=True)
    try:
        assert writer.n_documents == 10
    finally:
        writer.close()
    with pytest.raises(UsageError, match="2 shards of an index"):
        open_index(tmp_path / "shards")
    with pytest.raises(UsageError, match="only a segmented index takes writes"):
        open_index(tmp_path / "binary", writable=True)
    (tmp_path / "empty").mkdir()
    with pytest.raises(IndexFormatError, match="holds no index"):
        open_index(tmp_path / "empty")
    with pytest.raises(FileNotFoundError):
        open_index(tmp_path / "missing")


def test_capabilities_are_members_of_the_contract():
    for klass in (InvertedIndex, SegmentedIndex, ImpactPlanes):
        assert issubclass(klass, IndexCapabilities)
    assert InvertedIndex.answers_overlap_counts and InvertedIndex.has_document_vectors
    assert SegmentedIndex.answers_overlap_counts and not SegmentedIndex.has_document_vectors
    assert not ImpactPlanes.stop_dimensions_by_default and not ImpactPlanes.length_norm_supported
    assert ImpactPlanes.scores_own_contributions and not ImpactPlanes.answers_overlap_counts
    assert SegmentedIndex.takes_writes and not InvertedIndex.takes_writes and InvertedIndex.generation is None


def test_no_index_kind_or_capability_probing_outside_index():
    probes = re.compile(r"list_generations|index\.live\.commit|(hasattr|getattr)\((self\.)?(index|_index|reader)\b"
                        r"|stop_dimensions_by_default\", True|\"overlap_counts\"|\"document_vectors\"")
    found = []
    for path in SRC.rglob("*.py"):
        if path.relative_to(SRC).parts[0] == "index" or path.name == "_moved.py":  # _moved: the old paths' table
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if probes.search(line):
                found.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    assert found == []
