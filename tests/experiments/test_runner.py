"""The experiment registry and runner: registration, shared work, memoized runs, UHD and the dense family in and
out of domain, numbers vs evaluate."""
from __future__ import annotations

import functools
import json
import shutil

import numpy as np
import pytest
import torch

from uhdsearch.experiments.builders import build_de
from uhdsearch.baselines.dual_encoder import embed_states
from uhdsearch.baselines.whitening import Whitening
from uhdsearch.evaluation.datasets import load_beir
from uhdsearch.evaluation.metrics import evaluate
from uhdsearch.experiments import SYSTEMS, CachedRetriever, build_system, compare, register, resolve_systems
from uhdsearch.recipes.recipe import Recipe
from uhdsearch.types import Run, ScoredDoc

TINY = Recipe(dim=1024, wta_k=8, ict_per_document=1, max_train_minutes=0.05, eval_every=None,
              document_max_length=64)


def test_resolve_puts_bm25_first_and_rejects_unknown_names():
    assert resolve_systems("bm25-bi, splade-tiny,bm25-bi") == ["bm25", "bm25-bi", "splade-tiny"]
    assert resolve_systems(None) == resolve_systems("all") == list(SYSTEMS)
    with pytest.raises(ValueError, match=r"unknown system\(s\) 'x'; known: bm25, "):
        resolve_systems(["bm25", "x"])


def test_what_a_system_learns_from_is_declared_where_it_registers():
    fitted = {n for n, s in SYSTEMS.items() if s.fits_on_source}
    trained = {n for n, s in SYSTEMS.items() if s.trains_on_source}
    assert fitted == {"dense+whiten-seq", "dense+whiten-tok", "dense+nice", "dense+glow", "sum-of-max+whiten",
                      "sum-of-max+nice", "sum-of-max+glow", "uhd-binary-untrained", "uhd-binary+whiten",
                      "uhd-binary", "uhd-weighted", "uhd-binary-norm", "uhd"}
    assert trained == {"de-32", "de-64", "de-128", "de-256", "de-full", "me-1", "me-4", "me-8", "uhd-binary",
                       "uhd-weighted", "uhd-binary-norm", "uhd"}
    with pytest.raises(ValueError, match="'bm25' is already registered"):
        register("bm25")(lambda ctx: None)


def test_one_line_registers_a_system(mini_data, scifact_mini_dir, tiny_backbone_dir):
    class Constant:
        def search(self, queries, k):
            return Run({q.query_id: [ScoredDoc(next(iter(mini_data.corpus)), 1.0)] for q in queries})

    register("constant-test")(lambda ctx: Constant())
    try:
        report = compare(scifact_mini_dir, "constant-test", backbone=tiny_backbone_dir,
                         show_progress=False)
    finally:
        del SYSTEMS["constant-test"]
    assert list(report.results["systems"]) == ["bm25", "constant-test"]
    assert report.results["systems"]["constant-test"]["R@1000"] < report.results["systems"]["bm25"]["R@1000"]


def test_cached_retriever_cuts_a_larger_run():
    calls = []

    class Counting:
        name = "counting"

        def search(self, queries, k):
            calls.append(k)
            return Run({q.query_id: [ScoredDoc(f"d{i}", float(-i)) for i in range(k)] for q in queries})

    cached = CachedRetriever(Counting())
    queries = {"q": "text"}
    assert cached.search(queries, 5).doc_ids("q") == [f"d{i}" for i in range(5)]
    assert cached.search(queries, 3).doc_ids("q") == ["d0", "d1", "d2"]
    assert cached.search(queries, 8).doc_ids("q")[-1] == "d7"
    assert calls == [5, 8] and cached.name == "counting"


@pytest.fixture(scope="module")
def in_domain(scifact_mini_dir, tiny_backbone_dir):
    return compare(scifact_mini_dir, "uhd-binary,uhd-weighted,hybrid-uhd-bm25",
                   backbone=tiny_backbone_dir, recipe=TINY, max_length=64, show_progress=False)


