"""The distractor generators: the random strings' alphabet and lengths, and reproducible seeded samples."""
from __future__ import annotations

import pytest

from uhdsearch.studies.distractors import GCIDE_DICT, dictionary_texts, random_strings


def test_random_strings_alphabet_and_lengths() -> None:
    texts = random_strings(5000, seed=1)
    assert len(texts) == 5000
    assert set("".join(texts)) == set("abcdefghijklmnopqrstuvwxyz ")
    lengths = [len(t) for t in texts]
    assert min(lengths) == 20 and max(lengths) == 150


def test_random_strings_reproducible_from_the_seed_and_nested() -> None:
    assert random_strings(300, seed=7) == random_strings(300, seed=7)
    assert random_strings(300, seed=7) != random_strings(300, seed=8)


@pytest.mark.skipif(not GCIDE_DICT.is_file(), reason="dict-gcide not installed (scripts/setup.sh installs it)")
def test_dictionary_sample_reproducible_and_sizes_nest() -> None:
    small, how = dictionary_texts(1000, seed=3)
    large, _ = dictionary_texts(5000, seed=3)
    assert small == dictionary_texts(1000, seed=3)[0]
    assert large[:1000] == small  # each index size holds the smaller ones
    assert len(set(large)) > 4900 and "GCIDE" in how
    assert not any(t.startswith("00-database") for t in large)
    assert dictionary_texts(1000, seed=4)[0] != small
