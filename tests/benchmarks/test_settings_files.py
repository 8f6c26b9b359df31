"""Each benchmark's settings file (benchmarks/configs/<script>.toml) holds exactly the defaults the script had in
code before, the command line still overrides single settings, and --help shows the file's values."""
from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmarks.lib import settings

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# Each module's place in the package: speed/ or experiments/.
MODULES = {"isotropy": "experiments", "end_to_end": "speed", "encoding_speed": "speed", "kernels": "speed",
           "seismic_splade": "speed", "search_speed": "speed", "baselines": "experiments",
           "training_probe": "experiments"}

# The former argparse defaults and in-code constants, verbatim (lists where a comma-separated string was parsed).
FORMER = {
    "isotropy": {"fit_docs": 2_000, "held_out": 1_000, "fit_tokens": 50_000, "flows": True},  # flows: not --no-flows
    # issue 21 added the synthetic index (the 100k real-text index takes ~2 h to encode) and the lookup table;
    # session 16 the table `uhdsearch lookup` now builds (sentences with neighbour pairs, 20 dims a row; was 40)
    "end_to_end": {"n_docs": 100_000, "threads": 2, "query_k": "config", "n_queries": 200, "batch_size": 64,
                   "runtime": "onnx", "model": "out/quickstart/model", "index": "synthetic", "seed": 0,
                   "work_dir": "out/end_to_end", "data_root": "../shared/data", "lookup_summary": "winners",
                   "lookup_keep": 20, "lookup_specials": False, "table_docs": 1000, "lookup_contexts": "sentences",
                   "lookup_neighbours": True,
                   # session 18: the context vote timed beside the table (benchmarks/experiments/lookup_vote.py's choice)
                   "vote_keep": 640, "vote": 1.0, "vote_winners": 40,
                   # session 19: the distilled query student timed beside
                   "student": "models/query-student-minilm-l6-2layers.safetensors"},
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
    "baselines": {"systems": "all", "fast": False},  # fast: a store_true switch
    # in code: torch.set_num_threads(2), EncoderConfig(dim=32_768, wta_k=40, document_max_length=256), 10 % dev
    # with random.Random(0), dev_evaluator's n_documents=1_000, ict_pairs(per_document=1), depth=30, skip=3,
    # TrainingArgs(epochs=1.0, ...), the recipes dict as a TOML table (teacher_negatives: its second element)
    "training_probe": {"threads": 2, "dim": 32_768, "wta_k": 40, "document_max_length": 256, "dev_fraction": 0.1,
                       "dev_documents": 1_000, "seed": 0, "ict_per_document": 1, "teacher_depth": 30,
                       "negatives_skip": 3, "epochs": 1.0, "max_steps": 150, "max_minutes": 4.0, "eval_every": 50,
                       "recipes": {
                           "hinge (Eq. 8, float)": {"teacher_negatives": False},
                           "infonce binary-aware STE": {"teacher_negatives": False, "loss": "infonce",
                                                        "binary_aware": True, "learning_rate": 1e-3},
                           "kl dense teacher + mined negatives (float)": {"teacher_negatives": True, "loss": "kl",
                                                                          "learning_rate": 1e-3},
                           "kl dense teacher, STE, df density": {"teacher_negatives": True, "loss": "kl",
                                                                 "binary_aware": True, "learning_rate": 1e-3,
                                                                 "tau": 0.5, "density_weight": 1e-3,
                                                                 "density": "df"}}},
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
    "baselines": (["--systems", "bm25,dense", "--fast"], {"systems": "bm25,dense", "fast": True}),
    "training_probe": (["--max-steps", "10", "--max-minutes", "0.5"], {"max_steps": 10, "max_minutes": 0.5}),
}


@contextmanager
def loaded(name: str):
    yield importlib.import_module(f"benchmarks.{MODULES[name]}.{name}")


@pytest.fixture(scope="module", params=sorted(FORMER))
def script(request):
    with loaded(request.param) as module:
        yield request.param, module


