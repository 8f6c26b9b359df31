"""bm25s on real dictionary text (GCIDE + WordNet) as the search-speed benchmarks' lexical peer."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from benchmarks.lib.speed_common import K, fmt, log, row
from benchmarks.lib.timer import time_calls


def dictionary_texts(n: int, seed: int) -> tuple[list[str], str]:
    """n real-text documents from GCIDE and WordNet (Debian dict-gcide, wordnet-base). Entries first; beyond
    their count, entries split into senses and WordNet glosses into parts; beyond that, pairs of units."""
    import gzip
    import re

    gcide_dict, gcide_index = Path("/usr/share/dictd/gcide.dict.dz"), Path("/usr/share/dictd/gcide.index")
    if not gcide_dict.is_file():
        raise SystemExit("dict-gcide is not installed: bash benchmarks/speed/setup_search_speed.sh")
    raw = gzip.open(gcide_dict).read()
    alphabet = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}

    def b64(s: str) -> int:
        v = 0
        for ch in s:
            v = v * 64 + alphabet[ch]
        return v
    spans = set()
    for line in gcide_index.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and not parts[0].startswith("00-database"):
            spans.add((b64(parts[1]), b64(parts[2])))
    entries = [raw[a:a + b].decode("utf-8", "replace") for a, b in sorted(spans)]
    glosses = []
    for pos in ("noun", "verb", "adj", "adv"):
        for line in Path(f"/usr/share/wordnet/data.{pos}").read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.startswith(" ") and " | " in line:
                head, gloss = line.split(" | ", 1)
                words = head.split()[4:4 + 2 * int(head.split()[3], 16):2]
                glosses.append(" ".join(w.replace("_", " ") for w in words) + ": " + gloss.strip())
    units = entries + glosses
    how = f"{len(entries):,} GCIDE entries + {len(glosses):,} WordNet synsets"
    if n > len(units):
        senses = [s for e in entries for s in re.split(r"\n\s*\d+\.\s", e) if s.strip()]
        parts = [p for g in glosses for p in g.split("; ") if p.strip()]
        units = senses + parts
        how = f"{len(senses):,} GCIDE senses + {len(parts):,} WordNet gloss parts"
    rng = np.random.default_rng(seed)
    if n > len(units):
        extra = n - len(units)
        a, b = rng.integers(0, len(units), extra), rng.integers(0, len(units), extra)
        units = units + [units[i] + "\n" + units[j] for i, j in zip(a, b)]
        how += f" + {extra:,} random pairs of them"
    chosen = rng.permutation(len(units))[:n]
    return [units[i] for i in chosen], how


def bench_bm25s(n_docs: int, n_queries: int, seed: int) -> list[dict]:
    import bm25s

    texts, how = dictionary_texts(n_docs, seed)
    rng = np.random.default_rng(seed + 1)
    queries = []  # 2-5 consecutive words of a random document: a short phrase a user might type
    while len(queries) < n_queries:
        words = texts[int(rng.integers(len(texts)))].split()
        if len(words) >= 6:
            start, length = int(rng.integers(0, len(words) - 5)), int(rng.integers(2, 6))
            queries.append(" ".join(words[start:start + length]))
    t0 = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    build_s = time.perf_counter() - t0
    size = sum(a.nbytes for a in retriever.scores.values() if isinstance(a, np.ndarray))
    tokens = [bm25s.tokenize([qt], stopwords="en", show_progress=False, return_ids=False)[0] for qt in queries]

    def search(tok):
        return retriever.retrieve([tok], k=K, show_progress=False, n_threads=1)
    times = time_calls(search, tokens, n_warmup=10)
    t0 = time.perf_counter()
    retriever.retrieve(tokens, k=K, show_progress=False, n_threads=1)
    qps = len(tokens) / (time.perf_counter() - t0)
    out = row("bm25s", n_docs, 1, times, qps, size / n_docs, 1.0, None, build_s=round(build_s, 1),
              note=f"real text: {how}; queries: 2-5 word phrases from random documents; exact BM25 (its own "
                   "scores), timing excludes query tokenization, as the uhd rows exclude query encoding")
    log(fmt(out))
    return [out]

