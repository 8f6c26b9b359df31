"""TrainingArgs and the training loop (optimizer, schedule, accumulation, checkpoints, eval hook).

Never defines a loss (see losses.py). Two paths: while the lower backbone layers are frozen (the heads alone, or
the top N layers with them) the token states of every text are computed once, at the buckets or at the top layers'
input (encoder/top_layers.py), and each step runs only what trains; with the whole backbone training, texts go
through all of it each step.
"""
from __future__ import annotations

import copy
import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import torch
from tqdm.auto import tqdm

from uhdsearch.errors import UsageError
from uhdsearch.encoder.states import TokenStates, compute_token_states
from uhdsearch.encoder.top_layers import cut_layer, input_layers
from uhdsearch.training.binary import Estimator, annealed_tau, binary_relevance, scale_rows
from uhdsearch.training.data import TrainingPair, remove_span, unique_document_batches
from uhdsearch.training.losses import (distillation, document_frequency_penalty, flops, hinge_in_batch, infonce,
                                       margin_mse)
from uhdsearch.training.negatives import positives_by_query
from uhdsearch.types import Document

__all__ = ["TeacherScorer", "TrainingArgs", "TrainingResult", "train"]

LossName = Literal["hinge", "infonce", "kl", "margin_mse"]

logger = logging.getLogger(__name__)


class TeacherScorer(Protocol):
    """What the loop asks of a teacher (implementations: recipes/teachers.py): scores of texts x corpus rows."""

    name: str

    def scores(self, queries: Sequence[str], doc_rows: Sequence[int]) -> torch.Tensor: ...


@dataclass(frozen=True)
class TrainingArgs:
    """Training hyperparameters; defaults are the quickstart recipe (frozen backbone, see README)."""

    epochs: float = 1.0
    batch_size: int = 32  # A.1
    learning_rate: float = 1e-4  # A.1 uses 5e-6 for full fine-tuning; a head alone needs more
    weight_decay: float = 0.01  # A.1
    warmup_ratio: float = 0.1  # A.1 warms up over 2,000 of ~300k steps; here a share of a short run
    grad_accumulation: int = 1
    margin: float = 1.0  # Eq. 8
    train_backbone_layers: int = 0  # 0 frozen, N top layers (on cached lower-layer states), -1 all
    backbone_learning_rate: float | None = None  # lr of the trained backbone layers (None: learning_rate)
    distill_weight: float = 0.0  # listwise KL to a dense teacher's in-batch scores (0 = paper's loss only)
    student_temperature: float = 0.05
    teacher_temperature: float = 0.05
    loss: LossName = "hinge"  # hinge = Eq. 8; kl and margin_mse need a teacher, margin_mse hard negatives too
    teacher_scale: float = 1.0  # teacher scores x this before MarginMSE (student scores lie in [0, 1])
    binary_aware: bool = False  # score by the binarized buckets' overlap (training/binary.py), as deployed
    binary_estimator: Estimator = "ste"
    tau: float | None = None  # relaxation temperature (rows scaled to max 1); None with "ste" = identity backward
    tau_end: float | None = None  # anneal tau geometrically to this by the last step
    density_weight: float = 0.0  # x the density penalty of the batch's document buckets
    density: Literal["flops", "df"] = "flops"  # df needs tau
    max_steps: int | None = None
    # Frozen backbone: train on each document's first N token states (None: all of them). The head's product
    # over document tokens is most of a step; dev checks and the index still read whole documents.
    document_tokens: int | None = None
    max_minutes: float | None = None  # stop early when a time budget runs out
    eval_every: int | None = None  # steps between eval hook calls; the best state is kept
    remine_every: int | None = None  # with a `remine` hook: new hard negatives at step 0 and every N steps (ANCE)
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 2:
            raise UsageError(f"batch_size={self.batch_size} must be at least 2 (in-batch negatives)")
        if self.learning_rate <= 0:
            raise UsageError(f"learning_rate={self.learning_rate} must be positive")
        if self.backbone_learning_rate is not None and self.backbone_learning_rate <= 0:
            raise UsageError(f"backbone_learning_rate={self.backbone_learning_rate} must be positive")
        if self.epochs <= 0:
            raise UsageError(f"epochs={self.epochs} must be positive")
        if self.grad_accumulation < 1:
            raise UsageError(f"grad_accumulation={self.grad_accumulation} must be >= 1")
        if self.distill_weight < 0:
            raise UsageError(f"distill_weight={self.distill_weight} must be >= 0")
        if self.loss not in ("hinge", "infonce", "kl", "margin_mse"):
            raise UsageError(f"loss={self.loss!r}; choose 'hinge', 'infonce', 'kl' or 'margin_mse'")
        if self.binary_estimator not in ("ste", "relaxed"):
            raise UsageError(f"binary_estimator={self.binary_estimator!r}; choose 'ste' or 'relaxed'")
        if self.density not in ("flops", "df"):
            raise UsageError(f"density={self.density!r}; choose 'flops' or 'df'")
        if self.density_weight < 0:
            raise UsageError(f"density_weight={self.density_weight} must be >= 0")
        if self.tau is not None and self.tau <= 0 or self.tau_end is not None and self.tau_end <= 0:
            raise UsageError(f"tau={self.tau}, tau_end={self.tau_end} must be positive")
        needs_tau = (self.binary_aware and self.binary_estimator == "relaxed") or \
            (self.density_weight > 0 and self.density == "df")
        if needs_tau and self.tau is None:
            raise UsageError("the relaxed estimator and the df density penalty need a tau (e.g. tau=0.1)")
        if self.remine_every is not None and self.remine_every < 1:
            raise UsageError(f"remine_every={self.remine_every} must be >= 1 (steps) or None")
        if self.document_tokens is not None and self.document_tokens < 1:
            raise UsageError(f"document_tokens={self.document_tokens} must be >= 1 or None")
        if self.tau_end is not None and self.tau is None:
            raise UsageError("tau_end needs a starting tau")


