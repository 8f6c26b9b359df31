"""The query student of benchmarks.experiments.query_student with more text and a longer schedule, trained on a GPU.

Chooses nothing itself: it trains the students that query_student scores (the shipped one is its 2-layer one).

Session 17's student (2 layers, 8 epochs over each collection's indexed sentences, on 2 CPU cores) stayed 0.03-0.06
below the full encoder, its loss flat as its schedule annealed; the README said more text and longer schedules were
not tried. This trains one student for all three collections on every sentence of their corpora (label-free: the
targets are the full backbone's own last-layer states of each sentence encoded as a query), with the backbone's
embeddings frozen, so a student is its first `layers` layers plus a linear head (a few MB beside the model).

Three steps, so that only the training needs the GPU machine (whose working tree may carry 64 MiB):

    .venv/bin/python -m benchmarks.experiments.query_student_gpu pack   # here: token ids + fp16 backbone -> out/student_gpu_in
    PYTHONPATH=src python3 -m benchmarks.experiments.query_student_gpu train --out DIR   # GPU machine: torch + transformers
    .venv/bin/python -m benchmarks.experiments.query_student --weights DIR[,DIR]   # here: scored, timed on 2 cores
    .venv/bin/python -m benchmarks.experiments.query_student_gpu export --weights DIR --layers 2 --to FILE  # shipped

(from the repository root; `train` needs only torch, transformers and safetensors, with uhdsearch from src/).
The scoring writes benchmarks/results/query_student_gpu.json. A student's epochs are fixed
in advance; held-out sentences (5 %, label-free) report its loss; the student is chosen on SciFact train, never test.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.lib.settings import ROOT

PACKED = ROOT / "out" / "student_gpu_in"
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def pack(args) -> None:
    """Token ids of every corpus sentence (as queries) over a compact vocabulary, and the backbone in fp16 with
    only the used vocabulary's embedding rows: what the GPU machine needs, under its 64 MiB."""
    from safetensors.torch import save_file

    from benchmarks.lib.encoded_cache import load_model
    from uhdsearch.encoder.query.corpus_table import split_sentences
    from uhdsearch.evaluation.datasets import load_corpus

    model = load_model(args.model, args.data_root, 0)
    ids, lengths, source = [], [], []
    for number, name in enumerate(args.collections):
        corpus = load_corpus(ROOT / args.data_root / name / "corpus.jsonl")
        sentences = split_sentences([doc.full_text for doc in corpus.values()])
        encoded = model.backbone.tokenizer(sentences, truncation=True, max_length=model.config.query_max_length)
        for row in encoded["input_ids"]:
            ids.append(np.asarray(row, np.int64))
            lengths.append(len(row))
        source += [number] * len(sentences)
        log(f"{name}: {len(sentences):,} sentences")
    flat = np.concatenate(ids)
    vocab = np.unique(flat)  # includes [CLS], [SEP]; the pad id 0 is added below
    vocab = np.union1d(vocab, [model.backbone.tokenizer.pad_token_id])
    compact = np.searchsorted(vocab, flat).astype(np.uint16)
    weights = {k: v.detach().to(torch.float16).contiguous() for k, v in model.backbone.model.state_dict().items()}
    weights[WORD_EMBEDDINGS] = weights[WORD_EMBEDDINGS][torch.from_numpy(vocab)].contiguous()
    args.packed.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(args.packed / "backbone_fp16.safetensors"))
    config = model.backbone.model.config.to_dict()
    config["vocab_size"] = len(vocab)
    config["pad_token_id"] = int(np.searchsorted(vocab, model.backbone.tokenizer.pad_token_id))
    (args.packed / "config.json").write_text(json.dumps(config))
    np.savez_compressed(args.packed / "tokens.npz", ids=compact, lengths=np.asarray(lengths, np.int32),
                        source=np.asarray(source, np.int8), vocab=vocab.astype(np.int32),
                        collections=np.asarray(args.collections))
    log(f"packed {len(lengths):,} sentences, {flat.size:,} tokens, vocabulary {len(vocab):,} -> {args.packed}")


