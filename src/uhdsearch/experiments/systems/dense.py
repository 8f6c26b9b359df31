"""Dense systems: the backbone as shipped, trained DE-k and ME-m heads, sum-of-max, whitening and flows.

All but `dense` itself are the common-signature builders of `uhdsearch.experiments.builders`, registered
with what they learn from (see `family.register_family`).
"""
from __future__ import annotations

from uhdsearch.experiments import builders as lib
from uhdsearch.experiments.context import SystemContext
from uhdsearch.experiments.registry import BASELINE, register
from uhdsearch.experiments.systems.family import register_family
from uhdsearch.types import Retriever


@register("dense", standalone=lib.build_dense)
def _dense(ctx: SystemContext) -> Retriever:
    from uhdsearch.baselines.dense import DenseRetriever

    return DenseRetriever.build(ctx.data.corpus, backbone=ctx.backbone, states=ctx.document_states(),
                                max_length=ctx.max_length, show_progress=False)


# DE-k (Luan et al.): a projection to k dimensions; de-full keeps the backbone's width.
for _dim in (32, 64, 128, 256, None):
    register_family(f"de-{_dim or 'full'}", lib.build_de, trains_on_source=True, dim=_dim)
# ME-m (Luan et al. Eq. 12): the first m token vectors of each document.
for _m in (1, 4, 8):
    register_family(f"me-{_m}", lib.build_me, trains_on_source=True, m=_m)

# Late interaction re-ranking BM25's candidates, raw and with token-wise post-processing (Jung et al. Table 1).
register_family("sum-of-max", lib.build_sum_of_max, first_stage=BASELINE)
for _transform in ("whiten", "nice", "glow"):
    register_family(f"sum-of-max+{_transform}", lib.build_sum_of_max, fits_on_source=True, first_stage=BASELINE,
                    transform=_transform)

# Mean-pooled vectors through whitening or a flow (Jung et al. Table 3).
register_family("dense+whiten-seq", lib.build_dense_whiten_seq, fits_on_source=True)
register_family("dense+whiten-tok", lib.build_dense_whiten_tok, fits_on_source=True)
register_family("dense+nice", lib.build_dense_nice, fits_on_source=True)
register_family("dense+glow", lib.build_dense_glow, fits_on_source=True)