def test_uhd_numbers_equal_evaluate_of_the_systems(in_domain, mini_data):
    results = in_domain.results
    assert list(results["systems"]) == ["bm25", "uhd-binary", "uhd-weighted", "hybrid-uhd-bm25"]
    for name, system in in_domain.systems.items():
        expected = evaluate(system.retriever.search(mini_data.queries, 1000), mini_data.qrels)
        assert results["systems"][name] == pytest.approx({m: round(v, 4) for m, v in expected.items()}, abs=1e-9)
    # One training run shared by both variants and the hybrid; its time is shared, not any system's.
    assert set(results["shared_seconds"]) >= {"backbone", "uhd-model"}
    assert results["seconds"]["uhd-weighted"]["build"] < results["shared_seconds"]["uhd-model"]
    assert results["config"]["uhd"]["recipe"]["encoder"]["dim"] == 1024
    assert results["config"]["train_data"] == "scifact-mini/train" and results["config"]["in_domain"]
    assert 0.0 <= results["config"]["hybrids"]["hybrid-uhd-bm25"]["weight"] <= 1.0


def test_a_saved_model_is_evaluated_as_it_is(tmp_path, in_domain, mini_data, scifact_mini_dir, tiny_backbone_dir):
    from uhdsearch.encoder.model import UHDEncoder

    trained = in_domain.systems["uhd-binary"].retriever.encoder
    trained.save_pretrained(tmp_path / "model")
    report = compare(scifact_mini_dir, "uhd-binary", backbone=tiny_backbone_dir, recipe=TINY,
                     uhd_model=tmp_path / "model", max_length=64, show_progress=False)
    assert report.results["config"]["uhd"] == {"model": str(tmp_path / "model"), "trained_here": False,
                                               "model_digest": UHDEncoder.from_pretrained(tmp_path / "model").digest()}
    assert "uhd-model" in report.results["shared_seconds"]
    # the same model, the same numbers as the comparison that trained it (no second training run)
    assert report.results["systems"]["uhd-binary"] == in_domain.results["systems"]["uhd-binary"]


def test_out_of_domain_trains_on_the_other_collection(tmp_path, scifact_mini_dir, tiny_backbone_dir):
    target = tmp_path / "target"
    shutil.copytree(scifact_mini_dir, target)
    (target / "qrels" / "train.tsv").unlink()  # like CISI and Medline: test qrels only
    report = compare(target, "uhd-binary,hybrid-uhd-bm25", train_data_dir=scifact_mini_dir,
                     backbone=tiny_backbone_dir, recipe=TINY, max_length=64, show_progress=False)
    config = report.results["config"]
    assert config["in_domain"] is False and config["train_data"] == str(scifact_mini_dir)
    assert config["uhd"]["training_pairs"] > 300  # train qrels pairs and ICT pairs of the other corpus
    assert config["hybrids"]["hybrid-uhd-bm25"]["weight"] == 0.5  # nothing to tune on without a train split
    with pytest.raises(FileExistsError, match="already exists"):
        compare(target, "bm25", out_path=target / "corpus.jsonl")


def test_run_comparison_is_a_deprecated_name_of_compare(tmp_path, scifact_mini_dir):
    from uhdsearch.experiments import run_comparison

    taken = tmp_path / "results.json"
    taken.write_text("{}", encoding="utf-8")
    with pytest.warns(DeprecationWarning, match=r"^uhdsearch\.experiments\.run_comparison is deprecated; call "
                                                r"uhdsearch\.experiments\.compare"):
        with pytest.raises(FileExistsError, match="results.json already exists"):  # compare's own check: forwarded
            run_comparison(scifact_mini_dir, "bm25", out_path=taken)