def padded(ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, rows: np.ndarray, device) -> tuple:
    width = int(lengths[rows].max())
    out = np.zeros((len(rows), width), np.int64)
    for i, r in enumerate(rows):
        out[i, :lengths[r]] = ids[starts[r]:starts[r] + lengths[r]]
    input_ids = torch.from_numpy(out).to(device)
    mask = (torch.arange(width, device=device)[None, :] < torch.from_numpy(lengths[rows]).to(device)[:, None])
    return input_ids, mask.long()


def packed_teacher(packed: Path, device) -> tuple:
    """The full backbone over the packed vocabulary (float16 weights computed in float32), and the packed
    sentences: (teacher, token ids, lengths, start offsets)."""
    from safetensors.torch import load_file
    from transformers import BertConfig, BertModel

    tokens = np.load(packed / "tokens.npz")
    ids, lengths = tokens["ids"].astype(np.int64), tokens["lengths"].astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    teacher = BertModel(BertConfig(**json.loads((packed / "config.json").read_text())), add_pooling_layer=False)
    state = {k: v.float() for k, v in load_file(str(packed / "backbone_fp16.safetensors")).items()
             if not k.startswith("pooler.")}
    missing = teacher.load_state_dict(state, strict=False).missing_keys
    if missing:
        raise SystemExit(f"{packed}: the packed backbone lacks {missing[:3]}")
    return teacher.to(device).eval(), ids, lengths, starts


