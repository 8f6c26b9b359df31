"""Distractor documents for the index-size study: real dictionary text and random strings (Reimers & Gurevych
§5.2: lowercase a-z and space, 20 to 150 characters), both reproducible from a seed."""
from __future__ import annotations

import functools
import gzip
import re
import string
from pathlib import Path

import numpy as np

from uhdsearch.errors import DataFormatError, UsageError

GCIDE_DICT = Path("/usr/share/dictd/gcide.dict.dz")
GCIDE_INDEX = Path("/usr/share/dictd/gcide.index")
WORDNET_DIR = Path("/usr/share/wordnet")
ALPHABET = string.ascii_lowercase + " "
_B64 = {c: i for i, c in enumerate(string.ascii_uppercase + string.ascii_lowercase + string.digits + "+/")}


def random_strings(n: int, seed: int, min_length: int = 20, max_length: int = 150) -> list[str]:
    """n strings of a-z and space, lengths uniform in [min_length, max_length], the same for the same seed.

    Examples:
        >>> random_strings(2, seed=0, min_length=3, max_length=5) == random_strings(2, seed=0, min_length=3, max_length=5)
        True
    """
    if n < 0 or not 1 <= min_length <= max_length:
        raise UsageError(f"n={n}, lengths {min_length}..{max_length}: need n >= 0 and 1 <= min <= max")
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_length, max_length + 1, n)
    letters = np.frombuffer(ALPHABET.encode(), dtype=np.uint8)[rng.integers(0, len(ALPHABET), int(lengths.sum()))]
    text = letters.tobytes().decode()
    ends = np.cumsum(lengths)
    return [text[e - n_chars:e] for e, n_chars in zip(ends, lengths)]


@functools.lru_cache(maxsize=1)
def dictionary_units() -> tuple[tuple[str, ...], str]:
    """Every GCIDE entry and WordNet synset (word list + gloss) as one text each (Debian dict-gcide, wordnet-base).

    Raises:
        DataFormatError: the packages are not installed (`apt-get install dict-gcide wordnet-base`).
    """
    if not GCIDE_DICT.is_file() or not (WORDNET_DIR / "data.noun").is_file():
        raise DataFormatError(f"{GCIDE_DICT} or {WORDNET_DIR}/data.noun missing: "
                              "apt-get install -y dict-gcide wordnet-base (scripts/setup.sh does)")
    raw = gzip.open(GCIDE_DICT).read()
    spans = set()
    for line in GCIDE_INDEX.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and not parts[0].startswith("00-database"):
            spans.add((_b64(parts[1]), _b64(parts[2])))
    entries = [" ".join(raw[a:a + b].decode("utf-8", "replace").split()) for a, b in sorted(spans)]
    entries = [e for e in entries if not e.startswith("00-database")]  # the dictionary's own header entries
    glosses = []
    for pos in ("noun", "verb", "adj", "adv"):
        for line in (WORDNET_DIR / f"data.{pos}").read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.startswith(" ") and " | " in line:
                head, gloss = line.split(" | ", 1)
                fields = head.split()
                words = fields[4:4 + 2 * int(fields[3], 16):2]
                glosses.append(" ".join(w.replace("_", " ") for w in words) + ": " + gloss.strip())
    return tuple(entries + glosses), f"{len(entries):,} GCIDE entries + {len(glosses):,} WordNet synsets"


def dictionary_texts(n: int, seed: int) -> tuple[list[str], str]:
    """n distinct dictionary texts sampled with `seed` (a prefix of one seeded permutation, so a smaller n is
    the head of a larger one and the index sizes nest); senses split apart when n exceeds the entries."""
    units, how = dictionary_units()
    if n > len(units):
        units = [s.strip() for u in units for s in re.split(r"\s\d+\.\s|; ", u) if len(s.strip()) > 10]
        how = f"{len(units):,} GCIDE senses and WordNet gloss parts"
    if n > len(units):
        raise UsageError(f"{n:,} dictionary texts asked for; the installed dictionaries give {len(units):,}")
    order = np.random.default_rng(seed).permutation(len(units))[:n]
    return [units[i] for i in order], how


def _b64(s: str) -> int:
    value = 0
    for ch in s:
        value = value * 64 + _B64[ch]
    return value
