"""One builder per dense comparison system, all with one signature (the systems of Jung et al. and Luan et al.).

Every builder is

    build_<system>(corpus, queries_train=None, qrels_train=None, backbone_dir=None, states=None,
                   *, max_length=256, show_progress=False, **options) -> a Retriever (search(queries, k) -> Run)

corpus: doc_id -> Document (its order fixes doc numbers); queries_train / qrels_train: labelled training data
(None: Inverse Cloze Task pairs only; untrained systems ignore them); backbone_dir: a local Hugging Face
directory, None for the bundled MiniLM, or an already loaded Backbone (reused, so load it once);
states: TokenStates of the corpus documents from compute_token_states (must include the backbone's last
layer; other layers are ignored) so the backbone runs over the corpus once for all systems.
The experiment registry (`uhdsearch.experiments`) names these systems; this module only builds them.

Trained systems (de-*, me-*) keep the backbone frozen and train the head on cached states (CPU budget).
Flows are fit sequence-wise (on mean-pooled document vectors) unless mode="token".
Unsupervised post-processing (whitening, flows, UHD centering) is fit on `states` unless `fit_states` is given:
out of domain, Jung et al. Table 3 fit it on the source collection and apply it to the target.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch

from uhdsearch.errors import UsageError
from uhdsearch.baselines.dual_encoder import (
    DualEncoder, DualEncoderArgs, DualEncoderHead, build_dual_encoder, embed_states, mean_tokens, train_dual_encoder,
)
from uhdsearch.baselines.flows import NICE, Flow, Glow
from uhdsearch.baselines.multivector import SumOfMaxReranker, build_multivector
from uhdsearch.baselines.whitening import Whitening, pooled_embedder, sample_tokens
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.states import TokenStates, corpus_states
from uhdsearch.training.data import TrainingPair, ict_pairs, pairs_from_qrels
from uhdsearch.types import Document, Qrels, Query

logger = logging.getLogger(__name__)

BackboneArg = Backbone | str | os.PathLike | None
Mode = Literal["sequence", "token"]


def _backbone(backbone_dir: BackboneArg) -> Backbone:
    return backbone_dir if isinstance(backbone_dir, Backbone) else Backbone.from_pretrained(backbone_dir).eval()


def training_pairs(documents: Sequence[Document], queries_train: Sequence[Query] | None, qrels_train: Qrels | None,
                   ict_per_document: int = 1, seed: int = 0) -> list[TrainingPair]:
    """The same kind of data UHD trains on: qrels pairs (if given) plus Inverse Cloze Task pairs of the corpus."""
    rows = {d.doc_id: i for i, d in enumerate(documents)}
    pairs = pairs_from_qrels(list(queries_train), qrels_train, rows) if queries_train and qrels_train else []
    if ict_per_document:
        pairs += ict_pairs(documents, per_document=ict_per_document, seed=seed)
    return pairs


# ------------------------------------------------------------------ untrained dense and its post-processing
def build_dense(corpus, queries_train=None, qrels_train=None, backbone_dir: BackboneArg = None,
                states: TokenStates | None = None, *, max_length: int = 256, show_progress: bool = False) -> DualEncoder:
    """`dense`: the backbone as shipped, mean pooling, cosine, exact search (same scores as DenseRetriever)."""
    return _pooled(corpus, backbone_dir, states, max_length, show_progress, None, None, "dense")


def build_dense_whiten_seq(corpus, queries_train=None, qrels_train=None, backbone_dir: BackboneArg = None,
                           states: TokenStates | None = None, *, max_length: int = 256, show_progress: bool = False,
                           dim: int | None = None, fit_states: TokenStates | None = None) -> DualEncoder:
    """`dense+whiten-seq`: whitening fit on mean-pooled vectors (sequence-wise), then cosine.

    The whitening is fit on `fit_states` (e.g. another collection's documents) if given, else on the corpus.
    """
    backbone, documents, states = setup(corpus, backbone_dir, states, max_length, show_progress)
    whitening = Whitening.fit(pooled_vectors(_fit(states, fit_states), backbone.n_layers), dim)
    return _pooled(documents, backbone, states, max_length, show_progress, None, whitening.transform,
                   "dense+whiten-seq")


def build_dense_whiten_tok(corpus, queries_train=None, qrels_train=None, backbone_dir: BackboneArg = None,
                           states: TokenStates | None = None, *, max_length: int = 256, show_progress: bool = False,
                           dim: int | None = None, fit_tokens: int | None = 500_000,
                           fit_states: TokenStates | None = None) -> DualEncoder:
    """`dense+whiten-tok`: whitening fit on (a sample of) token states, applied before pooling.

    The whitening is fit on `fit_states` (e.g. another collection's documents) if given, else on the corpus.
    """
    backbone, documents, states = setup(corpus, backbone_dir, states, max_length, show_progress)
    whitening = Whitening.fit(sample_tokens(_fit(states, fit_states).layer(backbone.n_layers), fit_tokens), dim)
    return _pooled(documents, backbone, states, max_length, show_progress, whitening.transform, None,
                   "dense+whiten-tok")


def fit_flow(kind: Literal["nice", "glow"], X: torch.Tensor, mode: Mode = "sequence", epochs: int | None = None,
             seed: int = 0, show_progress: bool = False, **flow_options) -> tuple[Flow, list[float]]:
    """A NICE or Glow flow fit by maximum likelihood on the rows of X; returns the flow and its history.

    Token-wise flows default to smaller coupling networks (hidden 256) and fewer epochs: they transform every
    token of the corpus, which a CPU must do in minutes.
    """
    small = mode == "token"
    if kind == "nice":
        flow: Flow = NICE(X.shape[1], **({"hidden": 256, "n_layers": 3} if small else {}) | flow_options, seed=seed)
    elif kind == "glow":
        flow = Glow(X.shape[1], **({"hidden": 256} if small else {}) | flow_options, seed=seed)
    else:
        raise UsageError(f"flow {kind!r}: use 'nice' or 'glow'")
    history = flow.fit(X, epochs=epochs or (3 if small else 10), seed=seed, show_progress=show_progress)
    return flow, history


def _build_dense_flow(kind, corpus, backbone_dir, states, max_length, show_progress, mode: Mode, epochs,
                      fit_tokens, flow_options, fit_states: TokenStates | None = None) -> DualEncoder:
    backbone, documents, states = setup(corpus, backbone_dir, states, max_length, show_progress)
    last, fit = backbone.n_layers, _fit(states, fit_states)
    if mode == "sequence":
        flow, history = fit_flow(kind, pooled_vectors(fit, last), "sequence", epochs, show_progress=show_progress,
                                 **(flow_options or {}))
        token_transform, sequence_transform = None, flow.transform
    elif mode == "token":
        flow, history = fit_flow(kind, sample_tokens(fit.layer(last), fit_tokens), "token", epochs,
                                 show_progress=show_progress, **(flow_options or {}))
        token_transform, sequence_transform = flow.transform, None
    else:
        raise UsageError(f"mode={mode!r}: use 'sequence' or 'token'")
    logger.info("%s (%s-wise): log-likelihood %.1f -> %.1f", kind, mode, history[0], history[-1])
    return _pooled(documents, backbone, states, max_length, show_progress, token_transform, sequence_transform,
                   f"dense+{kind}")


def build_dense_nice(corpus, queries_train=None, qrels_train=None, backbone_dir: BackboneArg = None,
                     states: TokenStates | None = None, *, max_length: int = 256, show_progress: bool = False,
                     mode: Mode = "sequence", epochs: int | None = None, fit_tokens: int = 50_000,
                     flow_options: Mapping[str, Any] | None = None,
                     fit_states: TokenStates | None = None) -> DualEncoder:
    """`dense+nice`: a NICE flow on the backbone's mean-pooled vectors (sequence-wise by default), then cosine.

    The flow is fit on `fit_states` (e.g. another collection's documents) if given, else on the corpus.
    """
    return _build_dense_flow("nice", corpus, backbone_dir, states, max_length, show_progress, mode, epochs, fit_tokens,
                             flow_options, fit_states)


def build_dense_glow(corpus, queries_train=None, qrels_train=None, backbone_dir: BackboneArg = None,
                     states: TokenStates | None = None, *, max_length: int = 256, show_progress: bool = False,
                     mode: Mode = "sequence", epochs: int | None = None, fit_tokens: int = 50_000,
                     flow_options: Mapping[str, Any] | None = None,
                     fit_states: TokenStates | None = None) -> DualEncoder:
    """`dense+glow`: a Glow flow on the backbone's mean-pooled vectors (sequence-wise by default), then cosine.

    The flow is fit on `fit_states` (e.g. another collection's documents) if given, else on the corpus.
    """
    return _build_dense_flow("glow", corpus, backbone_dir, states, max_length, show_progress, mode, epochs, fit_tokens,
                             flow_options, fit_states)


# ------------------------------------------------------------------ trained DE-k and ME-m
def build_de(corpus, queries_train=None, qrels_train=None, backbone_dir: BackboneArg = None,
             states: TokenStates | None = None, *, max_length: int = 256, show_progress: bool = False,
             dim: int | None = 128, pooling: Literal["cls", "mean"] = "mean", args: DualEncoderArgs | None = None,
             ict_per_document: int = 1, head: DualEncoderHead | None = None) -> DualEncoder:
    """`de-<dim>`: projection to `dim` (None: the backbone's width) + LayerNorm, trained on frozen states.

    pooling="mean" (RepBERT) by default because MiniLM was trained for mean pooling; Luan use [CLS].
    head: an already trained head (e.g. `other.embed_query` of a DE built on another collection) is only
    used to index `corpus`, for out-of-domain runs; nothing is trained then.
    """
    backbone, documents, states = setup(corpus, backbone_dir, states, max_length, show_progress)
    if head is not None:
        return build_dual_encoder(documents, backbone, head, states, max_length, f"de-{head.dim}", show_progress)
    args = args or DualEncoderArgs()
    head = DualEncoderHead(backbone.hidden_size, dim, pooling, seed=args.seed)
    pairs = training_pairs(documents, queries_train, qrels_train, ict_per_document, args.seed)
    trained = train_dual_encoder(head, backbone, documents, pairs, args, states, max_length, show_progress)
    logger.info("de-%s: %d steps, loss %.3f -> %.3f", dim, trained.steps, trained.losses[0], trained.losses[-1])
    if args.train_backbone_layers:
        states = None  # the backbone changed: cached states are stale
    return build_dual_encoder(documents, backbone, head, states, max_length, f"de-{dim or 'full'}", show_progress)


def build_me(corpus, queries_train=None, qrels_train=None, backbone_dir: BackboneArg = None,
             states: TokenStates | None = None, *, max_length: int = 256, show_progress: bool = False,
             m: int = 8, dim: int | None = -1, args: DualEncoderArgs | None = None,
             ict_per_document: int = 1, head: DualEncoderHead | None = None) -> DualEncoder:
    """`me-<m>`: the first m token vectors of each document through a trained projection (Luan §5, Eq. 12).

    dim=-1 projects to the backbone's width (Luan: a projection helps ME even at full width); None: LayerNorm only.
    The head is trained with the max-over-m score; the query vector is [CLS]. A given `head` is used as is.
    """
    backbone, documents, states = setup(corpus, backbone_dir, states, max_length, show_progress)
    if head is not None:
        return build_multivector(documents, backbone, head, m, states, max_length, f"me-{m}", show_progress)
    args = args or DualEncoderArgs(n_vectors=m)
    if args.n_vectors != m:
        raise UsageError(f"args.n_vectors={args.n_vectors} differs from m={m}")
    head = DualEncoderHead(backbone.hidden_size, backbone.hidden_size if dim == -1 else dim, "cls", seed=args.seed)
    pairs = training_pairs(documents, queries_train, qrels_train, ict_per_document, args.seed)
    trained = train_dual_encoder(head, backbone, documents, pairs, args, states, max_length, show_progress)
    logger.info("me-%d: %d steps, loss %.3f -> %.3f", m, trained.steps, trained.losses[0], trained.losses[-1])
    if args.train_backbone_layers:
        states = None
    return build_multivector(documents, backbone, head, m, states, max_length, f"me-{m}", show_progress)


# ------------------------------------------------------------------ sum-of-max and its post-processing
def build_sum_of_max(corpus, queries_train=None, qrels_train=None, backbone_dir: BackboneArg = None,
                     states: TokenStates | None = None, *, max_length: int = 256, show_progress: bool = False,
                     first_stage=None, depth: int = 100, transform: Literal["whiten", "nice", "glow"] | None = None,
                     fit_tokens: int = 50_000, fit_states: TokenStates | None = None) -> SumOfMaxReranker:
    """`sum-of-max`: cosine late interaction over last-layer token states, re-ranking a first stage's top `depth`.

    first_stage defaults to BM25 (uhdsearch's BM25Retriever); `transform` adds token-wise post-processing
    (Jung et al. Table 1 applies it to ColBERT), fit on a sample of `fit_tokens` tokens of `fit_states`
    (e.g. another collection's documents) if given, else of the corpus.
    """
    backbone, documents, states = setup(corpus, backbone_dir, states, max_length, show_progress)
    if first_stage is None:
        from uhdsearch.baselines.bm25 import BM25Retriever

        first_stage = BM25Retriever.build(documents, show_progress=False)
    token_transform, name = None, "sum-of-max"
    if transform is not None:
        sample = sample_tokens(_fit(states, fit_states).layer(backbone.n_layers), fit_tokens)
        if transform == "whiten":
            token_transform = Whitening.fit(sample).transform
        else:
            token_transform = fit_flow(transform, sample, "token", show_progress=show_progress)[0].transform
        name = f"sum-of-max+{transform}"
    return SumOfMaxReranker.build(documents, backbone, first_stage, states, token_transform, True, depth,
                                  max_length, name, show_progress)


# ------------------------------------------------------------------ UHD over whitened backbone states
def build_uhd_binary(corpus, queries_train=None, qrels_train=None, backbone_dir: BackboneArg = None,
                     states: TokenStates | None = None, *, max_length: int = 256, show_progress: bool = False,
                     whiten: bool = False, dim: int = 32_768, wta_k: int = 40, seed: int = 0,
                     wta_dtype: Literal["bfloat16", "float32"] = "bfloat16", fit_states: TokenStates | None = None):
    """`uhd-binary` / `uhd-binary+whiten`: the quickstart's untrained, centered WTA head on the last layer.

    With whiten=True the last-layer token states are whitened (fit on the corpus tokens) before the WTA
    layer, for queries and documents alike (UHDEncoder.state_transforms). The quickstart's dev early stopping
    keeps this untrained head, so the pair isolates the effect of whitening. Whitening and centering are fit
    on `fit_states` (e.g. another collection's documents) if given, else on the corpus.
    Returns a Searcher over a binary index held in memory.
    """
    from uhdsearch.encoder.config import EncoderConfig
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.index.inverted import BinaryIndex
    from uhdsearch.search.searcher import Searcher

    backbone, documents, states = setup(corpus, backbone_dir, states, max_length, show_progress)
    config = EncoderConfig(dim=dim, wta_k=wta_k, query_k=None, bucket_layers=(-1,), document_max_length=max_length,
                           seed=seed, wta_dtype=wta_dtype)
    model = UHDEncoder(backbone, config)
    last, fit = backbone.n_layers, _fit(states, fit_states)
    if whiten:
        model.state_transforms[last] = Whitening.fit(sample_tokens(fit.layer(last), 500_000)).transform
    model.center_buckets(fit)
    model.eval()
    encoded = model.encode_states(states, "document", show_progress=show_progress)
    index = BinaryIndex.from_encoding(encoded, [d.doc_id for d in documents], None, model.digest())
    return Searcher(model, index, "binary", max_df=None, length_norm=None)  # the model as it scores


# ------------------------------------------------------------------ helpers
def setup(corpus, backbone_dir: BackboneArg, states: TokenStates | None, max_length: int, show_progress: bool):
    """(backbone, documents, states): the loaded backbone, the corpus as a list, and its token states
    (the given ones, or one backbone pass)."""
    backbone = _backbone(backbone_dir)
    return (backbone, *corpus_states(backbone, corpus, states, max_length, show_progress))


def _fit(states: TokenStates, fit_states: TokenStates | None) -> TokenStates:
    """The states a transform is fit on: `fit_states` if given, else the corpus's own."""
    return states if fit_states is None else fit_states


def pooled_vectors(states: TokenStates, layer: int) -> torch.Tensor:
    """(states.n, hidden) float32 mean-pooled (not normalized) vectors: the sequence representations."""
    return torch.from_numpy(embed_states(mean_tokens, states, layer))


def _pooled(corpus, backbone_dir, states, max_length, show_progress, token_transform, sequence_transform,
            name: str) -> DualEncoder:
    backbone, documents, states = setup(corpus, backbone_dir, states, max_length, show_progress)
    embed = pooled_embedder(token_transform, sequence_transform)
    vectors = embed_states(embed, states, backbone.n_layers)
    return DualEncoder(backbone, embed, [d.doc_id for d in documents], vectors, None, max_length, name)