def train(args) -> None:
    """Teacher states once, then each student in turn; writes its weights and a log JSON to --out after each."""
    from safetensors.torch import save_file

    if importlib.util.find_spec("uhdsearch") is None:  # the GPU machine has the source tree, not an install
        raise SystemExit("uhdsearch is not importable: run `PYTHONPATH=src python3 -m "
                         "benchmarks.experiments.query_student_gpu train ...` from the repository root")
    from uhdsearch.encoder.backbone import Backbone
    from uhdsearch.encoder.query.student import QueryStudent

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    teacher, ids, lengths, starts = packed_teacher(args.packed, device)
    n = len(lengths) if args.limit is None else min(args.limit, len(lengths))
    rng = np.random.default_rng(args.seed)
    order = rng.permutation(len(lengths))[:n]
    held = order[:max(1, n // 20)]
    fit = order[len(held):]
    t0 = time.perf_counter()
    targets: dict[int, torch.Tensor] = {}
    with torch.inference_mode():
        for b in range(0, n, 512):
            rows = order[b:b + 512]
            input_ids, mask = padded(ids, starts, lengths, rows, device)
            states = teacher(input_ids=input_ids, attention_mask=mask).last_hidden_state
            for i, r in enumerate(rows):
                targets[int(r)] = states[i, :lengths[r]].to(torch.bfloat16).clone()
    log(f"teacher states of {n:,} sentences in {time.perf_counter() - t0:.1f} s on {device}")
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "sentences": n,
              "held_out": len(held), "epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size,
              "students": {}}

    def batch_loss(student, rows) -> torch.Tensor:
        input_ids, mask = padded(ids, starts, lengths, rows, device)
        target = torch.cat([targets[int(r)] for r in rows]).float()
        return ((student(input_ids, mask)[mask.bool()] - target) ** 2).mean()

    def held_loss(student) -> float:
        student.eval()
        with torch.inference_mode():
            losses = [batch_loss(student, held[b:b + 512]).item() * len(held[b:b + 512])
                      for b in range(0, len(held), 512)]
        student.train()
        return round(sum(losses) / len(held), 5)

    started, last = time.perf_counter(), None
    for layers in args.layers:
        if last is not None and time.perf_counter() - started + last * layers > args.budget_s:
            log(f"{layers} layers: skipped, past the time budget")
            continue
        student = QueryStudent(Backbone(teacher, tokenizer=None), layers, fingerprint="packed").to(device)
        params = [p for p in student.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW([{"params": params, "lr": args.lr},
                                       {"params": student.head.parameters(), "lr": 10 * args.lr}],
                                      weight_decay=0.01)
        steps = len(fit) // args.batch_size
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=[args.lr, 10 * args.lr], pct_start=0.1,
                                                       total_steps=args.epochs * steps)
        curve = [held_loss(student)]
        t0 = time.perf_counter()
        student.train()
        for epoch in range(args.epochs):
            shuffled = rng.permutation(fit)
            for step in range(steps):
                loss = batch_loss(student, shuffled[step * args.batch_size:(step + 1) * args.batch_size])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                schedule.step()
            curve.append(held_loss(student))
            log(f"{layers} layers, epoch {epoch + 1}: held-out loss {curve[-1]:.4f} "
                f"({time.perf_counter() - t0:.0f} s)")
        trained = {k: v.detach().float().cpu().contiguous() for k, v in student.trained_state().items()}
        # The machine returns files of at most 16 MiB: two layers (and the head) a file.
        for part in range(0, layers, 2):
            keep = {k: v for k, v in trained.items() if not k.startswith("model.encoder.layer.")
                    or part <= int(k.split(".")[3]) < part + 2}
            keep = keep if part == 0 else {k: v for k, v in keep.items() if k.startswith("model.encoder.layer.")}
            save_file(keep, str(args.out / f"student_{layers}layers_part{part // 2}.safetensors"))
        last = (time.perf_counter() - t0) / layers
        record["students"][str(layers)] = {"held_out_loss_by_epoch": curve,
                                           "seconds": round(time.perf_counter() - t0, 1)}
        (args.out / "training.json").write_text(json.dumps(record, indent=1) + "\n")


def export(args) -> None:
    """One trained student as the file `encoder.query_student.QueryStudent.load` reads (float16, its record)."""
    from safetensors.torch import load_file

    from benchmarks.lib.encoded_cache import load_model
    from uhdsearch.encoder.query.student import QueryStudent

    model = load_model(args.model, args.data_root, 0)
    record = json.loads((args.weights / "training.json").read_text())
    student = QueryStudent(model.backbone, args.layers)
    trained = {}
    for path in sorted(args.weights.glob(f"student_{args.layers}layers_part*.safetensors")):
        trained.update(load_file(str(path)))
    if set(trained) != set(student.trained_state()):
        raise SystemExit(f"{args.weights}: the {args.layers}-layer student's tensors do not match the backbone's")
    student.load_state_dict(trained, strict=False)
    packed = np.load(args.packed / "tokens.npz") if (args.packed / "tokens.npz").is_file() else None
    student.record = {
        "distilled_on": [str(c) for c in packed["collections"]] if packed is not None else None,
        "sentences": record["sentences"], "held_out": record["held_out"], "epochs": record["epochs"],
        "lr": record["lr"], "batch_size": record["batch_size"], "device": record["device"],
        "held_out_loss": record["students"][str(args.layers)]["held_out_loss_by_epoch"][-1],
        "script": "benchmarks.experiments.query_student_gpu"}
    args.to.parent.mkdir(parents=True, exist_ok=True)
    student.save(args.to)
    log(f"wrote {args.to} ({args.to.stat().st_size / 1e6:.1f} MB)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--model", default="../main/out/quickstart/model")
    p.add_argument("--data-root", default="../shared/data")
    p.add_argument("--collections", default="scifact,cisi,medline", type=lambda s: s.split(","))
    p.add_argument("--packed", type=Path, default=PACKED)
    t = sub.add_parser("train")
    t.add_argument("--packed", type=Path, default=PACKED)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--layers", default="2,1,3", type=lambda s: [int(x) for x in s.split(",")])
    t.add_argument("--epochs", type=int, default=30)
    t.add_argument("--lr", type=float, default=5e-4)
    t.add_argument("--batch-size", type=int, default=256)
    t.add_argument("--limit", type=int, help="train on this many sentences (a quick check)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--budget-s", type=float, default=1e9, help="skip a student that would end past this")
    e = sub.add_parser("export")
    e.add_argument("--model", default="../main/out/quickstart/model")
    e.add_argument("--data-root", default="../shared/data")
    e.add_argument("--weights", type=Path, required=True)
    e.add_argument("--packed", type=Path, default=PACKED, help="what `pack` wrote (names the collections)")
    e.add_argument("--layers", type=int, required=True)
    e.add_argument("--to", type=Path, required=True)
    args = parser.parse_args(argv)
    {"pack": pack, "train": train, "export": export}[args.step](args)


if __name__ == "__main__":
    main()
