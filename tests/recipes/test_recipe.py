"""The training recipe (uhdsearch.recipes.recipe) and its presets: settings, pairs and dev split, training."""
from __future__ import annotations

import dataclasses
import doctest
import importlib

import pytest
import torch

from uhdsearch.encoder.config import EncoderConfig
from uhdsearch.evaluation.datasets import load_beir
from uhdsearch.recipes.presets import FAST, PRESETS, preset
from uhdsearch.recipes.recipe import Recipe, load_train_split, train_on_collection, training_pairs
from uhdsearch.training.trainer import TrainingArgs

# The quickstart's settings: the encoder as before, the training recipe chosen on SciFact dev
# (benchmarks/configs/training_probe_long.toml, "infonce binary-aware STE").
QUICKSTART = dict(dim=32_768, wta_k=40, query_k=None, bucket_layers=(-1,), bucket_weights=None,
                  document_max_length=256, ict_per_document=1, center=True, use_train_qrels=True, epochs=3.0,
                  learning_rate=1e-3, loss="infonce", binary_aware=True, max_steps=450, distill_weight=0.0,
                  hard_negative_depth=0, train_backbone_layers=0, dev_share=0.1, eval_every=50, max_train_minutes=20.0,
                  dev_length_norm=0.3)
FAST_SETTINGS = dict(QUICKSTART, dim=8_192, ict_per_document=1, max_train_minutes=1.0, eval_every=None)


@pytest.mark.parametrize(("name", "expected"), [("quickstart", QUICKSTART), ("fast", FAST_SETTINGS)])
def test_presets_hold_the_chosen_recipe(name: str, expected: dict) -> None:
    recipe = PRESETS[name]
    assert {k: getattr(recipe, k) for k in expected} == expected
    # every other setting is EncoderConfig's and TrainingArgs' own default
    assert recipe.encoder == EncoderConfig().replace(**{k: expected[k] for k in (
        "dim", "wta_k", "query_k", "bucket_layers", "bucket_weights", "document_max_length")})
    assert recipe.training == TrainingArgs(epochs=3.0, learning_rate=1e-3, loss="infonce", binary_aware=True,
                                           max_steps=450, eval_every=expected["eval_every"],
                                           max_minutes=expected["max_train_minutes"])
    assert Recipe() == PRESETS["quickstart"] and Recipe(**FAST) == PRESETS["fast"]
    # the probe config the recipe was chosen with says the same
    import tomllib
    from pathlib import Path

    probe = tomllib.loads((Path(__file__).parents[2] / "benchmarks/configs/training_probe_long.toml").read_text())
    chosen = probe["recipes"]["infonce binary-aware STE"]
    assert (chosen["loss"], chosen["binary_aware"], chosen["learning_rate"]) == (
        PRESETS["quickstart"].loss, PRESETS["quickstart"].binary_aware, PRESETS["quickstart"].learning_rate)
    assert (probe["epochs"], probe["max_steps"], probe["eval_every"], probe["ict_per_document"]) == (
        recipe.epochs, recipe.max_steps, 50, 1)


def test_paper_preset_is_the_papers_a1() -> None:
    paper = PRESETS["paper"]
    assert paper.encoder == EncoderConfig()
    assert (paper.dim, paper.wta_k, paper.query_k, paper.query_max_length, paper.document_max_length) == (
        81_920, 80, 100, 32, 180)
    assert (paper.learning_rate, paper.batch_size, paper.weight_decay, paper.train_backbone_layers) == (
        5e-6, 32, 0.01, -1)
    assert (paper.ict_per_document, paper.center, paper.eval_every, paper.max_minutes) == (0, False, None, None)


def test_compact_is_the_quickstart_with_half_the_head_and_fewer_checks() -> None:
    compact, quickstart = PRESETS["compact"], PRESETS["quickstart"]
    assert (compact.dim, compact.eval_every) == (16_384, 100)
    assert compact.encoder == quickstart.encoder.replace(dim=16_384)
    assert compact.training == dataclasses.replace(quickstart.training, eval_every=100)
    assert dataclasses.replace(compact, dim=32_768, eval_every=50) == quickstart


def test_flat_settings_change_one_part_and_leave_the_preset_alone() -> None:
    recipe = preset("quickstart", dim=1024, wta_k=8, max_train_minutes=0.5, hard_negative_depth=5)
    assert (recipe.encoder.dim, recipe.encoder.wta_k, recipe.training.max_minutes) == (1024, 8, 0.5)
    assert recipe.hard_negative_depth == 5 and recipe.encoder.document_max_length == 256
    assert PRESETS["quickstart"].dim == 32_768
    again = dataclasses.replace(recipe, document_max_length=64)
    assert (again.encoder.document_max_length, again.encoder.dim, again.training.max_minutes) == (64, 1024, 0.5)
    given = Recipe(encoder=EncoderConfig(dim=2048, wta_k=4), training=TrainingArgs(epochs=3.0), wta_k=2)
    assert (given.dim, given.wta_k, given.epochs, given.ict_per_document) == (2048, 2, 3.0, 1)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(TypeError, match=r"unknown Recipe setting\(s\) \['bogus'\]"):
        Recipe(bogus=1)
    with pytest.raises(TypeError, match="seed"):
        Recipe(seed=1)
    with pytest.raises(ValueError, match="wta_k=100"):
        Recipe(dim=64, wta_k=100)
    with pytest.raises(ValueError, match="dev_share"):
        Recipe(dev_share=1.0)
    with pytest.raises(ValueError, match="unknown preset 'nope'; choose one of quickstart, compact, fast, paper"):
        preset("nope")
    with pytest.raises(AttributeError, match="bogus"):
        Recipe().bogus  # noqa: B018


