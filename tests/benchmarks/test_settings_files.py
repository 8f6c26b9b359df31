"""Each benchmark's settings file (benchmarks/configs/<script>.toml) holds exactly the defaults the script had in
code before, the command line still overrides single settings, and --help shows the file's values."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import settings

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

# The former argparse defaults and in-code constants, verbatim (lists where a comma-separated string was parsed).
FORMER = {
    "isotropy": {"fit_docs": 2_000, "held_out": 1_000, "fit_tokens": 50_000, "flows": True},  # flows: not --no-flows
    "end_to_end": {"n_docs": 100_000, "threads": 2, "query_k": "config", "n_queries": 200, "batch_size": 64,
                   "runtime": "onnx"},
    "encoding_speed": {"n_docs": 256, "doc_length": 256, "repeats": 3, "dims": [32_768, 81_920],  # "32768,81920"
                       # in code: the dtypes looped over, EncoderConfig(wta_k=80, query_k=100), data.queries[:50],
                       # and batches of 32 for the backbone and encode_document
                       "dtypes": ["float32", "bfloat16"], "wta_k": 80, "query_k": 100, "n_queries": 50,
                       "batch_size": 32},
    "kernels": {"n_docs": 100_000, "n_queries": 50, "biases": ["1", "4", "16", "inf"], "repeat": 3,
                "threads": [1, 2],  # in code: `for threads in (1, 2)`
                "weighted": False, "reference": False, "open": False},  # store_true switches
    "seismic_splade": {"n_docs": 100_000, "batch_size": 64,
                       "document_max_length": 128, "query_max_length": 32,  # in code: encoder.encode(max_length=)
                       # in code: dict(search_speed.SEISMIC_BUILD, n_postings=3500) and search_speed.SEISMIC_SEARCH
                       "seismic_build": {"centroid_fraction": 0.1, "summary_energy": 0.4, "doc_cut": 15,
                                         "n_postings": 3500},
                       "seismic_search": [{"query_cut": 20, "heap_factor": 0.7},
                                          {"query_cut": 100, "heap_factor": 0.9},
                                          {"query_cut": 400, "heap_factor": 1.0}]},
    "search_speed": {"max_docs": 1_000_000, "sizes": [10_000, 100_000, 1_000_000],  # SIZES
                     "methods": ["uhd", "scipy", "seismic", "bm25s"], "threads": [1, 2],
                     "warm_up": True,  # not --no-warm-up
                     "n_queries": 0,  # was None; both mean `args.n_queries or (300 up to 100k, 100 beyond)`
                     "seed": 0, "raw_max_gb": 6.0, "seismic_timeout": 600.0, "seismic_mem_gb": 12.0,
                     "seismic_n_postings": [100],
                     "seismic_build": {"centroid_fraction": 0.1, "summary_energy": 0.4, "doc_cut": 15},  # SEISMIC_BUILD
                     "seismic_search": [{"query_cut": 20, "heap_factor": 0.7},  # SEISMIC_SEARCH
                                        {"query_cut": 100, "heap_factor": 0.9},
                                        {"query_cut": 400, "heap_factor": 1.0}]},
}
# One command-line override per script: (argv, setting, parsed value).
OVERRIDE = {
    "isotropy": (["--fit-docs", "1000", "--no-flows"], {"fit_docs": 1000, "flows": False}),
    "end_to_end": (["--runtime", "torch", "--query-k", "100"], {"runtime": "torch", "query_k": "100"}),
    "encoding_speed": (["--dims", "1024"], {"dims": [1024]}),
    "kernels": (["--biases", "2,inf", "--weighted"], {"biases": ["2", "inf"], "weighted": True}),
    "seismic_splade": (["--n-docs", "5000"], {"n_docs": 5000}),
    "search_speed": (["--sizes", "100000", "--methods", "uhd,bm25s", "--no-warm-up", "--n-queries", "30"],
                     {"sizes": [100_000], "methods": ["uhd", "bm25s"], "warm_up": False, "n_queries": 30}),
}


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and numba look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", params=sorted(FORMER))
def script(request):
    yield request.param, load(request.param)
    sys.modules.pop(f"bench_{request.param}", None)
    sys.modules.pop("search_speed", None)  # imported by some scripts; the other benchmark tests load their own


def test_the_settings_file_holds_the_former_defaults(script):
    name, module = script
    args, path, values = settings.parse_args(module.build_parser(), name, [])
    assert path == BENCHMARKS / "configs" / f"{name}.toml"
    assert values == FORMER[name]
    assert {key: type(value) for key, value in values.items()} == {key: type(v) for key, v in FORMER[name].items()}
    assert all(getattr(args, key) == value for key, value in FORMER[name].items())
    assert settings.record(path, values) == {"config_file": f"benchmarks/configs/{name}.toml", "settings": values}


def test_the_command_line_overrides_single_settings(script):
    name, module = script
    argv, changed = OVERRIDE[name]
    _, _, values = settings.parse_args(module.build_parser(), name, argv)
    assert values == {**FORMER[name], **changed}


def test_another_config_file_is_read_and_must_name_every_setting(script, tmp_path, capsys):
    name, module = script
    text = (BENCHMARKS / "configs" / f"{name}.toml").read_text()
    (tmp_path / "same.toml").write_text(text)
    _, path, values = settings.parse_args(module.build_parser(), name, ["--config", str(tmp_path / "same.toml")])
    assert values == FORMER[name] and path == tmp_path / "same.toml"
    assert settings.record(path, values)["config_file"] == str(tmp_path / "same.toml")
    (tmp_path / "extra.toml").write_text(text + "\nnot_a_setting = 1\n")
    with pytest.raises(SystemExit) as exit_:
        settings.parse_args(module.build_parser(), name, ["--config", str(tmp_path / "extra.toml")])
    assert exit_.value.code == 2
    assert "unknown settings ['not_a_setting']" in capsys.readouterr().err


def test_a_value_outside_an_options_choices_is_refused(tmp_path, capsys):
    name, module = "end_to_end", load("end_to_end")  # its --runtime has choices
    sys.modules.pop("bench_end_to_end")
    sys.modules.pop("search_speed", None)
    text = (BENCHMARKS / "configs" / "end_to_end.toml").read_text().replace('runtime = "onnx"', 'runtime = "tf"')
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(SystemExit):
        settings.parse_args(module.build_parser(), name, ["--config", str(tmp_path / "bad.toml")])
    assert "runtime = 'tf' is not one of ['torch', 'onnx']" in capsys.readouterr().err


def test_help_shows_the_file_values(script, capsys, monkeypatch):
    name, module = script
    monkeypatch.setenv("COLUMNS", "250")  # one line per option
    with pytest.raises(SystemExit) as exit_:
        settings.parse_args(module.build_parser(), name, ["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert f"(default: benchmarks/configs/{name}.toml)" in out
    assert "(config: " in out


def test_a_comma_list_option_has_the_shape_of_a_toml_array():
    assert settings.comma_list(int)("1,2") == [1, 2]
    assert settings.comma_list()("uhd,bm25s") == ["uhd", "bm25s"]