@dataclass
class TrainingResult:
    steps: int = 0
    seconds: float = 0.0
    losses: list[float] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)
    best_step: int | None = None
    best_score: float | None = None
    selection: dict = field(default_factory=dict)  # what was chosen on dev after the loop (recipes/recipe.py)
    remined_at: list[int] = field(default_factory=list)  # steps at which the `remine` hook gave new negatives
    planned_steps: int = 0  # the learning-rate schedule's length, from the epochs and max_steps
    out_of_time: bool = False  # max_minutes stopped the loop before planned_steps: the model depends on the CPU's speed


def train(
    model,
    documents: Sequence[Document],
    pairs: Sequence[TrainingPair],
    args: TrainingArgs = TrainingArgs(),
    document_states: TokenStates | None = None,
    query_states: TokenStates | None = None,
    hard_negatives: Sequence[int | None] | None = None,
    teacher: TeacherScorer | None = None,
    eval_fn: Callable[[object], float] | None = None,
    show_progress: bool = True,
    remine: Callable[[object], Sequence[int | None]] | None = None,
) -> TrainingResult:
    """Train `model` (a UHDEncoder) in place on (query, positive) pairs with in-batch negatives.

    Args:
        documents: the corpus as a list; pairs refer to its rows.
        document_states: backbone states of `documents` (frozen backbone only); computed here if None.
        query_states: states of sorted({p.query for p in pairs}) in that order (frozen only), to share across runs.
        hard_negatives: one document row (or None) per pair, appended as extra negatives (e.g. teacher-mined,
            negatives.teacher_negatives).
        teacher: any teachers.TeacherScorer (wrap in CachedTeacher to score each pair once); the target of
            loss="kl" and "margin_mse", and of the `distill_weight` x KL term added to any loss.
        eval_fn: called every `eval_every` steps with the model; higher is better; the best weights are kept.
        remine: called with the model at step 0 and every `args.remine_every` steps; returns one negative row (or
            None) per pair that replaces `hard_negatives` (ANCE; e.g. recipes/mining.ModelMiner).
    Raises:
        ValueError: no pairs, hard_negatives of the wrong length, or a loss without what it needs.
    """
    if not pairs:
        raise UsageError("no training pairs: check the qrels split or the corpus for ICT")
    if hard_negatives is not None and len(hard_negatives) != len(pairs):
        raise UsageError(f"{len(hard_negatives)} hard negatives for {len(pairs)} pairs")
    if args.distill_weight > 0 and teacher is None:
        raise UsageError("distill_weight > 0 needs a teacher")
    if args.loss in ("kl", "margin_mse") and teacher is None:
        raise UsageError(f"loss={args.loss!r} needs a teacher")
    if remine is not None and not args.remine_every:
        raise UsageError("a remine hook needs args.remine_every (steps between re-minings)")
    if args.loss == "margin_mse" and hard_negatives is None and remine is None:
        raise UsageError("loss='margin_mse' needs hard_negatives (one per pair)")
    torch.manual_seed(args.seed)
    n_top = args.train_backbone_layers
    frozen = 0 <= n_top < model.backbone.n_layers  # lower layers frozen: their states are computed once
    if args.document_tokens and not frozen:
        raise UsageError("document_tokens cuts cached token states: it needs train_backbone_layers below the "
                         "backbone's depth")
    model.backbone.set_trainable_layers(n_top)
    negative_of = {id(p): n for p, n in zip(pairs, hard_negatives)} if hard_negatives is not None else {}
    positives = positives_by_query(pairs)
    if frozen:
        layers = model.layers if n_top == 0 else input_layers(model.layers, cut_layer(model.backbone, n_top))
        document_states = document_states.select(layers) if document_states is not None else compute_token_states(
            model.backbone, [d.full_text for d in documents], layers, model.config.document_max_length,
            show_progress=show_progress, desc="backbone documents")
        if args.document_tokens:
            document_states = document_states.truncated(args.document_tokens)
        unique_queries = sorted({p.query for p in pairs})
        if query_states is None:
            query_states = compute_token_states(model.backbone, unique_queries, layers, model.config.query_max_length,
                                                show_progress=show_progress, desc="backbone queries")
        elif query_states.n != len(unique_queries):
            raise UsageError(f"query_states cover {query_states.n} texts; the pairs have {len(unique_queries)} queries")
        query_states = query_states.select(layers)
        query_row = {q: i for i, q in enumerate(unique_queries)}

    n_epochs = math.ceil(args.epochs)
    per_epoch = len(unique_document_batches(pairs, args.batch_size, args.seed))
    total_steps = max(1, int(per_epoch * args.epochs) // args.grad_accumulation)
    if args.max_steps:
        total_steps = min(total_steps, args.max_steps)
    backbone = [p for p in model.backbone.parameters() if p.requires_grad]
    in_backbone = {id(p) for p in backbone}
    heads = [p for p in model.parameters() if p.requires_grad and id(p) not in in_backbone]
    groups = [{"params": heads}] + ([{"params": backbone, "lr": args.backbone_learning_rate or args.learning_rate}]
                                    if backbone else [])
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, weight_decay=args.weight_decay)
    warmup = int(args.warmup_ratio * total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / max(1, warmup) if s < warmup else max(0.0, (total_steps - s) / max(1, total_steps - warmup))
    )
    result = TrainingResult(planned_steps=total_steps)
    best_state = None
    start = time.perf_counter()
    model.train()
    if args.eval_every and eval_fn:
        best_state = _evaluate(model, eval_fn, result, best_state)  # step 0: training must beat the start
    if remine is not None:
        negative_of = _remine(model, remine, pairs, result)
    bar = tqdm(total=total_steps, desc="train", unit="step", disable=not show_progress)
    micro = 0
    done = False
    for epoch in range(n_epochs):
        optimizer.zero_grad(set_to_none=True)  # a partial accumulation never leaks into the next epoch
        micro = 0
        for batch in unique_document_batches(pairs, args.batch_size, args.seed + epoch):
            rows = [p.doc_row for p in batch]
            extra = [negative_of.get(id(p)) for p in batch]
            extra = [r for r in extra if r is not None and r not in rows]
            extra = list(dict.fromkeys(extra))
            if frozen:
                drop = _drop_mask(document_states, batch, documents)
                q = model.forward_states(query_states, [query_row[p.query] for p in batch])
                d = model.forward_states(document_states, rows + extra, drop=drop)
            else:
                q = model([p.query for p in batch], "query")
                texts = [remove_span(documents[p.doc_row].full_text, p.drop) for p in batch]
                d = model(texts + [documents[r].full_text for r in extra], "document")
            columns = rows + extra
            ignore = torch.tensor([[j != i and columns[j] in positives[p.query] for j in range(len(columns))]
                                   for i, p in enumerate(batch)])
            tau = annealed_tau(result.steps, total_steps, args.tau, args.tau_end) if args.tau else None
            if args.binary_aware:
                scores = binary_relevance(q, d, model.config.weights, tau, args.binary_estimator)
            else:
                scores = model.relevance(q, d)
            loss = _main_loss(args, scores, ignore, batch, columns, negative_of, teacher)
            if args.distill_weight > 0:
                target = teacher.scores([p.query for p in batch], rows + extra)
                loss = loss + args.distill_weight * distillation(scores, target, args.student_temperature,
                                                                  args.teacher_temperature)
            if args.density_weight > 0:
                # FLOPS on unit rows would reward spreading a text over more dims (sum_j x_j^2 is fixed at 1):
                # rows are scaled to max 1 first, so the penalty grows with the number of active dims.
                penalty = sum(flops(scale_rows(v)) if args.density == "flops" else document_frequency_penalty(v, tau)
                              for v in d)
                loss = loss + args.density_weight * penalty
            (loss / args.grad_accumulation).backward()
            micro += 1
            if micro % args.grad_accumulation:
                continue
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            result.steps += 1
            result.losses.append(float(loss.detach()))
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(result.losses[-20:]):.4f}", lr=f"{scheduler.get_last_lr()[0]:.2e}",
                            **({"best_dev": f"{result.best_score:.4f}"} if result.best_score is not None else {}))
            if args.eval_every and eval_fn and result.steps % args.eval_every == 0:
                best_state = _evaluate(model, eval_fn, result, best_state)
            if remine is not None and result.steps % args.remine_every == 0 and result.steps < total_steps:
                negative_of = _remine(model, remine, pairs, result)
            if args.checkpoint_dir and args.checkpoint_every and result.steps % args.checkpoint_every == 0:
                model.save_pretrained(Path(args.checkpoint_dir) / f"step-{result.steps}", overwrite=True)
            minutes = (time.perf_counter() - start) / 60
            if result.steps >= total_steps or (args.max_minutes and minutes >= args.max_minutes):
                result.out_of_time = result.steps < total_steps
                done = True
                break
        if done:
            break
    bar.close()
    if result.out_of_time:  # said aloud: a slower CPU silently getting a less trained model would mislead
        tqdm.write(f"training stopped at step {result.steps} of {total_steps}: its {args.max_minutes:g}-minute budget "
                   "(max_minutes) ran out", file=sys.stderr)
    if eval_fn and args.eval_every:
        if result.evals[-1][0] != result.steps:
            best_state = _evaluate(model, eval_fn, result, best_state)
        if best_state is not None:
            model.load_state_dict(best_state)
            tqdm.write(f"kept the weights of step {result.best_step} (dev score {result.best_score:.4f})",
                       file=sys.stderr)
    model.eval()
    result.seconds = time.perf_counter() - start
    return result


