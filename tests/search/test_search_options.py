"""SearchOptions: one parse for the CLI, the HTTP app and compare; one resolve for every "auto" rule."""
from __future__ import annotations

import dataclasses
import json

import pytest

from uhdsearch.errors import UsageError
from uhdsearch.search.cascade import Cascade
from uhdsearch.search.options import SearchOptions, cli_spelling

# The same option strings, as a user types them on the command line, in a query string and in compare --search.
STRINGS = {"max_df": "0.5", "length_norm": "0.5", "cascade": "none", "query_k": "30", "bucket_weights": "2",
           "idf": "false"}


def test_presets_and_their_names():
    paper, default = SearchOptions.paper(), SearchOptions.default()
    assert (paper.max_df, paper.cascade, paper.length_norm) == (None, None, None)
    assert (default.max_df, default.cascade, default.length_norm) == ("auto", "auto", "auto")
    assert paper.run_name("binary") == "uhd-binary" and paper.run_name("weighted") == "uhd-weighted"
    assert default.run_name("binary") == "uhd-binary-norm"
    assert SearchOptions(max_df=0.2, idf=True).run_name("binary") == "uhd-binary-idf-df0.2"
    assert SearchOptions(cascade=Cascade(0.2, 5)).run_name("binary") == "uhd-binary-cascade0.2x5"
    with pytest.raises(dataclasses.FrozenInstanceError):
        paper.max_df = 0.3
    assert hash(default) == hash(SearchOptions())  # usable as a key


def test_parse_reads_strings_and_typed_values_alike():
    parsed = SearchOptions.parse(STRINGS)
    assert parsed == SearchOptions(query_k=30, bucket_weights=(2.0,), max_df=0.5, cascade=None, length_norm=0.5)
    typed = {"max_df": 0.5, "length_norm": 0.5, "cascade": None, "query_k": 30, "bucket_weights": [2], "idf": False}
    assert SearchOptions.parse({k: v for k, v in typed.items() if v is not None}, SearchOptions(cascade=None)) == parsed
    assert SearchOptions.parse({"cascade": "0.1:100:probe"}).cascade == Cascade(0.1, 100, forward=False)
    assert SearchOptions.parse({"max_df": None}) == SearchOptions()  # None: not given
    assert SearchOptions.parse({"query_k": "0"}).query_k == 0  # every active dimension
    assert SearchOptions.parse({"length_norm": "none"}, SearchOptions.paper()) == SearchOptions.paper()


@pytest.mark.parametrize("option, bad", [("max_df", "often"), ("max_df", "1.5"), ("length_norm", "3"),
                                         ("cascade", "0.1"), ("query_k", "-1"), ("bucket_weights", "1,a"),
                                         ("idf", "maybe"), ("scoring", "cosine"), ("query_selection", "x")])
def test_errors_name_the_option_as_each_front_end_spells_it(option, bad):
    with pytest.raises(UsageError) as api:
        SearchOptions.parse({option: bad})
    assert str(api.value).startswith(f"{option}={bad!r}: ")
    with pytest.raises(UsageError) as cli:
        SearchOptions.parse({option: bad}, spell=cli_spelling)
    assert str(cli.value).startswith(f"--{option.replace('_', '-')} {bad!r}: ")


def test_unknown_options_and_bad_typed_values_are_refused():
    with pytest.raises(UsageError, match="unknown search option 'maxdf'; known: scoring, query_k"):
        SearchOptions.parse({"maxdf": "0.3"})
    with pytest.raises(UsageError, match="max_df=2.0"):
        SearchOptions(max_df=2.0)
    with pytest.raises(UsageError, match="finite"):
        SearchOptions(bucket_weights=(1.0, float("nan")))
    with pytest.raises(UsageError, match="idf=1"):
        SearchOptions(idf=1)


