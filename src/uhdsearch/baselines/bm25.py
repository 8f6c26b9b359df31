"""BM25 baseline on bm25s: same tokenization for documents and queries, fixed tie rule, returns a Run.

Word-level by default (bm25s's lowercase word tokenizer, stopwords). `wordpiece_analyzer` gives Luan et al.'s
BM25-uni and BM25-bi (§6.1): a BERT wordpiece tokenization, with adjacent-pair bigrams added for BM25-bi.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import bm25s
import numpy as np
from tqdm.auto import tqdm

from uhdsearch.errors import UsageError
from uhdsearch.topk import top_k
from uhdsearch.types import Document, Query, Run, ScoredDoc, start_run

logger = logging.getLogger(__name__)

Stemmer = Callable[[list[str]], list[str]]
Analyzer = Callable[[Sequence[str]], list[list[str]]]  # texts -> one token list per text
BM25Method = Literal["lucene", "robertson", "atire", "bm25l", "bm25+"]


class BM25Retriever:
    """Lexical BM25 retrieval over title + text, built on bm25s; a `Retriever` (``search(queries, k) -> Run``).

    Defaults are Pyserini's BM25 parameters (k1=0.9, b=0.4), Lucene's scoring variant, Lucene's 33 English
    stopwords and no stemming. Measured on the bundled SciFact test split (300 queries, k=1000):

    ============================  =======  ======
    setting                       nDCG@10  R@100
    ============================  =======  ======
    defaults                      0.6569   0.8759
    k1=1.2, b=0.75 (Elastic)      0.6625   0.8759
    defaults, stemmer="porter"    0.6713   0.9187
    ============================  =======  ======

    BEIR publishes 0.665 / 0.908 (Elasticsearch, title and text as separate fields).

    Build with `BM25Retriever.build`; the constructor takes an already indexed bm25s model.

    Attributes:
        doc_ids: External doc_id of each internal document number.
        model: The bm25s index.
        stopwords: Stopword setting passed to ``bm25s.tokenize`` for documents and queries.
        stemmer: Stemmer applied to documents and queries, or None.
        analyzer: Tokenizer used instead of ``bm25s.tokenize`` (e.g. `wordpiece_analyzer`), or None.
        name: The name given to Runs.
    """

    def __init__(
        self,
        model: bm25s.BM25,
        doc_ids: Sequence[str],
        stopwords: str | Sequence[str] | None = "en",
        stemmer: Stemmer | Any | None = None,
        analyzer: Analyzer | None = None,
        name: str = "bm25",
    ) -> None:
        self.model = model
        self.doc_ids = list(doc_ids)
        self.stopwords = stopwords
        self.stemmer = stemmer
        self.analyzer = analyzer
        self.name = name
        if model.scores["num_docs"] != len(self.doc_ids):
            raise UsageError(
                f"the bm25s index has {model.scores['num_docs']} documents but {len(self.doc_ids)} doc_ids were given"
            )

    @property
    def n_documents(self) -> int:
        """Number of indexed documents."""
        return len(self.doc_ids)

    @classmethod
    def build(
        cls,
        corpus: Mapping[str, Document] | Sequence[Document] | Iterable[Document],
        k1: float = 0.9,
        b: float = 0.4,
        method: BM25Method = "lucene",
        stopwords: str | Sequence[str] | None = "en",
        stemmer: str | Stemmer | Any | None = None,
        analyzer: Analyzer | None = None,
        name: str = "bm25",
        show_progress: bool = True,
    ) -> BM25Retriever:
        """Tokenize and index a corpus (``Document.full_text``: title and text).

        Args:
            corpus: doc_id -> Document, or Document records; their order fixes the internal doc numbers.
            k1: Term-frequency saturation (Pyserini default 0.9; Lucene/Elasticsearch 1.2).
            b: Length normalization (Pyserini default 0.4; Lucene/Elasticsearch 0.75).
            method: bm25s scoring variant.
            stopwords: ``"en"`` for bm25s's English list, a list of words, or None to keep every token.
            stemmer: None; a callable mapping a list of tokens to a list of stems; an object with a
                ``stemWords`` method; or a PyStemmer algorithm name such as ``"porter"`` or ``"english"``
                (needs ``pip install PyStemmer``).
            analyzer: A callable mapping texts to token lists, used for documents and queries instead of
                ``bm25s.tokenize`` (then `stopwords` and `stemmer` are ignored); see `wordpiece_analyzer`.
            name: The name given to Runs (``"bm25-bi"`` ...).
            show_progress: Show tqdm bars on stderr while tokenizing and indexing.

        Returns:
            The retriever.

        Raises:
            ValueError: an empty corpus, repeated doc_ids, a mapping key that differs from its
                Document's doc_id, k1 < 0, b outside [0, 1], or an unknown stemmer algorithm name.
            TypeError: a corpus item that is not a Document, or a stemmer that is not callable.
            ImportError: `stemmer` names an algorithm and PyStemmer is not installed.

        Examples:
            >>> from uhdsearch.types import Document
            >>> bm25 = BM25Retriever.build([Document("d1", "cats purr"), Document("d2", "dogs bark")],
            ...                            show_progress=False)
            >>> bm25.search({"q1": "why do dogs bark"}, k=1, show_progress=False)["q1"][0].doc_id
            'd2'
        """
        if k1 < 0:
            raise UsageError(f"k1={k1} must be >= 0")
        if not 0 <= b <= 1:
            raise UsageError(f"b={b} must be between 0 and 1")
        if isinstance(stemmer, str):
            stemmer = _pystemmer(stemmer)
        if stemmer is not None and not (callable(stemmer) or hasattr(stemmer, "stemWords")):
            raise TypeError(
                f"stemmer must be a callable list[str] -> list[str] or have stemWords, got {type(stemmer).__name__}"
            )
        if analyzer is not None and not callable(analyzer):
            raise TypeError(f"analyzer must be a callable list[str] -> list[list[str]], got {type(analyzer).__name__}")
        documents = _as_documents(corpus)
        doc_ids = [d.doc_id for d in documents]
        texts = [d.full_text for d in documents]
        if analyzer is None:
            tokens = bm25s.tokenize(texts, stopwords=stopwords, stemmer=stemmer, show_progress=show_progress)
        else:
            tokens = analyzer(texts)
        model = bm25s.BM25(k1=k1, b=b, method=method)
        model.index(tokens, show_progress=show_progress)
        logger.info(
            "indexed %d documents, %d terms (k1=%s, b=%s, method=%s)",
            len(doc_ids), len(model.vocab_dict), k1, b, method,
        )
        return cls(model, doc_ids, stopwords=stopwords, stemmer=stemmer, analyzer=analyzer, name=name)

    def search(
        self, queries: Mapping[str, str] | Sequence[Query], k: int, show_progress: bool = True
    ) -> Run:
        """Return the top `k` documents for each query.

        Ranking is by BM25 score descending, ties broken by internal doc number ascending (corpus order).
        Every non-empty query gets min(k, n_documents) hits; documents sharing no term with the query
        score 0 and fill the tail in corpus order. An empty or whitespace-only query gets no hits.

        Args:
            queries: {query_id: text} or Query records.
            k: Number of documents per query; larger than the corpus returns every document.
            show_progress: Show a tqdm bar on stderr.

        Returns:
            A Run named `name` (``"bm25"`` by default) with one entry per query, in input order.

        Raises:
            ValueError: k <= 0.
            TypeError: queries of another type (see `uhdsearch.types.as_queries`).
        """
        run, live = start_run(queries, k, self.name)
        token_lists = self.tokenize_queries([q.text for q in live])
        k = min(int(k), self.n_documents)
        for query, tokens in zip(tqdm(live, desc="BM25 search", disable=not show_progress), token_lists):
            scores = self.score_all(tokens)
            numbers, _ = top_k(scores, k, positive_only=False)  # zero scores fill the tail in corpus order
            run.results[query.query_id] = [ScoredDoc(self.doc_ids[j], float(scores[j])) for j in numbers]
        return run

    def tokenize_queries(self, texts: Sequence[str]) -> list[list[str]]:
        """Tokenize query texts exactly as documents were (lowercase, stopwords, stemmer).

        Args:
            texts: Query strings.

        Returns:
            One list of tokens (stems when a stemmer is set) per text.
        """
        if not texts:
            return []
        if self.analyzer is not None:
            return self.analyzer(list(texts))
        return bm25s.tokenize(
            list(texts), stopwords=self.stopwords, stemmer=self.stemmer, return_ids=False, show_progress=False
        )

    def score_all(self, tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every document for one tokenized query.

        Args:
            tokens: Query tokens from `tokenize_queries`; unknown tokens are ignored.

        Returns:
            (n_documents,) float32 scores indexed by internal doc number.
        """
        token_ids = self.model.get_tokens_ids(list(tokens))
        if not token_ids:
            return np.zeros(self.n_documents, dtype=np.float32)
        return np.asarray(self.model.get_scores_from_ids(token_ids), dtype=np.float32)


