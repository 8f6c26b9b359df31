"""Inference-free queries: a token -> sparse vector table built once from a UHD model; a query is the max-pool
of its tokens' rows (the union of their active dims), so encoding a query is a tokenizer call and a gather.

Documents keep the full encoder. `build_table`'s rows are the model's output for the token alone (`[CLS] token
[SEP]`, the token's own WTA winners, L2-normalized), so that table knows no context; corpus_table.CorpusTable
learns rows from the token's occurrences in a corpus instead (far better, see the README).
`LookupEncoder` has the query side of `UHDEncoder`'s interface, so `Searcher(LookupEncoder(...), index)` works.
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from uhdsearch.encoder.backbone import tokenize_texts
from uhdsearch.encoder.query.neighbours import NeighbourRows
from uhdsearch.encoder.query.vote import check_vote, vote_pool
from uhdsearch.errors import ModelFormatError, UsageError
from uhdsearch.sparse import SparseEncoding

LOOKUP_FILE = "query_lookup.npz"


def build_table(model, batch_size: int = 1024, token_ids=None) -> list[sp.csr_matrix]:
    """(vocab, dim) CSR float32 per bucket: row t is the model's sparse vector of token t alone.

    token_ids: only these rows (the others stay empty); None: the whole vocabulary (~1 min for MiniLM on 2 cores).
    """
    import torch

    from uhdsearch.encoder.modes import evaluating

    tokenizer = model.backbone.tokenizer
    vocab = len(tokenizer)
    wanted = np.arange(vocab) if token_ids is None else np.unique(np.asarray(token_ids, np.int64))
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    parts: list[list[sp.csr_matrix]] = [[] for _ in model.layers]
    with evaluating(model), torch.inference_mode():
        for start in range(0, len(wanted), batch_size):
            ids = torch.from_numpy(wanted[start:start + batch_size])
            input_ids = torch.stack([torch.full_like(ids, cls), ids, torch.full_like(ids, sep)], dim=1)
            states = model.backbone_runner()(input_ids, torch.ones_like(input_ids), model.layers)
            tokens = [s[:, 1] for s in states]  # the token's own state; each token is its own "text"
            vectors = model.pool_tokens(tokens, torch.arange(len(ids)), len(ids))
            for b, v in enumerate(vectors):
                parts[b].append(sp.csr_matrix(v.float().numpy()))
    place = sp.csr_matrix((np.ones(len(wanted), np.float32), (wanted, np.arange(len(wanted)))),
                          shape=(vocab, len(wanted)))  # rows of the built tokens -> their vocabulary ids
    return [(place @ sp.vstack(p, format="csr")).astype(np.float32).tocsr() for p in parts]


class LookupEncoder:
    """Query encoding by table lookup; `config`, `digest()` and `encode(texts, "query")` as UHDEncoder's.

    Examples:
        >>> from uhdsearch.encoder.config import EncoderConfig
        >>> from uhdsearch.encoder.model import UHDEncoder
        >>> model = UHDEncoder.new(config=EncoderConfig(dim=1024, wta_k=8, query_k=None))
        >>> words = model.backbone.tokenizer("bone density", add_special_tokens=False)["input_ids"]
        >>> lookup = LookupEncoder.from_model(model, token_ids=words)
        >>> q = lookup.encode(["bone density", "density bone"], "query")
        >>> (q.buckets[0][0] != q.buckets[0][1]).nnz  # the pool forgets order
        0
    """

    def __init__(self, tables: list[sp.csr_matrix], tokenizer, config, digest: str, specials: bool = False,
                 neighbours: list[NeighbourRows] | None = None, keep: int | None = None,
                 vote: float | None = None, winners: int | None = None) -> None:
        """specials: queries include [CLS] and [SEP] (tables learned from a corpus have rows for them).
        neighbours: per bucket, rows of (token, neighbour) pairs (neighbours.py): a query token then gets
        the sum of its pairs' rows, cut to its `keep` largest dims, and its `tables` row only where neither pair
        was seen. vote, winners (with neighbours): those `keep` dims are the token's candidates, of which it keeps
        the `winners` that its own row and, weighted by `vote`, the query's other tokens' rows score highest
        (vote.py)."""
        if neighbours is not None and (specials or not keep or len(neighbours) != len(tables)):
            raise UsageError("neighbour rows need one set per bucket, a positive keep and no [CLS]/[SEP] rows")
        check_vote(vote, winners, keep if neighbours is not None else None)
        self.neighbours, self.keep = neighbours, keep
        self.vote, self.winners = (float(vote), int(winners)) if vote is not None else (None, None)
        self.tables = [t.tocsr() for t in tables]
        self.tokenizer = tokenizer
        self.config = config
        self._digest = digest
        self.specials = specials
        kept = {tokenizer.cls_token_id, tokenizer.sep_token_id} if specials else set()
        dropped = set(tokenizer.all_special_ids) - kept
        self._special = np.array(sorted(dropped), np.int64)
        self._all_special = np.array(sorted(tokenizer.all_special_ids), np.int64)

    @classmethod
    def from_model(cls, model, batch_size: int = 1024, token_ids=None) -> LookupEncoder:
        return cls(build_table(model, batch_size, token_ids), model.backbone.tokenizer, model.config,
                   model.digest())

    def digest(self) -> str:
        """The model's digest: indexes built by the model accept these queries."""
        return self._digest

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the table into the model directory (or any directory) as query_lookup.npz."""
        path = Path(directory) / LOOKUP_FILE
        arrays = {"digest": np.array(self._digest), "specials": np.array(self.specials)}
        for b, t in enumerate(self.tables):
            arrays.update(_csr_arrays(f"b{b}", t))
        for b, rows in enumerate(self.neighbours or []):
            arrays["keep"], arrays["vocab"] = np.array(self.keep), np.array(rows.vocab)
            if self.vote is not None:
                arrays["vote"], arrays["winners"] = np.array(self.vote), np.array(self.winners)
            for side, keys, matrix in (("nl", rows.left_keys, rows.left), ("nr", rows.right_keys, rows.right)):
                arrays.update({f"b{b}_{side}_keys": keys, **_csr_arrays(f"b{b}_{side}", matrix)})
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, model_dir: str | os.PathLike, model) -> LookupEncoder:
        """Read model_dir/query_lookup.npz written for `model` (the digest must match)."""
        path = Path(model_dir) / LOOKUP_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no lookup table at {path}; build one with `uhdsearch lookup --model "
                                    f"{Path(model_dir)} --data DIR` (or LookupEncoder.from_model(...).save)")
        try:
            with np.load(path, allow_pickle=False) as z:
                digest = str(z["digest"])
                specials = bool(z["specials"]) if "specials" in z.files else False
                vocab_size = len(model.backbone.tokenizer)
                tables = [_read_csr(z, f"b{b}", model.config.dim) for b in range(model.config.n_buckets)]
                if any(t.shape[0] < vocab_size for t in tables):
                    raise ValueError(f"a table has fewer rows than the tokenizer's {vocab_size} tokens")
                neighbours, keep, vote, winners = None, None, None, None
                if "b0_nl_keys" in z.files:
                    keep, vocab = int(z["keep"]), int(z["vocab"])
                    if vocab != len(model.backbone.tokenizer) or keep < 1:  # pair keys encode the vocabulary size
                        raise ValueError(f"keep {keep}, neighbour rows for a vocabulary of {vocab} tokens, the "
                                         f"tokenizer has {len(model.backbone.tokenizer)}")
                    neighbours = []
                    for b in range(model.config.n_buckets):
                        left = _read_csr(z, f"b{b}_nl", model.config.dim)
                        right = _read_csr(z, f"b{b}_nr", model.config.dim)
                        neighbours.append(NeighbourRows(vocab, _read_keys(z, f"b{b}_nl", left.shape[0]), left,
                                                        _read_keys(z, f"b{b}_nr", right.shape[0]), right))
                    if "vote" in z.files:  # tables written before the vote have none
                        if z["vote"].shape or z["vote"].dtype.kind not in "fiu":
                            raise ValueError(f"vote {z['vote']!r} is not one number")
                        if z["winners"].shape or z["winners"].dtype.kind not in "iu":
                            raise ValueError(f"winners {z['winners']!r} is not one integer")
                        vote, winners = float(z["vote"]), int(z["winners"])
                        check_vote(vote, winners, keep)
                elif "vote" in z.files:
                    raise ValueError("a context vote without neighbour rows")
        except (KeyError, ValueError, TypeError, UsageError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise ModelFormatError(f"{path} is not a valid lookup table: {exc}") from exc
        if digest != model.digest():
            raise ModelFormatError(f"{path} was built for model {digest}, not {model.digest()}; rebuild it")
        return cls(tables, model.backbone.tokenizer, model.config, digest, specials, neighbours, keep, vote, winners)

    def encode(self, texts, kind: str = "query", **_) -> SparseEncoding:
        """Max-pool of the table rows of each text's tokens (special tokens left out); queries only."""
        if kind != "query":
            raise UsageError("a lookup encoder encodes queries only; encode documents with the full model")
        specials = self.specials or self.neighbours is not None
        encoded = tokenize_texts(self.tokenizer, list(texts), add_special_tokens=specials, truncation=True,
                                 max_length=self.config.query_max_length, return_overflowing_tokens=False)
        truncated = np.array([bool(e.overflowing) for e in encoded.encodings], dtype=bool) \
            if encoded.encodings is not None else np.zeros(len(encoded["input_ids"]), bool)
        if self.neighbours is not None:
            return SparseEncoding(self._pool_with_neighbours(encoded["input_ids"]), truncated)
        ids = [np.setdiff1d(np.asarray(x, np.int64), self._special) for x in encoded["input_ids"]]
        return SparseEncoding([_max_pool(t, ids) for t in self.tables], truncated)

    def _pool_with_neighbours(self, input_ids) -> list[sp.csr_matrix]:
        """Per bucket, the max-pool over each text's tokens of their neighbour rows ([CLS] and [SEP] only as
        neighbours: the texts are tokenized with them, as the sentences the rows were learned from)."""
        ids = np.concatenate([np.asarray(x, np.int64) for x in input_ids])
        ends = np.cumsum([len(x) for x in input_ids])
        positions = np.flatnonzero(~np.isin(ids, self._all_special))
        owner = np.searchsorted(ends, positions, side="right")  # the text of each position, ascending
        if self.vote is not None:
            return [vote_pool(rows.token_rows(ids, positions, table, self.keep), owner, len(input_ids), self.vote,
                              self.winners) for rows, table in zip(self.neighbours, self.tables)]
        per_text = np.split(np.arange(positions.shape[0]), np.searchsorted(owner, np.arange(1, len(input_ids))))
        return [_max_pool(rows.token_rows(ids, positions, table, self.keep), per_text)
                for rows, table in zip(self.neighbours, self.tables)]


