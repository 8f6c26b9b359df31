"""The isotropy table of Jung et al. (Table 1): I(W) and average cosine before and after whitening and flows."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from uhdsearch.experiments.builders import BackboneArg, fit_flow, pooled_vectors, setup
from uhdsearch.baselines.whitening import Whitening, average_cosine, isotropy, sample_tokens
from uhdsearch.encoder.states import TokenStates
from uhdsearch.errors import UsageError


def isotropy_report(corpus, backbone_dir: BackboneArg = None, states: TokenStates | None = None,
                    held_out: Sequence[str] | None = None, *, max_length: int = 256, flows: bool = True,
                    fit_tokens: int = 50_000, batch_texts: int = 32, max_batches: int = 32,
                    show_progress: bool = False) -> dict[str, dict[str, float]]:
    """I(W) (Eq. 3) and average cosine (Eq. 4) before and after each transform, sequence- and token-wise.

    Transforms are fit on the corpus without labels (token-wise on a sample of `fit_tokens` tokens). As in
    Jung et al. §3.2 the metrics are averaged over batches of `batch_texts` texts (token rows: every token of
    the batch's texts; sequence rows: their mean-pooled vectors), over the first `max_batches` full batches of
    the corpus and, when `held_out` texts are given, of those too. Rows are L2-normalized first: the
    retrievers score by cosine, and I(W), a min/max of sums of exponentials, is not scale-invariant (on raw
    whitened states a few outlying tokens decide it; Jung et al.'s values fit unit vectors).

    Returns:
        {"<level>/<method>": {"I(W)", "avg_cos", "texts measured", ["I(W) held-out", "avg_cos held-out",
        "texts measured held-out"], "seconds": fit time}} with level sequence|token, method raw|whiten|nice|glow.
    Raises:
        ValueError: the corpus or `held_out` has fewer than `batch_texts` texts.
    """
    backbone, documents, states = setup(corpus, backbone_dir, states, max_length, show_progress)
    last = backbone.n_layers
    pooled = pooled_vectors(states, last)
    fit = {"sequence": pooled, "token": sample_tokens(states.layer(last), fit_tokens)}
    batches = {"": _metric_batches(states, pooled, last, batch_texts, max_batches)}
    if held_out:
        from uhdsearch.encoder.states import compute_token_states

        other = compute_token_states(backbone, list(held_out), [last], max_length, show_progress=show_progress)
        batches[" held-out"] = _metric_batches(other, pooled_vectors(other, last), last, batch_texts, max_batches)
    report: dict[str, dict[str, float]] = {}
    for level in ("sequence", "token"):
        methods: dict[str, Callable[[], Callable]] = {
            "raw": lambda: (lambda x: x),
            "whiten": lambda: Whitening.fit(fit[level]).transform,
        }
        if flows:
            methods["nice"] = lambda: fit_flow("nice", fit[level], level)[0].transform
            methods["glow"] = lambda: fit_flow("glow", fit[level], level)[0].transform
        for method, make in methods.items():
            start = time.perf_counter()
            transform = make()
            row = {"seconds": round(time.perf_counter() - start, 2)}
            for suffix, per_batch in batches.items():
                row[f"texts measured{suffix}"] = len(per_batch) * batch_texts
                sets = [torch.nn.functional.normalize(transform(batch[level]).detach(), dim=1) for batch in per_batch]
                row[f"I(W){suffix}"] = float(np.mean([isotropy(W) for W in sets]))
                row[f"avg_cos{suffix}"] = float(np.mean([average_cosine(W) for W in sets]))
            report[f"{level}/{method}"] = row
    return report


def _metric_batches(states: TokenStates, pooled: torch.Tensor, layer: int, batch_texts: int,
                    max_batches: int) -> list[dict]:
    """Full consecutive batches of texts: {"token": their token states, "sequence": their `pooled` vectors}.

    Only full batches: I(W) falls with the number of rows (0.61 at 32 unit rows, 0.40 at 2), so a short last
    batch would pull the average down.

    Raises:
        ValueError: batch_texts < 2, max_batches < 1, or fewer than batch_texts texts.
    """
    if batch_texts < 2 or max_batches < 1:
        raise UsageError(f"batch_texts={batch_texts} must be >= 2 and max_batches={max_batches} >= 1")
    if states.n < batch_texts:
        raise UsageError(f"{states.n} texts are fewer than one batch of {batch_texts}")
    tokens = states.layer(layer)
    batches = []
    for lo in range(0, states.n - batch_texts + 1, batch_texts)[:max_batches]:
        rows = slice(int(states.offsets[lo]), int(states.offsets[lo + batch_texts]))
        batches.append({"token": tokens[rows].float(), "sequence": pooled[lo: lo + batch_texts]})
    return batches
