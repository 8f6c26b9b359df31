"""Isotropy of MiniLM's representations before and after whitening, NICE and Glow (Jung et al. Table 1).

Chooses no default: a measurement (whitening and flows stay systems of the comparison, off by default).

I(W) (their Eq. 3; 1 = isotropic) and the average cosine (Eq. 4; 0 = isotropic), sequence-wise (mean-pooled
vectors, what `dense` indexes) and token-wise (last-layer token states, what `sum-of-max` and UHD's WTA layer
read). Each transform is fit without labels on the first documents of the corpus and measured on those and
on held-out documents (the next ones in corpus order). Prints a table and writes
benchmarks/results/isotropy_<dataset>.json.

    .venv/bin/python -m benchmarks.experiments.isotropy                                 # SciFact: fit 2,000, held out 1,000
    .venv/bin/python -m benchmarks.experiments.isotropy --data ../shared/data/cisi --fit-docs 1000 --held-out 460

Settings (sizes, flows) come from benchmarks/configs/isotropy.toml (--config); options override single ones.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.lib.settings import RESULTS, parse_args, record
from uhdsearch.evaluation.datasets import bundled_dataset_dir, load_beir
from uhdsearch.io import write_json
from uhdsearch.studies.isotropy import isotropy_report



def show(row: dict, key: str, spec: str) -> str:
    return format(row[key], spec) if key in row else "-"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=None, help="BEIR collection (default: bundled SciFact)")
    parser.add_argument("--fit-docs", type=int, help="fit on the first N documents")
    parser.add_argument("--held-out", type=int, help="then measure on the next N too")
    parser.add_argument("--fit-tokens", type=int, help="token sample for the token-wise fits")
    parser.add_argument("--flows", action=argparse.BooleanOptionalAction,
                        help="NICE and Glow too (--no-flows: whitening only, seconds instead of minutes)")
    return parser


def main() -> None:
    args, config, settings = parse_args(build_parser(), "isotropy")
    data = load_beir(args.data or bundled_dataset_dir("scifact"), "test")
    documents = list(data.corpus.values())
    fit, held_out = documents[: args.fit_docs], documents[args.fit_docs: args.fit_docs + args.held_out]
    start = time.time()
    report = isotropy_report(fit, held_out=[d.full_text for d in held_out], flows=args.flows,
                             fit_tokens=args.fit_tokens, show_progress=True)
    first = next(iter(report.values()))
    print(f"\n{data.name}: fit on {len(fit):,} documents; measured on {first['texts measured']:,} of them and on "
          f"{first.get('texts measured held-out', 0):,} held-out ones, in batches of 32")
    print(f"{'level':9s} {'method':7s} {'I(W) fit':>10s} {'avg cos':>8s} {'I(W) held':>10s} {'avg cos':>8s} {'fit s':>7s}")
    for key, row in report.items():
        level, method = key.split("/")
        print(f"{level:9s} {method:7s} {show(row, 'I(W)', '10.3g')} {show(row, 'avg_cos', '8.4f')} "
              f"{show(row, 'I(W) held-out', '10.3g'):>10s} {show(row, 'avg_cos held-out', '8.4f'):>8s} "
              f"{row['seconds']:7.1f}")
    out = RESULTS / f"isotropy_{data.name}.json"
    write_json(out, {"dataset": data.name, "fit_documents": len(fit), "held_out_documents": len(held_out),
                     "fit_tokens": args.fit_tokens, **record(config, settings), "rows": report,
                     "minutes": round((time.time() - start) / 60, 1)})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