def wordpiece_analyzer(tokenizer: Any, bigrams: bool = False) -> Analyzer:
    """Luan et al.'s BM25 tokenization (§6.1): case-insensitive wordpieces, optionally plus their bigrams.

    Every wordpiece is kept (no stopwords, no stemming), as in the paper. A bigram is two adjacent
    wordpieces joined by a space, so it can never collide with a unigram; BM25-bi puts unigrams and
    bigrams in one bag, and the document length BM25 normalizes by counts both.

    Args:
        tokenizer: A Hugging Face tokenizer with ``tokenize`` (e.g. ``Backbone.tokenizer``); an uncased
            BERT vocabulary lowercases for you.
        bigrams: Add the bigrams (BM25-bi) or not (BM25-uni).

    Returns:
        A callable mapping texts to one token list each.

    Examples:
        >>> from transformers import AutoTokenizer
        >>> from uhdsearch.encoder.backbone import default_backbone_dir
        >>> analyze = wordpiece_analyzer(AutoTokenizer.from_pretrained(default_backbone_dir()), bigrams=True)
        >>> analyze(["Embryonic stem"])
        [['embryo', '##nic', 'stem', 'embryo ##nic', '##nic stem']]
    """
    if not callable(getattr(tokenizer, "tokenize", None)):
        raise TypeError(f"tokenizer must have a tokenize method (a Hugging Face tokenizer), got {type(tokenizer).__name__}")

    from uhdsearch.encoder.backbone import TOKENIZER_LOCK  # here: the BM25 baselines need no torch otherwise

    def analyze(texts: Sequence[str]) -> list[list[str]]:
        out = []
        for text in texts:
            with TOKENIZER_LOCK:  # the backbone's tokenizer may be shared with encoding threads
                pieces = tokenizer.tokenize(text)
            if bigrams:
                pieces = pieces + [f"{a} {b}" for a, b in zip(pieces, pieces[1:])]
            out.append(pieces)
        return out

    return analyze