# ------------------------------------------------------------------ out of domain: learn on the source only
def _split(mini, out):
    """Two disjoint collections cut from scifact-mini: a target (test-judged documents, 100 unjudged ones, test
    qrels) and a source (every other document, train qrels), lines copied byte for byte."""
    lines = (mini / "corpus.jsonl").read_text().splitlines(keepends=True)
    doc_ids = [json.loads(line)["_id"] for line in lines]
    qrels = {s: (mini / "qrels" / f"{s}.tsv").read_text().splitlines(keepends=True) for s in ("test", "train")}
    judged = {s: {row.split("\t")[1] for row in rows[1:]} for s, rows in qrels.items()}
    unjudged = [d for d in doc_ids if d not in judged["test"] | judged["train"]]
    target = (judged["test"] - judged["train"]) | set(unjudged[:100])
    for name, split, keep in (("target", "test", target), ("source", "train", set(doc_ids) - target)):
        (out / name / "qrels").mkdir(parents=True)
        (out / name / "corpus.jsonl").write_text("".join(x for x, d in zip(lines, doc_ids) if d in keep))
        rows = [r for r in qrels[split][1:] if r.split("\t")[1] in keep]
        (out / name / "qrels" / f"{split}.tsv").write_text(qrels[split][0] + "".join(rows))
        shutil.copy(mini / "queries.jsonl", out / name / "queries.jsonl")
    return out / "target", out / "source"


FITTED = "dense+whiten-seq,dense+whiten-tok,uhd-binary+whiten,sum-of-max+whiten,de-32"


@pytest.fixture(scope="module")
def collections(tmp_path_factory, scifact_mini_dir):
    return _split(scifact_mini_dir, tmp_path_factory.mktemp("collections"))


@pytest.fixture(scope="module")
def out_of_domain(collections, tiny_backbone_dir):
    target, source = collections
    return compare(target, FITTED, train_data_dir=source, backbone=tiny_backbone_dir, max_length=64,
                   show_progress=False)


@pytest.fixture(scope="module")
def dense_backbone(tiny_backbone_dir):
    from uhdsearch.encoder.backbone import Backbone

    return Backbone.from_pretrained(tiny_backbone_dir).eval()


@pytest.fixture(scope="module")
def tiny_states(dense_backbone):
    """Documents of a collection, their last-layer states (max_length 64) and mean-pooled vectors."""
    from uhdsearch.baselines.dual_encoder import mean_tokens
    from uhdsearch.encoder.states import compute_token_states

    @functools.cache
    def states(data_dir, split):
        documents = list(load_beir(data_dir, split).corpus.values())
        last = dense_backbone.n_layers
        computed = compute_token_states(dense_backbone, [d.full_text for d in documents], [last], 64,
                                        show_progress=False)
        return documents, computed, torch.from_numpy(embed_states(mean_tokens, computed, last))

    return states


def _unit(x):
    return torch.nn.functional.normalize(torch.as_tensor(x), dim=1)