def _main_loss(args: TrainingArgs, scores: torch.Tensor, ignore: torch.Tensor, batch: Sequence[TrainingPair],
               columns: list[int], negative_of: dict[int, int | None], teacher) -> torch.Tensor:
    if args.loss == "hinge":
        return hinge_in_batch(scores, args.margin, ignore)
    if args.loss == "infonce":
        return infonce(scores, args.student_temperature, ignore)
    target = teacher.scores([p.query for p in batch], columns).to(scores.dtype)
    if args.loss == "kl":
        return distillation(scores, target, args.student_temperature, args.teacher_temperature)
    # margin_mse: (query, its positive, its own hard negative) triples of the batch
    triples = [(i, columns.index(negative_of[id(p)])) for i, p in enumerate(batch)
               if negative_of.get(id(p)) is not None and negative_of[id(p)] in columns]
    if not triples:
        return scores.sum() * 0.0
    i, j = (torch.tensor(t) for t in zip(*triples))
    return margin_mse(scores[i, i], scores[i, j], args.teacher_scale * target[i, i], args.teacher_scale * target[i, j])


def _remine(model, remine, pairs: Sequence[TrainingPair], result: TrainingResult) -> dict[int, int | None]:
    model.eval()
    negatives = list(remine(model))
    model.train()
    if len(negatives) != len(pairs):
        raise UsageError(f"the remine hook gave {len(negatives)} negatives for {len(pairs)} pairs")
    result.remined_at.append(result.steps)
    return {id(p): n for p, n in zip(pairs, negatives)}


def _evaluate(model, eval_fn, result: TrainingResult, best_state):
    model.eval()
    start = time.perf_counter()
    score = float(eval_fn(model))
    model.train()
    result.evals.append((result.steps, score))
    tqdm.write(f"step {result.steps}: dev score {score:.4f} ({time.perf_counter() - start:.1f} s)", file=sys.stderr)
    if result.best_score is None or score > result.best_score:
        result.best_score, result.best_step = score, result.steps
        return copy.deepcopy({k: v for k, v in model.state_dict().items()})
    return best_state


def _drop_mask(states: TokenStates, batch: Sequence[TrainingPair], documents: Sequence[Document]) -> np.ndarray | None:
    """Tokens of each ICT pair's query sentence, to leave out of its positive passage."""
    if all(p.drop is None for p in batch):
        return None
    drop = np.zeros(states.char_spans.shape[0], dtype=bool)
    for p in batch:
        if p.drop is None:
            continue
        lo, hi = int(states.offsets[p.doc_row]), int(states.offsets[p.doc_row + 1])
        spans = states.char_spans[lo:hi]
        drop[lo:hi] = (spans[:, 1] > p.drop[0]) & (spans[:, 0] < p.drop[1]) & (spans[:, 1] > spans[:, 0])
    return drop