def _pystemmer(algorithm: str) -> Any:
    try:
        import Stemmer
    except ImportError:
        raise ImportError(
            f"stemmer={algorithm!r} needs the PyStemmer package: pip install PyStemmer "
            "(or pass a callable list[str] -> list[str])"
        ) from None
    try:
        return Stemmer.Stemmer(algorithm)
    except KeyError:
        raise UsageError(
            f"stemmer={algorithm!r} is not a PyStemmer algorithm; available: {', '.join(Stemmer.algorithms())}"
        ) from None


def _as_documents(corpus: Mapping[str, Document] | Iterable[Document]) -> list[Document]:
    if isinstance(corpus, Mapping):
        documents = list(corpus.values())
        for key, doc in corpus.items():
            if isinstance(doc, Document) and key != doc.doc_id:
                raise UsageError(f"corpus key {key!r} differs from its Document's doc_id {doc.doc_id!r}")
    else:
        documents = list(corpus)
    if not documents:
        raise UsageError("the corpus is empty; BM25 needs at least one document")
    seen: set[str] = set()
    for doc in documents:
        if not isinstance(doc, Document):
            raise TypeError(f"expected Document records or a {{doc_id: Document}} mapping, got {type(doc).__name__}")
        if doc.doc_id in seen:
            raise UsageError(f"doc_id {doc.doc_id!r} appears more than once in the corpus")
        seen.add(doc.doc_id)
    return documents