def test_to_json_nests_the_parts_with_lists() -> None:
    settings = Recipe(bucket_layers=(1, 2)).to_json()
    assert settings["encoder"]["bucket_layers"] == [1, 2] and settings["training"]["max_minutes"] == 20.0
    assert settings["ict_per_document"] == 1 and "dim" not in settings


def test_training_pairs_hold_out_the_same_dev_queries(mini_data, scifact_mini_dir) -> None:
    train_data = load_train_split(scifact_mini_dir, "train")
    documents = list(train_data.corpus.values())
    pairs, dev = training_pairs(documents, train_data, Recipe(ict_per_document=0, dev_share=0.25))
    dev_queries, dev_qrels = dev
    assert len(dev_queries) == int(len(train_data.queries) * 0.25)
    assert set(dev_qrels) == {q.query_id for q in dev_queries}
    held_out = {q.text for q in dev_queries}
    assert pairs and not held_out & {p.query for p in pairs}
    assert training_pairs(documents, train_data, Recipe(ict_per_document=0, dev_share=0.25)) == (pairs, dev)
    everything, none = training_pairs(documents, train_data, Recipe(ict_per_document=1, eval_every=None))
    assert none is None and len(everything) > len(pairs)
    assert load_train_split(scifact_mini_dir, "dev") is None and load_train_split(scifact_mini_dir, None) is None


def test_train_on_collection_with_unfrozen_top_layer_and_dev_early_stopping(tiny_encoder, scifact_mini_dir):
    train_data = load_beir(scifact_mini_dir, "train")
    documents = list(train_data.corpus.values())
    top = tiny_encoder.backbone.model.encoder.layer[-1].output.dense.weight.detach().clone()
    recipe = Recipe(dim=1024, wta_k=8, bucket_layers=(1, 2), document_max_length=64, ict_per_document=0,
                    epochs=2.0, learning_rate=1e-3, train_backbone_layers=1, eval_every=2, dev_share=0.25,
                    dev_length_norm=0.0)  # plain-count dev keeps a trained step on this tiny model
    result, n_pairs = train_on_collection(tiny_encoder, documents, train_data, recipe, show_progress=False)
    assert 0 < n_pairs < 45  # a quarter of the train queries is held out for the dev score
    assert len(result.evals) >= 2 and result.best_step is not None
    assert not torch.equal(top, tiny_encoder.backbone.model.encoder.layer[-1].output.dense.weight)


def test_without_qrels_the_dev_split_is_held_out_corpus_queries_judged_by_the_teacher(tiny_encoder, mini_data):
    from uhdsearch.encoder.states import compute_token_states
    from uhdsearch.recipes.recipe import build_teacher, teacher_judged

    documents = list(mini_data.corpus.values())
    recipe = Recipe(ict_per_document=2, dev_share=0.25, eval_every=5, judged_depth=3)
    pairs, dev = training_pairs(documents, None, recipe)
    queries, qrels = dev
    all_texts = {p.query for p in pairs} | {q.text for q in queries}
    assert len(queries) == int(len(all_texts) * 0.25) > 0
    assert not {q.text for q in queries} & {p.query for p in pairs}  # held out, never trained on
    sources = {(p.query, documents[p.doc_row].doc_id) for p in training_pairs(
        documents, None, Recipe(ict_per_document=2, eval_every=None))[0]}
    assert all((q.text, d) in sources for q in queries for d in qrels[q.query_id])  # before judging: the source

    states = compute_token_states(tiny_encoder.backbone, [d.full_text for d in documents],
                                  [tiny_encoder.backbone.n_layers], 64, show_progress=False)
    teacher = build_teacher("dense", tiny_encoder.backbone, documents, states)
    _, judged = teacher_judged(teacher, documents, dev, depth=3)
    for q in queries:
        scores = teacher.scores([q.text], range(len(documents)))[0]
        top = {documents[int(i)].doc_id for i in torch.argsort(scores, descending=True, stable=True)[:3]}
        source = next(iter(qrels[q.query_id]))
        assert judged[q.query_id] == {**{d: 1 for d in top}, source: 2}
    with pytest.raises(ValueError, match="teacher='oracle'"):
        Recipe(teacher="oracle")


