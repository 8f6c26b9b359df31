"""benchmarks/experiments/query_student_gpu.py: pack, train (here on the CPU) and export give a student the library loads."""
import json

import torch
import numpy as np
from benchmarks.experiments.query_student_gpu import main, padded, packed_teacher

from uhdsearch.encoder.query.corpus_table import split_sentences
from uhdsearch.encoder.query.student import QueryStudent
from uhdsearch.evaluation.datasets import load_corpus


def test_pack_train_export_gives_a_student_closer_to_the_last_layer(tiny_query_model, scifact_mini_dir, tmp_path):
    model = tiny_query_model
    model.save_pretrained(tmp_path / "model")
    packed, out, file = tmp_path / "packed", tmp_path / "out", tmp_path / "student.safetensors"
    main(["pack", "--model", str(tmp_path / "model"), "--data-root", str(scifact_mini_dir.parent),
          "--collections", scifact_mini_dir.name, "--packed", str(packed)])
    main(["train", "--packed", str(packed), "--out", str(out), "--layers", "1", "--epochs", "3", "--limit", "400",
          "--batch-size", "32", "--lr", "1e-3"])
    # the packed teacher (compact vocabulary, float16 weights) gives the backbone's states of the same sentences
    teacher, ids, lengths, starts = packed_teacher(packed, "cpu")
    corpus = load_corpus(scifact_mini_dir / "corpus.jsonl")
    first = split_sentences([doc.full_text for doc in corpus.values()])[:6]
    batch = model.backbone.tokenize(first, model.config.query_max_length)
    rows = np.arange(6)
    packed_ids, packed_mask = padded(ids, starts, lengths, rows, "cpu")
    assert torch.equal(packed_mask, batch["attention_mask"])
    vocab = np.load(packed / "tokens.npz")["vocab"]
    assert np.array_equal(vocab[packed_ids.numpy()] * packed_mask.numpy(), batch["input_ids"].numpy())
    with torch.inference_mode():
        got = teacher(input_ids=packed_ids, attention_mask=packed_mask).last_hidden_state[packed_mask.bool()]
        (want,) = model.backbone(batch["input_ids"], batch["attention_mask"], [2])
    want = want[batch["attention_mask"].bool()]
    assert float((got - want).norm() / want.norm()) < 1e-2
    record = json.loads((out / "training.json").read_text())
    curve = record["students"]["1"]["held_out_loss_by_epoch"]
    assert record["sentences"] == 400 and record["held_out"] == 20 and len(curve) == 4 and curve[-1] < curve[0]
    main(["export", "--model", str(tmp_path / "model"), "--data-root", str(scifact_mini_dir.parent), "--weights",
          str(out), "--packed", str(packed), "--layers", "1", "--to", str(file)])
    student = QueryStudent.load(file, model.backbone)
    assert student.record["distilled_on"] == [scifact_mini_dir.name] and student.record["epochs"] == 3
    # trained against the packed (compact vocabulary, float16) teacher, it comes closer to the real last layer
    batch = model.backbone.tokenize(["vitamin d and bone density in older women", "insulin signalling in mice"], 16)
    mask = batch["attention_mask"].bool()
    with torch.inference_mode():
        (target,) = model.backbone(batch["input_ids"], batch["attention_mask"], [2])
        error = {name: float(((s(batch["input_ids"], batch["attention_mask"]) - target)[mask] ** 2).mean())
                 for name, s in (("trained", student), ("untrained", QueryStudent(model.backbone, 1)))}
    assert error["trained"] < 0.8 * error["untrained"], error
