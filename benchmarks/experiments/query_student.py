"""A shallow query student: the backbone's embeddings and first `layers` layers plus a linear head, trained to give
the last layer's token states; queries are then encoded by the model's own WTA head on the student's states.

Chose the shipped query student's depth, 2 layers (models/query-student-minilm-l6-2layers.safetensors), on
SciFact train among query_student_gpu's students.

The ceiling of benchmarks/experiments/lookup_queries.py --ceiling says what an inference-free table lacks is the query's context
choosing each token's winners; this asks how much of that a cheap contextual model recovers. Label-free, per
collection: the student is distilled (mean squared error against the full backbone's last-layer states) on the
indexed documents' sentences encoded as queries, the same contexts the lookup table learns from. Scored like
lookup_queries.py (the same document samples and query sets): SciFact train for the record, every collection's
test split once. Encode time: one query at a time, PyTorch eager for both the student and the full encoder, in the
same run.

    .venv/bin/python -m benchmarks.experiments.query_student [--collections scifact] [--epochs 8]
    .venv/bin/python -m benchmarks.experiments.query_student --weights DIR   # students of query_student_gpu.py, not distilled

Prints a table and writes benchmarks/results/query_student.json (query_student_gpu.json with --weights). Settings:
benchmarks/configs/query_student.toml.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from benchmarks.experiments.lookup_queries import StatesCollection, score_encodings, table
from benchmarks.lib.encoded_cache import load_model
from benchmarks.lib.settings import RESULTS, ROOT, comma_list, parse_args, record
from benchmarks.lib.timer import median_ms, time_calls
from uhdsearch.encoder.precision import product_dtype  # noqa: E402
from uhdsearch.encoder.query.corpus_table import split_sentences  # noqa: E402
from uhdsearch.encoder.winners import pooled_csr  # noqa: E402
from uhdsearch.evaluation.datasets import load_beir, load_corpus  # noqa: E402
from uhdsearch.sparse import SparseEncoding  # noqa: E402

OUT_JSON = RESULTS / "query_student.json"
OUT_JSON_WEIGHTS = RESULTS / "query_student_gpu.json"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Student(torch.nn.Module):
    """The backbone's embeddings and first `layers` transformer layers (copied, then trained) and a linear head
    started at the identity: at step 0 it gives layer `layers`'s own states."""

    def __init__(self, backbone, layers: int) -> None:
        super().__init__()
        if not 0 < layers < backbone.n_layers:
            raise ValueError(f"layers={layers}: a student keeps 1..{backbone.n_layers - 1} of the backbone's layers")
        self.model = copy.deepcopy(backbone.model)
        self.model.encoder.layer = self.model.encoder.layer[:layers]
        self.model.config.num_hidden_layers = layers
        hidden = backbone.hidden_size
        self.head = torch.nn.Linear(hidden, hidden)
        with torch.no_grad():
            self.head.weight.copy_(torch.eye(hidden))
            self.head.bias.zero_()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state)


