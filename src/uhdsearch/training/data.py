"""Training pairs from qrels or from the Inverse Cloze Task, and batches without repeated documents. No model code."""
from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from uhdsearch.types import Document, Qrels, Query

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")
# Lowercased collections (Medline, CISI in BEIR) have no capitals to anchor on: any letter starts a sentence.
_SENTENCE_END_LOWERCASED = re.compile(r"(?<=[.!?])\s+(?=[a-z0-9(\[])")


@dataclass(frozen=True)
class TrainingPair:
    """A query and its positive document (a row of the corpus list).

    drop: character span of the document's full_text that is removed from the positive; the
    Inverse Cloze Task (Luan et al. §7, after Lee et al. 2019) takes the query sentence out of its passage.
    """

    query: str
    doc_row: int
    drop: tuple[int, int] | None = None


def pairs_from_qrels(queries: Sequence[Query], qrels: Qrels, doc_rows: Mapping[str, int]) -> list[TrainingPair]:
    """One pair per judged-relevant (query, document); documents missing from the corpus are skipped."""
    text = {q.query_id: q.text for q in queries}
    pairs = []
    for query_id, judged in qrels.items():
        if query_id not in text or not text[query_id].strip():
            continue
        for doc_id, relevance in judged.items():
            if relevance > 0 and doc_id in doc_rows:
                pairs.append(TrainingPair(text[query_id], doc_rows[doc_id]))
    return pairs


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of `text` (a light rule: end mark, space, capital or digit).

    In text without any capital letter, an end mark and space before any letter ends a sentence.

    Examples:
        >>> text = "Cells divide. Mitochondria make energy (ATP). 3 genes matter."
        >>> [text[a:b] for a, b in split_sentences(text)]
        ['Cells divide.', 'Mitochondria make energy (ATP).', '3 genes matter.']
        >>> len(split_sentences("lowercased text . no capitals here ."))
        2
    """
    pattern = _SENTENCE_END if any(c.isupper() for c in text) else _SENTENCE_END_LOWERCASED
    spans, start = [], 0
    for match in pattern.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    if start < len(text):
        spans.append((start, len(text)))
    return [(a, b) for a, b in spans if text[a:b].strip()]


def ict_pairs(
    documents: Sequence[Document], per_document: int = 2, min_words: int = 5, seed: int = 0
) -> list[TrainingPair]:
    """Inverse Cloze Task pairs: a sentence of a passage as the query, the rest of the passage as its positive.

    Passages with fewer than three sentences are skipped (removing the sentence would leave too little).

    Examples:
        >>> doc = Document("d0", "Cells divide often. Mitochondria make energy for cells. The nucleus holds the genome.")
        >>> [(p.query, p.doc_row) for p in ict_pairs([doc], per_document=1, min_words=3)]
        [('Mitochondria make energy for cells.', 0)]
    """
    rng = random.Random(seed)
    pairs = []
    for row, document in enumerate(documents):
        text = document.full_text
        sentences = split_sentences(text)
        spans = [s for s in sentences if len(text[s[0]:s[1]].split()) >= min_words]
        if len(sentences) < 3 or not spans:
            continue
        for start, end in rng.sample(spans, min(per_document, len(spans))):
            pairs.append(TrainingPair(text[start:end], row, (start, end)))
    return pairs


def unique_document_batches(pairs: Sequence[TrainingPair], batch_size: int, seed: int) -> list[list[TrainingPair]]:
    """Shuffle pairs into batches in which no document occurs twice.

    A repeated document would be both a positive and an in-batch "negative" of the same query.
    A pair left alone in a batch of one (it has no negatives) is dropped.
    """
    rng = random.Random(seed)
    pending = list(pairs)
    rng.shuffle(pending)
    batches: list[list[TrainingPair]] = []
    open_batches: list[tuple[list[TrainingPair], set[int]]] = []
    for pair in pending:
        for batch, rows in open_batches:
            if pair.doc_row not in rows:
                batch.append(pair)
                rows.add(pair.doc_row)
                if len(batch) == batch_size:
                    batches.append(batch)
                    open_batches.remove((batch, rows))
                break
        else:
            open_batches.append(([pair], {pair.doc_row}))
            if batch_size == 1:
                batches.append(open_batches.pop()[0])
    batches.extend(b for b, _ in open_batches if len(b) > 1)
    rng.shuffle(batches)
    return batches


def remove_span(text: str, span: tuple[int, int] | None) -> str:
    """`text` without the characters of `span` (an ICT pair's query sentence); None keeps it whole.

    >>> remove_span("One. Two words here. Three.", (5, 20))
    'One.   Three.'
    """
    if span is None:
        return text
    return (text[: span[0]] + " " + text[span[1]:]).strip()
