"""The comparison table of issue 3: every system on one BEIR collection, paired t-tests against BM25.

Chooses no default: the comparison table.

Writes benchmarks/results/baselines_<dataset>.json (see uhdsearch.experiments.compare) and prints the table.

    .venv/bin/python -m benchmarks.experiments.baselines                                   # bundled SciFact, every system
    .venv/bin/python -m benchmarks.experiments.baselines --fast --systems bm25,bm25-uni,bm25-bi,splade-tiny,dense,\
        uhd-binary,uhd-weighted,hybrid-uhd-bm25,hybrid-dense-bm25,rrf-uhd-bm25
    .venv/bin/python -m benchmarks.experiments.baselines --data ../shared/data/cisi --train-data src/uhdsearch/data/scifact \
        --systems bm25,dense,dense+whiten-seq,dense+whiten-tok,de-256,uhd-binary,uhd-binary+whiten
        (out of domain: everything trained and fit on SciFact; writes results/baselines_cisi_from_scifact.json)
    .venv/bin/python -m benchmarks.experiments.baselines --systems sum-of-max+nice,dense+nice --merge
        (rerun some systems; their rows replace those in the existing file, the other rows are kept)

Settings (systems, fast) come from benchmarks/configs/baselines.toml (--config); options override single ones.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from benchmarks.lib.settings import RESULTS, parse_args, record
from uhdsearch.evaluation.datasets import bundled_dataset_dir
from uhdsearch.experiments import compare
from uhdsearch.io import write_json



def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None, help="BEIR collection (default: bundled SciFact)")
    parser.add_argument("--train-data", type=Path, default=None, help="out-of-domain training collection")
    parser.add_argument("--systems", help="comma-separated names or 'all'")
    parser.add_argument("--fast", action=argparse.BooleanOptionalAction, help="the quickstart's fast UHD recipe")
    parser.add_argument("--backbone", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="default: results/baselines_<dataset>.json")
    parser.add_argument("--merge", action="store_true",
                        help="replace only the rerun systems' rows in an existing --out file, keep the others")
    return parser


def main() -> None:
    args, config, settings = parse_args(build_parser(), "baselines")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    data = args.data or bundled_dataset_dir("scifact")
    suffix = f"_from_{args.train_data.name}" if args.train_data else ""
    out = args.out or RESULTS / f"baselines_{data.name}{suffix}.json"
    old = json.loads(out.read_text()) if args.merge and out.is_file() else None
    if old is not None and old["dataset"] != data.name:
        raise SystemExit(f"cannot merge: {out} is about {old['dataset']!r}, not {data.name!r}")
    report = compare(data, args.systems, train_data_dir=args.train_data, fast=args.fast,
                            backbone=args.backbone)
    results = {**report.results, **record(config, settings)}
    print(report.format_table())
    if not args.merge:
        write_json(out, results)
    else:
        try:
            write_json(out, results if old is None else merge_results(old, results))
        except SystemExit:
            side = out.with_suffix(".rerun.json")
            write_json(side, results)  # the rerun is not lost
            print(f"kept this run in {side}", file=sys.stderr)
            raise
    print(f"wrote {out}")


UHD_FAMILY = {"uhd-binary", "uhd-weighted", "hybrid-uhd-bm25", "rrf-uhd-bm25"}  # share one trained UHD model


def merge_results(old: dict, new: dict) -> dict:
    """`old` with the systems of `new` replacing or joining its rows; refuses a different collection or setting,
    and a rerun of part of the systems that share the trained UHD model (the rest would keep the old model)."""
    for key in ("dataset", "split", "baseline", "n_queries"):
        if old.get(key) != new.get(key):
            raise SystemExit(f"cannot merge: {key} is {old.get(key)!r} in the file but {new.get(key)!r} in this run")
    rerun_uhd = UHD_FAMILY & set(new["systems"])
    if rerun_uhd and (UHD_FAMILY & set(old["systems"])) - rerun_uhd:
        raise SystemExit(f"cannot merge: rerun all of {sorted(UHD_FAMILY & set(old['systems']))} together "
                         "(they share one trained UHD model)")
    if set(next(iter(old["systems"].values()))) != set(next(iter(new["systems"].values()))):
        raise SystemExit("cannot merge: the two runs report different measures")
    for key in ("in_domain", "train_data", "fast", "backbone", "max_length", "k", "n_documents"):
        if old["config"].get(key) != new["config"].get(key):
            raise SystemExit(f"cannot merge: config {key} differs ({old['config'].get(key)!r} vs "
                             f"{new['config'].get(key)!r})")
    merged = dict(old)
    for key in ("systems", "p_values", "seconds", "shared_seconds"):
        merged[key] = {**old.get(key, {}), **new.get(key, {})}
    config = dict(old["config"])
    for key, value in new["config"].items():
        config[key] = {**config[key], **value} if isinstance(value, dict) and isinstance(config.get(key), dict) \
            else value
    config["rerun"] = config.get("rerun", []) + [sorted(new["systems"])]
    merged["config"] = config
    for key in ("config_file", "settings"):  # the first run's; files written before settings files take the rerun's
        if key in new:
            merged.setdefault(key, new[key])
    return merged


if __name__ == "__main__":
    main()