def test_the_settings_file_holds_the_former_defaults(script):
    name, module = script
    args, path, values = settings.parse_args(module.build_parser(), name, [])
    assert path == BENCHMARKS / "configs" / f"{name}.toml"
    assert values == FORMER[name]
    assert {key: type(value) for key, value in values.items()} == {key: type(v) for key, v in FORMER[name].items()}
    assert all(getattr(args, key) == value for key, value in FORMER[name].items())
    recorded = settings.record(path, values)
    assert recorded == {"command": recorded["command"], "config_file": f"benchmarks/configs/{name}.toml",
                        "settings": values, "uhdsearch_version": recorded["uhdsearch_version"],
                        "git_commit": recorded["git_commit"], "machine": recorded["machine"]}
    assert recorded["machine"]["cpu_capability"] and recorded["machine"]["wta_path"] in ("native", "emulated")


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
    (tmp_path / "extra.toml").write_text("not_a_setting = 1\n" + text)  # before any [table]
    with pytest.raises(SystemExit) as exit_:
        settings.parse_args(module.build_parser(), name, ["--config", str(tmp_path / "extra.toml")])
    assert exit_.value.code == 2
    assert "unknown settings ['not_a_setting']" in capsys.readouterr().err


def test_a_value_outside_an_options_choices_is_refused(tmp_path, capsys):
    text = (BENCHMARKS / "configs" / "end_to_end.toml").read_text().replace('runtime = "onnx"', 'runtime = "tf"')
    (tmp_path / "bad.toml").write_text(text)
    with loaded("end_to_end") as module, pytest.raises(SystemExit):  # its --runtime has choices
        settings.parse_args(module.build_parser(), "end_to_end", ["--config", str(tmp_path / "bad.toml")])
    assert "runtime = 'tf' is not one of ['torch', 'onnx']" in capsys.readouterr().err


def test_help_shows_the_file_values(script, capsys, monkeypatch):
    name, module = script
    monkeypatch.setenv("COLUMNS", "250")  # one line per option
    with pytest.raises(SystemExit) as exit_:
        settings.parse_args(module.build_parser(), name, ["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert f"(default: benchmarks/configs/{name}.toml)" in out
    assert "config: " in out


def test_a_comma_list_option_has_the_shape_of_a_toml_array():
    assert settings.comma_list(int)("1,2") == [1, 2]
    assert settings.comma_list()("uhd,bm25s") == ["uhd", "bm25s"]


def test_training_probe_recipes_are_the_former_in_code_ones():
    with loaded("training_probe") as module:
        _, _, values = settings.parse_args(module.build_parser(), "training_probe", [])
        recipes = module.recipes_of(values["recipes"])
    former = {
        "hinge (Eq. 8, float)": (dict(), False),
        "infonce binary-aware STE": (dict(loss="infonce", binary_aware=True, learning_rate=1e-3), False),
        "kl dense teacher + mined negatives (float)": (dict(loss="kl", learning_rate=1e-3), True),
        "kl dense teacher, STE, df density": (dict(loss="kl", binary_aware=True, learning_rate=1e-3, tau=0.5,
                                                   density_weight=1e-3, density="df"), True),
    }
    assert recipes == former
    assert [list(options) for options, _ in recipes.values()] == [list(o) for o, _ in former.values()]  # JSON order


def test_a_merged_baselines_file_keeps_its_first_settings_or_takes_the_reruns():
    def run(systems, **extra):
        return {"dataset": "scifact", "split": "test", "baseline": "bm25", "n_queries": 300,
                "systems": {s: {"nDCG@10": 0.5} for s in systems}, "config": {"fast": False}, **extra}

    first = {"config_file": "benchmarks/configs/baselines.toml", "settings": {"systems": "all", "fast": False}}
    rerun = {"config_file": "benchmarks/configs/baselines.toml", "settings": {"systems": "dense", "fast": False}}
    with loaded("baselines") as module:
        merged = module.merge_results(run(["bm25", "dense"], **first), run(["dense"], **rerun))
        assert merged["settings"] == first["settings"] and merged["config"]["rerun"] == [["dense"]]
        merged = module.merge_results(run(["bm25", "dense"]), run(["dense"], **rerun))
    assert merged["settings"] == rerun["settings"]


def test_a_result_records_the_command_version_commit_and_cpu(monkeypatch):
    import torch

    import uhdsearch
    from benchmarks.lib.timer import cpu_record

    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / "speed" / "search_speed.py"), "--sizes", "1000", "--seed", "3"])
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", importlib.util.find_spec("benchmarks.speed.search_speed"))
    recorded = settings.record(None, {"seed": 3})
    assert recorded["command"] == "python -m benchmarks.speed.search_speed --sizes 1000 --seed 3"
    assert recorded["config_file"] is None and recorded["uhdsearch_version"] == uhdsearch.__version__
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=BENCHMARKS.parent, capture_output=True, text=True)
    assert recorded["git_commit"].removesuffix("-dirty") == head.stdout.strip()
    assert recorded["machine"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert recorded["machine"]["cpu_model"] == cpu_record()["cpu_model"] != ""
