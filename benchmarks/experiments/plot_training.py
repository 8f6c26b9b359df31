"""Dev curves of training runs as one PNG: dev nDCG@10 (UHD-binary) against the training step.

Chooses nothing: it draws the dev curves behind training_probe's choice.

Reads benchmarks/experiments/training_probe.py results (one curve per recipe) and quickstart output directories
(extra_results.json's dev_evals, one curve per collection); each curve is drawn as its change against step 0, the
untrained head, which early stopping keeps unless a later step beats it.

    .venv/bin/python -m benchmarks.experiments.plot_training benchmarks/results/training_probe_scifact_long.json \
        out/quickstart --out docs/training_dev_curves.png
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def curves(path: Path) -> dict[str, list[tuple[int, float]]]:
    """label -> [(step, dev nDCG@10)] from a probe result file or a quickstart output directory."""
    if path.is_dir():
        extra = json.loads((path / "extra_results.json").read_text())
        results = json.loads((path / "results.json").read_text())
        return {f"quickstart {results['dataset']}": [tuple(e) for e in extra["dev_evals"]]}
    data = json.loads(path.read_text())
    return {f"{path.stem}: {r['recipe']}": [tuple(e) for e in r["dev_curve"]]
            for r in data["rows"] if r.get("dev_curve")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", type=Path, help="probe result JSONs or quickstart output directories")
    parser.add_argument("--out", type=Path, default=Path("docs/training_dev_curves.png"))
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for path in args.inputs:
        for label, points in curves(path).items():
            steps, scores = zip(*points)
            gains = [s - scores[0] for s in scores]  # collections differ in level; the change is comparable
            line, = ax.plot(steps, gains, marker="o", markersize=3, label=f"{label} (step 0: {scores[0]:.4f})")
            best = max(range(len(scores)), key=lambda i: (scores[i], -i))  # the earliest best, as training keeps
            ax.plot(steps[best], gains[best], marker="*", markersize=12, color=line.get_color())
    ax.axhline(0.0, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("training step (0 = the untrained head; star: the step early stopping kept)")
    ax.set_ylabel("dev nDCG@10 (UHD-binary) minus step 0's")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
