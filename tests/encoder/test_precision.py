"""The WTA product's two paths (encoder/precision.py): the same bfloat16 numbers, hence the same winners and the
same search results, whichever path this CPU takes; the path rule and its override."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from uhdsearch.encoder import precision
from uhdsearch.encoder.backbone import Backbone
from uhdsearch.encoder.model import UHDEncoder
from uhdsearch.encoder.precision import cast_for_product, wta_product
from uhdsearch.encoder.winners import top_winners
from uhdsearch.encoder.wta import WTALayer
from uhdsearch.errors import UsageError
from uhdsearch.index.inverted import BinaryIndex
from uhdsearch.search.searcher import Searcher


@pytest.fixture
def path(monkeypatch):
    """Switch this process's WTA path; the chosen path is restored afterwards."""
    def use(name: str) -> None:
        monkeypatch.setenv(precision.PATH_VARIABLE, name)
        precision.reset_wta_path()
        assert precision.wta_path() == name

    yield use
    monkeypatch.delenv(precision.PATH_VARIABLE, raising=False)
    precision.reset_wta_path()


def _winners(layer: WTALayer, tokens: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    with torch.inference_mode():
        weight, bias = layer.cast_weight(torch.bfloat16)
        z = wta_product(tokens, weight, bias, torch.bfloat16)
        _, dims = top_winners(z, k)
    return z, dims, torch.sort(dims, 1).values


def test_paths_agree_on_real_minilm_states(path, scifact_mini_dir):
    """Real all-MiniLM-L6-v2 token states of SciFact abstracts through a 16,384-dim head: the two paths give the
    same bfloat16 value almost everywhere, and a token's winners differ only where the changed value sat within
    one bfloat16 step of the k-th place (a near-tie broken the other way); their count is bounded and reported."""
    from uhdsearch.evaluation.datasets import load_corpus

    backbone = Backbone.from_pretrained()
    texts = [d.full_text for d in load_corpus(scifact_mini_dir / "corpus.jsonl").values()][:6]
    batch = backbone.tokenize(texts, 64)
    with torch.inference_mode():
        states = backbone(batch["input_ids"], batch["attention_mask"], [backbone.n_layers])[0]
    tokens = states[batch["attention_mask"].bool()]
    layer = WTALayer(backbone.hidden_size, 16_384, seed=1)
    layer.center_(tokens.mean(0))
    k = 80
    path("native")
    z_native, dims_native, sorted_native = _winners(layer, tokens, k)
    path("emulated")
    z_emulated, dims_emulated, sorted_emulated = _winners(layer, tokens, k)
    assert z_native.dtype == z_emulated.dtype == torch.bfloat16
    same_values = float((z_native == z_emulated).float().mean())
    differ = ~(sorted_native == sorted_emulated).all(1)
    print(f"\n{tokens.shape[0]} tokens: {same_values:.5%} of products identical; "
          f"{int(differ.sum())} tokens with other winners")
    assert same_values > 0.999
    assert int(differ.sum()) <= max(2, tokens.shape[0] // 50)  # near-ties are rare
    for t in torch.nonzero(differ).flatten().tolist():
        kth = z_native[t, dims_native[t, k - 1]].float()
        swapped = set(sorted_native[t].tolist()) ^ set(sorted_emulated[t].tolist())
        for d in swapped:  # each swapped dim is one rounding step from the k-th value on some path
            step = max(abs(float(kth)) * 2 ** -7, 1e-30)
            assert abs(float(z_native[t, d]) - float(kth)) <= step or abs(float(z_emulated[t, d]) - float(kth)) <= step


def test_an_index_from_one_path_answers_queries_from_the_other(path, tiny_backbone_dir, tiny_config, mini_data):
    """Documents encoded on the emulated path, queries on the native one (and back): the same top 10."""
    model = UHDEncoder.new(tiny_backbone_dir, tiny_config.replace(wta_dtype="bfloat16")).eval()
    # 150 of the 400: without bfloat16 hardware the native path is ~180x slower than float32 (a minute for all)
    docs = list(mini_data.corpus.values())[:150]
    texts, doc_ids = [d.full_text for d in docs], [d.doc_id for d in docs]
    queries = mini_data.queries
    indexes = {}
    for name in ("emulated", "native"):
        path(name)
        indexes[name] = BinaryIndex.from_encoding(model.encode_document(texts, show_progress=False), doc_ids, None)
    runs = {}
    for query_path in ("emulated", "native"):
        path(query_path)
        for doc_path, index in indexes.items():
            run = Searcher(model, index, "binary", max_df=None).search(queries, k=10)
            runs[doc_path, query_path] = {q.query_id: run.doc_ids(q.query_id) for q in queries}
    reference = runs["emulated", "emulated"]
    for key, run in runs.items():
        differ = [q for q in reference if run[q] != reference[q]]
        assert not differ, f"{key}: other top 10 for {differ}"


def test_the_digest_does_not_depend_on_the_path(path, tiny_backbone_dir, tiny_config):
    model = UHDEncoder.new(tiny_backbone_dir, tiny_config.replace(wta_dtype="bfloat16")).eval()
    path("native")
    native = model.digest()
    model._digest = None
    path("emulated")
    model.encode_document(["a document about vitamin d"], show_progress=False)
    assert model.digest() == native


def test_training_steps_see_bfloat16_numbers_on_both_paths(path):
    """With autograd on, the weight is cast per step: both paths give the winners of the bfloat16 product."""
    torch.manual_seed(0)
    layer = WTALayer(hidden=32, dim=512, seed=2)
    tokens = torch.randn(40, 32)
    reference = torch.addmm(layer.bias.detach().bfloat16(), tokens.bfloat16(), layer.weight.detach().bfloat16().t())
    for name in ("native", "emulated"):
        path(name)
        values, dims = layer(tokens, 8, torch.bfloat16)
        values.sum().backward()  # the sparse backward runs on both
        assert torch.equal(values, torch.gather(reference, 1, dims).float())
        assert layer.weight.grad is not None
        layer.zero_grad()


def test_float32_models_take_neither_path(path):
    x, w, b = torch.randn(4, 8), torch.randn(16, 8), torch.randn(16)
    path("emulated")
    z = wta_product(x, cast_for_product(w, torch.float32), cast_for_product(b, torch.float32), torch.float32)
    assert z.dtype == torch.float32 and torch.allclose(z, torch.addmm(b, x, w.t()))


def test_an_unknown_path_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(precision.PATH_VARIABLE, "fast")
    precision.reset_wta_path()
    try:
        with pytest.raises(UsageError, match="UHDSEARCH_WTA_PATH='fast'"):
            precision.wta_path()
    finally:
        monkeypatch.delenv(precision.PATH_VARIABLE)
        precision.reset_wta_path()


def test_a_cpu_limited_to_avx2_takes_the_emulated_path():
    """torch's dispatch lowered to AVX2 (as on an AVX2-only CPU): no native bfloat16, the emulated path."""
    env = {k: v for k, v in os.environ.items() if k != precision.PATH_VARIABLE}
    env.update(ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2")
    code = ("import torch; from uhdsearch.encoder import precision; "
            "print(torch.backends.cpu.get_cpu_capability(), precision.native_bfloat16(), precision.wta_path())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["AVX2", "False", "emulated"]


def test_emulated_products_round_like_bfloat16_arithmetic(path):
    """Where the float32 sums are exact, the emulated path gives torch's bfloat16 product bit for bit, and its
    inputs are rounded first (1 + 2**-10 is 1 in bfloat16)."""
    x = torch.tensor([[1.0 + 2 ** -10, 2.0], [0.5, -3.0]])
    w = torch.tensor([[1.0, 1.0], [2.0, 0.25], [-1.0, 4.0]])
    b = torch.tensor([0.1, 0.0, -0.3])
    native = torch.addmm(b.bfloat16(), x.bfloat16(), w.bfloat16().t())
    path("emulated")
    emulated = wta_product(x, cast_for_product(w, torch.bfloat16), cast_for_product(b, torch.bfloat16), torch.bfloat16)
    assert emulated.dtype == torch.bfloat16 and torch.equal(emulated, native)
    assert float(emulated[0, 0]) == float(torch.tensor(3.1).bfloat16())


def test_every_wta_product_goes_through_the_one_function():
    """A caller that multiplies a head itself (torch.addmm on its weights) takes neither path's contract: on a CPU
    without bfloat16 hardware its dtypes clash, or it is 7x slower. Only precision.py, and the benchmark that times
    the raw products on purpose, call addmm."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    allowed = {root / "src/uhdsearch/encoder/precision.py", root / "benchmarks/speed/wta_product.py"}
    callers = [str(p.relative_to(root)) for folder in ("src", "benchmarks") for p in (root / folder).rglob("*.py")
               if p not in allowed and "addmm(" in p.read_text(encoding="utf-8")]
    assert callers == []