def distill(model, student: Student, sentences: list[str], epochs: int, lr: float, batch_size: int,
            seed: int) -> list[float]:
    """Train `student` to give the model's last-layer token states of `sentences` (as queries); mean loss per epoch.

    The teacher's states are computed once (a frozen backbone's states never change). The student's layers take
    `lr`, its new head 10x that, on one-cycle schedules."""
    if len(model.layers) != 1 or model.config.query_k is not None:
        raise ValueError(f"a student gives one layer's states to a query side that keeps every winner; this model "
                         f"has buckets on layers {model.layers} and query_k {model.config.query_k}")
    teacher = model.token_states(sentences, "query", show_progress=False)
    tokenizer_max = model.config.query_max_length
    optimizer = torch.optim.AdamW([{"params": student.model.parameters(), "lr": lr},
                                   {"params": student.head.parameters(), "lr": 10 * lr}], weight_decay=0.01)
    steps_per_epoch = len(sentences) // batch_size
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=[lr, 10 * lr], pct_start=0.1,
                                                   total_steps=max(1, epochs * steps_per_epoch))
    rng = np.random.default_rng(seed)
    losses = []
    student.train()
    for _ in range(epochs):
        order, total = rng.permutation(len(sentences)), 0.0
        for step in range(steps_per_epoch):
            rows = order[step * batch_size:(step + 1) * batch_size]
            batch = model.backbone.tokenize([sentences[r] for r in rows], tokenizer_max)
            mask = batch["attention_mask"].bool()
            (target,), _ = teacher.gather(rows, model.layers)  # packed in the mask's row-major order
            loss = ((student(batch["input_ids"], batch["attention_mask"])[mask] - target.float()) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            total += loss.item()
        losses.append(round(total / max(1, steps_per_epoch), 5))
        log(f"  epoch {len(losses)}: loss {losses[-1]:.4f}")
    student.eval()
    return losses


def load_students(model, folder: Path) -> tuple[dict, dict[str, Student]]:
    """The students query_student_gpu.py trained (its training.json and weight files in `folder`), each on the
    backbone's own embeddings (every trained tensor must load); or the one student in the file `folder`."""
    from safetensors.torch import load_file

    if folder.is_file():  # a student file as shipped (encoder/query_student.py, float16)
        from uhdsearch.encoder.query.student import QueryStudent

        student = QueryStudent.load(folder, model.backbone)
        return student.record, {f"student, {student.layers} layers, {student.record.get('epochs')} epochs, "
                                f"{folder.name}": student}
    record = json.loads((folder / "training.json").read_text())
    students = {}
    epochs = record["epochs"]
    for layers in record["students"]:
        student = Student(model.backbone, int(layers))
        trained = {}
        for path in sorted(folder.glob(f"student_{layers}layers_part*.safetensors")):
            trained.update(load_file(str(path)))
        missing, unexpected = student.load_state_dict(trained, strict=False)
        untrained = [k for k in missing if not k.startswith(("model.embeddings.", "model.pooler."))]
        if unexpected or untrained or not trained:
            raise ValueError(f"{folder}: student of {layers} layers: missing {untrained}, unexpected {unexpected}")
        students[f"student, {layers} layers, {epochs} epochs"] = student.eval()
    return record, students


def encode_with(model, student, texts: list[str], batch_size: int = 64) -> SparseEncoding:
    """Queries as the full encoder pools them, from the states `student(input_ids, attention_mask)` gives."""
    wta = model.buckets.wta[str(model.layers[0])]
    dtype = product_dtype(model.config.wta_dtype)
    parts = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = model.backbone.tokenize(texts[start:start + batch_size], model.config.query_max_length)
            mask = batch["attention_mask"].bool()
            states = student(batch["input_ids"], batch["attention_mask"])[mask]
            values, dims = wta(states, model.config.wta_k, dtype)
            parts.append(pooled_csr(values, dims, torch.nonzero(mask, as_tuple=True)[0], mask.shape[0], wta.dim))
    return SparseEncoding([sp.vstack(parts, format="csr")])


def encode_ms(encode, texts: list[str]) -> float:
    with torch.inference_mode():
        times = time_calls(encode, texts[:10] + texts)  # the first ten warm up
    return round(median_ms(times[10:]), 3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--collections", type=comma_list())
    parser.add_argument("--layers", type=int, help="backbone layers the student keeps")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--weights", type=lambda v: [Path(p) for p in v.split(",")],
                        help="score the students query_student_gpu.py trained in these folders, or student files, "
                        "(comma-separated) instead of distilling")
    args, config, settings = parse_args(parser, "query_student", argv)
    start = time.time()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = load_model(args.model, args.data_root, args.seed)
    model.eval()
    result = {"script": "benchmarks/experiments/query_student.py", **record(config, settings), "model_digest": model.digest(),
              "rows": [], "training": {}}
    if args.weights is not None:
        students = {}
        for folder in args.weights:
            result["training"][str(folder)], found = load_students(model, folder)
            students.update(found)
    for name in args.collections:
        data_dir = ROOT / args.data_root / name
        collection = StatesCollection(model, data_dir, args.corpus_docs.get(name), args.seed)
        if args.weights is None:
            corpus = load_corpus(data_dir / "corpus.jsonl")
            sentences = split_sentences([corpus[d].full_text for d in collection.doc_ids])
            students = {f"student, {args.layers} layers": Student(model.backbone, args.layers)}
            t0 = time.perf_counter()
            log(f"{name}: distilling a {args.layers}-layer student on {len(sentences):,} sentences")
            losses = distill(model, *students.values(), sentences, args.epochs, args.lr, args.batch_size, args.seed)
            result["training"][name] = {"sentences": len(sentences), "epoch_losses": losses,
                                        "seconds": round(time.perf_counter() - t0, 1)}
        splits = ["train", "test"] if name == "scifact" else ["test"]
        for split in splits:
            ids, full, _ = collection.split(split)
            texts = [{q.query_id: q.text for q in load_beir(data_dir, split).queries}[q] for q in ids]
            encodings = {"full encoder": full, **{label: encode_with(model, student, texts)
                                                  for label, student in students.items()}}
            result["rows"] += score_encodings(collection, split, encodings, [1.0, args.max_df])
        if name == args.collections[0]:
            timed = [q.text for q in load_beir(data_dir, "test").queries][:args.n_timed]
            result["encode_p50_ms"] = {"full encoder (torch)": encode_ms(lambda t: model.encode_query([t]), timed)}
            for label, student in students.items():
                result["encode_p50_ms"][f"{label} (torch)"] = encode_ms(
                    lambda t, s=student: encode_with(model, s, [t]), timed)
    print(table(result["rows"]))
    for side, ms in result.get("encode_p50_ms", {}).items():
        print(f"encode p50, one query at a time: {side} {ms:.2f} ms")
    result["wall_s"] = round(time.time() - start, 1)
    out = OUT_JSON if args.weights is None else OUT_JSON_WEIGHTS
    out.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {out} ({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