def _max_pool(table: sp.csr_matrix, ids: list[np.ndarray]) -> sp.csr_matrix:
    """(len(ids), dim) CSR: row i is the element-wise max of table[ids[i]]."""
    rows, cols, vals = [], [], []
    for i, tokens in enumerate(ids):
        if tokens.size == 0:
            continue
        block = table[tokens]
        order = np.lexsort((-block.data, block.indices))  # by dim, largest value first
        dims = block.indices[order]
        first = np.concatenate(([True], dims[1:] != dims[:-1])) if dims.size else dims.astype(bool)
        cols.append(dims[first])
        vals.append(block.data[order][first])
        rows.append(np.full(int(first.sum()), i, np.int64))
    if not rows:
        return sp.csr_matrix((len(ids), table.shape[1]), dtype=np.float32)
    return sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                         shape=(len(ids), table.shape[1]), dtype=np.float32)


def _csr_arrays(prefix: str, matrix: sp.csr_matrix) -> dict[str, np.ndarray]:
    return {f"{prefix}_data": matrix.data, f"{prefix}_indices": matrix.indices, f"{prefix}_indptr": matrix.indptr}


def _read_csr(z, prefix: str, dim: int) -> sp.csr_matrix:
    """A table's CSR arrays, fully checked (ascending offsets, columns < dim): scipy's row gathers trust them as far
    as memory goes."""
    indptr, indices, data = z[f"{prefix}_indptr"], z[f"{prefix}_indices"], z[f"{prefix}_data"]
    if indptr.ndim != 1 or indptr.shape[0] < 1 or indptr.dtype.kind not in "iu" or indices.dtype.kind not in "iu" \
            or data.dtype.kind != "f":
        raise ValueError(f"{prefix}: indptr, indices and data should be 1-D integer, integer and float arrays")
    matrix = sp.csr_matrix((data, indices, indptr), shape=(indptr.shape[0] - 1, dim))
    matrix.check_format(full_check=True)
    return matrix


def _read_keys(z, prefix: str, n_rows: int) -> np.ndarray:
    keys = z[f"{prefix}_keys"]
    if keys.dtype != np.int64 or keys.shape != (n_rows,) or np.any(np.diff(keys) <= 0):
        raise ValueError(f"{prefix}_keys should be {n_rows} ascending int64 pair keys, one per row")
    return keys