def test_resolve_holds_the_auto_rules(tiny_encoder_session, mini_encoding, mini_data):
    from uhdsearch.index.impacts import ImpactPlanes
    from uhdsearch.index.inverted import BinaryIndex, WeightedIndex

    ids = list(mini_data.corpus)
    binary = BinaryIndex.from_encoding(mini_encoding, ids, None)
    weighted = WeightedIndex.from_encoding(mini_encoding, ids, None)
    config = tiny_encoder_session.config
    auto = SearchOptions().resolve(binary, config)
    assert (auto.max_df, auto.length_norm, auto.cascade) == (None, 0.3, None)  # 400 documents: no stop dims, exact
    assert auto.bucket_weights == tuple(config.weights) and auto.name == "uhd-binary-norm"
    assert SearchOptions().resolve(weighted, config).length_norm == 0.0  # weighted: L2-normalized already
    assert SearchOptions(idf=True).resolve(binary, config).kernel_scoring == "quantized"
    planes = ImpactPlanes.from_encoding(mini_encoding, ids, 2, 3)
    assert SearchOptions().resolve(planes, config).length_norm == 0.0
    with pytest.raises(UsageError, match="weighted scoring needs a weighted index"):
        SearchOptions(scoring="weighted").resolve(binary, config)
    with pytest.raises(UsageError, match="needs binary scoring"):
        SearchOptions(scoring="weighted", cascade=Cascade()).resolve(weighted, config)
    with pytest.raises(UsageError, match="does not support length_norm"):
        SearchOptions(length_norm=0.5).resolve(planes, config)
    with pytest.raises(UsageError, match="1 bucket weights for 2 buckets"):
        SearchOptions(bucket_weights=(1.0,)).resolve(binary, config)


def test_the_cli_the_http_app_and_compare_parse_and_search_alike(saved_model_and_index, scifact_mini_dir,
                                                                  tiny_backbone_dir, mini_data, cli, tmp_path,
                                                                  monkeypatch):
    from fastapi.testclient import TestClient

    from uhdsearch.experiments import compare
    from uhdsearch.serving.app import create_app
    from uhdsearch.serving.service import SearchService
    from uhdsearch.serving.settings import ServeSettings

    root, model, _ = saved_model_and_index(400)
    parsed = []
    parse = SearchOptions.parse.__func__

    def recording(cls, values, base=None, spell=None):  # the real parse, with what it returned kept
        options = parse(cls, values, base, **({} if spell is None else {"spell": spell}))
        parsed.append(options)
        return options

    monkeypatch.setattr(SearchOptions, "parse", classmethod(recording))
    queries = mini_data.queries[:12]
    with open(tmp_path / "queries.jsonl", "w", encoding="utf-8") as f:
        for q in queries:
            f.write(json.dumps({"_id": q.query_id, "text": q.text}) + "\n")

    flags = [word for key, value in STRINGS.items() if key != "idf"
             for word in (f"--{key.replace('_', '-')}", value)]
    code, out, err = cli(["search", "--model", str(root / "model"), "--index", str(root / "index"), "--queries",
                          str(tmp_path / "queries.jsonl"), "--k", "10", *flags])
    assert code == 0, err
    by_cli = {}
    for line in out.splitlines():
        query_id, _, doc_id, _, score, name = line.split()
        by_cli.setdefault(query_id, []).append((doc_id, float(score)))

    service = SearchService.open(model, root / "index", writable=False)
    with TestClient(create_app(service, ServeSettings()), base_url="http://localhost") as client:
        by_http = {}
        for q in queries:
            response = client.get("/search", params={"q": q.text, "k": 10, **STRINGS})
            assert response.status_code == 200, response.text
            by_http[q.query_id] = [(h["doc_id"], h["score"]) for h in response.json()["results"][0]["hits"]]

    report = compare(scifact_mini_dir, "uhd", backbone=tiny_backbone_dir, uhd_model=root / "model",
                     max_length=model.config.document_max_length, k=10, show_progress=False,
                     search_options=STRINGS)
    run = report.comparison.runs["uhd"]
    by_compare = {q.query_id: [(h.doc_id, h.score) for h in run[q.query_id]] for q in queries}

    assert len(parsed) == 2 + len(queries)  # the CLI once, the app once per request, compare once
    assert set(parsed) == {SearchOptions.parse(STRINGS)}
    assert by_cli == by_http == by_compare and any(by_cli.values())
    assert name == run.name == "uhd-binary-df0.5-ln0.5"
    assert report.results["config"]["search_options"]["max_df"] == 0.5