def test_an_unlabelled_collection_trains_with_teacher_judged_early_stopping(tiny_encoder, mini_data):
    documents = list(mini_data.corpus.values())
    recipe = Recipe(dim=1024, wta_k=8, document_max_length=64, ict_per_document=2, epochs=1.0, eval_every=3,
                    dev_share=0.2, judged_depth=5)
    result, n_pairs = train_on_collection(tiny_encoder, documents, None, recipe, show_progress=False)
    assert result.evals and result.evals[0][0] == 0  # the untrained head is scored first and competes
    assert result.best_score == max(score for _, score in result.evals)
    assert n_pairs == len(training_pairs(documents, None, recipe)[0])


def test_the_head_and_query_length_are_chosen_together_on_dev_and_ties_keep_the_untrained_head(tiny_encoder):
    import copy

    from uhdsearch.recipes.recipe import choose_head_and_query_length, trainable_state

    untrained = trainable_state(tiny_encoder, 0)
    assert untrained and all(k.startswith("buckets.") for k in untrained)
    with torch.no_grad():
        for p in tiny_encoder.buckets.parameters():
            p.add_(0.5)
    trained = copy.deepcopy(tiny_encoder.buckets.state_dict())

    def head(model):
        now = model.buckets.state_dict()
        return "trained" if all(torch.equal(now[k], trained[k]) for k in now) else "untrained"

    def score(model):  # the trained head at 64 tokens is best
        return {("trained", 64): 0.9, ("untrained", 128): 0.8}.get((head(model), model.config.query_max_length), 0.5)

    chosen = choose_head_and_query_length(tiny_encoder, untrained, score, (128, 32, 64))
    assert (chosen["head"], chosen["query_max_length"], chosen["dev"]) == ("trained", 64, 0.9)
    assert (head(tiny_encoder), tiny_encoder.config.query_max_length) == ("trained", 64)
    assert [(r["head"], r["query_max_length"]) for r in chosen["tried"]] == [
        (h, n) for h in ("untrained", "trained") for n in (32, 64, 128)]

    chosen = choose_head_and_query_length(tiny_encoder, untrained, lambda model: 0.5, (64, 32))  # all equal
    assert (chosen["head"], chosen["query_max_length"]) == ("untrained", 32) == (head(tiny_encoder),
                                                                               tiny_encoder.config.query_max_length)
    with pytest.raises(ValueError, match="query_lengths"):
        Recipe(query_lengths=(32, 0))


def test_dev_teacher_judges_the_dev_split_whatever_teacher_distils(tiny_encoder, mini_data):
    import copy

    documents = list(mini_data.corpus.values())
    base = dict(dim=1024, wta_k=8, document_max_length=64, ict_per_document=1, eval_every=1, max_steps=1,
                dev_share=0.2, judged_depth=5, loss="kl")
    step0 = {}
    for teacher, dev_teacher in (("dense", None), ("sum-of-max", "dense"), ("sum-of-max", None)):
        result, _ = train_on_collection(copy.deepcopy(tiny_encoder), documents, None,
                                        Recipe(teacher=teacher, dev_teacher=dev_teacher, **base), show_progress=False)
        step0[teacher, dev_teacher] = result.evals[0][1]  # the same untrained head, judged by the dev teacher
    assert step0["sum-of-max", "dense"] == step0["dense", None]
    assert step0["sum-of-max", None] != step0["dense", None]  # the judge matters: the dev scores are not comparable
    with pytest.raises(ValueError, match="dev_teacher='oracle'"):
        Recipe(dev_teacher="oracle")


def test_dev_length_norm_scores_the_dev_split_as_search_does(tiny_encoder, mini_data):
    from uhdsearch.evaluation.metrics import evaluate
    from uhdsearch.index.inverted import BinaryIndex
    from uhdsearch.search.searcher import Searcher
    from uhdsearch.recipes.recipe import dev_evaluator

    documents = list(mini_data.corpus.values())
    queries = mini_data.queries[:20]
    dev = (queries, {q.query_id: mini_data.qrels[q.query_id] for q in queries})
    plain, normalized = (dev_evaluator(None, documents, dev, length_norm=a)(tiny_encoder) for a in (0.0, 1.0))
    index = BinaryIndex.from_encoding(tiny_encoder.encode_document([d.full_text for d in documents],
                                                                   show_progress=False),
                                      [d.doc_id for d in documents], None)
    want = {a: evaluate(Searcher(tiny_encoder, index, "binary", max_df=None, length_norm=a).search(queries, k=100),
                        dev[1], ["nDCG@10"])["nDCG@10"] for a in (None, 1.0)}
    assert (plain, normalized) == (want[None], want[1.0]) and plain != normalized
    assert Recipe().dev_length_norm == 0.3  # the search default's alpha: the quickstart chooses on it
    with pytest.raises(ValueError, match="length_norm=-1"):
        Recipe(dev_length_norm=-1)