def test_out_of_domain_fits_whitening_on_the_source_corpus(out_of_domain, collections, tiny_states, dense_backbone):
    target, source = collections
    _, target_states, target_pooled = tiny_states(target, "test")
    source_documents, source_states, source_pooled = tiny_states(source, "train")
    assert not {d.doc_id for d in source_documents} & set(load_beir(target, "test").corpus)
    last = dense_backbone.n_layers
    target_tokens, source_tokens = target_states.layer(last).float(), source_states.layer(last).float()
    systems = {n: s.retriever for n, s in out_of_domain.systems.items()}

    # Sequence-wise: documents of the target through a whitening of the source's mean-pooled vectors.
    from_source = _unit(Whitening.fit(source_pooled).transform(target_pooled))
    from_target = _unit(Whitening.fit(target_pooled).transform(target_pooled))
    entries = torch.from_numpy(systems["dense+whiten-seq"].entries)
    assert torch.allclose(entries, from_source, atol=1e-4)
    assert (entries - from_target).abs().max() > 0.1  # fitting on the target would fail the line above

    # Token-wise: target tokens whitened with the source tokens' statistics, then mean-pooled.
    owner = torch.from_numpy(np.repeat(np.arange(target_states.n), np.diff(target_states.offsets)))
    for fit_tokens, close in ((source_tokens, True), (target_tokens, False)):
        whitened = Whitening.fit(fit_tokens).transform(target_tokens)
        expected = _unit(torch.zeros(target_states.n, whitened.shape[1]).index_add_(0, owner, whitened))
        assert torch.allclose(torch.from_numpy(systems["dense+whiten-tok"].entries), expected, atol=1e-4) is close

    # UHD over whitened states: the whitening's mean is the source tokens' mean, not the target's.
    whitening = systems["uhd-binary+whiten"].encoder.state_transforms[last].__self__
    assert np.allclose(whitening.mean, source_tokens.mean(0).numpy(), atol=1e-4)
    assert np.abs(whitening.mean - target_tokens.mean(0).numpy()).max() > 0.01

    # Sum-of-max re-ranks target documents with token states whitened by the source's statistics.
    reranker = systems["sum-of-max+whiten"]
    whitening = reranker.token_transform.__self__
    assert np.allclose(whitening.mean, source_tokens.mean(0).numpy(), atol=1e-4)
    assert np.abs(whitening.mean - target_tokens.mean(0).numpy()).max() > 0.01
    assert reranker.doc_ids == list(load_beir(target, "test").corpus)

    notes = out_of_domain.results["config"]["dense_family"]
    n_source = len(source_documents)
    for name in ("dense+whiten-seq", "dense+whiten-tok", "uhd-binary+whiten", "sum-of-max+whiten"):
        assert notes[name] == {"fit_on": f"source (source corpus, {n_source:,} documents)"}
    assert out_of_domain.results["shared_seconds"].keys() >= {"backbone-states[2]", "source-states[2]"}


def test_out_of_domain_trains_de_on_the_source_train_split(out_of_domain, collections, tiny_states, dense_backbone):
    target, source = collections
    source_data = load_beir(source, "train")
    _, target_states, _ = tiny_states(target, "test")
    source_documents, source_states, _ = tiny_states(source, "train")
    de = out_of_domain.systems["de-32"].retriever
    expected = build_de(source_documents, source_data.queries, source_data.qrels, dense_backbone, source_states,
                        max_length=64, dim=32).embed_query
    for name, weights in expected.state_dict().items():
        assert torch.equal(de.embed_query.state_dict()[name], weights), name
    assert de.doc_ids == list(load_beir(target, "test").corpus)
    assert np.allclose(de.entries, embed_states(expected, target_states, dense_backbone.n_layers), atol=1e-5)
    assert out_of_domain.results["config"]["dense_family"]["de-32"] == {
        "trained_on": f"source/train qrels + ICT pairs of source (source corpus, {len(source_documents):,} documents)"}


def test_in_domain_dense_family_is_fit_and_trained_on_the_evaluated_corpus(mini_data, scifact_mini_dir,
                                                                           tiny_backbone_dir, dense_backbone,
                                                                           tiny_states):
    """In domain nothing changes: the numbers equal the builders run on the corpus's own states and train split."""
    _, dense_states, _ = tiny_states(scifact_mini_dir, "test")
    names = ["dense+whiten-seq", "dense+whiten-tok", "de-32"]
    report = compare(scifact_mini_dir, names, backbone=tiny_backbone_dir, max_length=64,
                     show_progress=False)
    train = load_beir(scifact_mini_dir, "train")
    for name in names:
        system = build_system(name, mini_data.corpus, train.queries, train.qrels, dense_backbone, dense_states,
                              max_length=64)
        expected = evaluate(system.search(mini_data.queries, 1000), mini_data.qrels)
        assert report.results["systems"][name] == pytest.approx({m: round(v, 4) for m, v in expected.items()},
                                                                abs=1e-9), name
    notes = report.results["config"]["dense_family"]
    assert notes["dense+whiten-tok"] == {"fit_on": "scifact-mini (evaluated corpus, 400 documents)"}
    assert notes["de-32"] == {"trained_on": "scifact-mini/train qrels + ICT pairs of scifact-mini (evaluated corpus, "
                                            "400 documents)"}
