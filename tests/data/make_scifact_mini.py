"""Regenerate tests/data/scifact-mini from a BEIR-layout SciFact directory, deterministically.

Usage: python tests/data/make_scifact_mini.py BEIR_SCIFACT_DIR [OUT_DIR]

Takes the first 40 queries (queries.jsonl order) judged in qrels/test.tsv and the first 40 judged in
qrels/train.tsv, every document they judge, and then the first documents of corpus.jsonl until the
corpus has 400 documents. Lines are copied byte for byte and keep their original order.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

N_QUERIES_PER_SPLIT = 40
N_DOCUMENTS = 400
SPLITS = ("test", "train")


def read_qrels(path: Path) -> tuple[str, list[tuple[str, str, str]]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], [tuple(line.split("\t")) for line in lines[1:] if line.strip()]
    return header, rows


def main(src: Path, out: Path) -> None:
    query_lines = [line for line in (src / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    corpus_lines = [line for line in (src / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    query_order = [str(json.loads(line)["_id"]) for line in query_lines]
    doc_order = [str(json.loads(line)["_id"]) for line in corpus_lines]

    chosen_queries: set[str] = set()
    needed_docs: set[str] = set()
    qrels_out: dict[str, tuple[str, list[tuple[str, str, str]]]] = {}
    for split in SPLITS:
        header, rows = read_qrels(src / "qrels" / f"{split}.tsv")
        judged = {r[0] for r in rows}
        picked = [q for q in query_order if q in judged][:N_QUERIES_PER_SPLIT]
        if len(picked) < N_QUERIES_PER_SPLIT:
            raise SystemExit(f"{split}: only {len(picked)} judged queries")
        picked_set = set(picked)
        kept = [r for r in rows if r[0] in picked_set]
        chosen_queries |= picked_set
        needed_docs |= {r[1] for r in kept}
        qrels_out[split] = (header, kept)

    missing = needed_docs - set(doc_order)
    if missing:
        raise SystemExit(f"judged documents not in corpus: {sorted(missing)[:5]}")
    chosen_docs = set(needed_docs)
    for doc_id in doc_order:
        if len(chosen_docs) >= N_DOCUMENTS:
            break
        chosen_docs.add(doc_id)

    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line, d in zip(corpus_lines, doc_order) if d in chosen_docs)
    with open(out / "queries.jsonl", "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line, q in zip(query_lines, query_order) if q in chosen_queries)
    for split, (header, kept) in qrels_out.items():
        with open(out / "qrels" / f"{split}.tsv", "w", encoding="utf-8", newline="\n") as f:
            f.write(header + "\n")
            f.writelines("\t".join(r) + "\n" for r in kept)
    print(f"wrote {out}: {len(chosen_docs)} documents, {len(chosen_queries)} queries, "
          + ", ".join(f"{s}: {len(k)} judgments" for s, (_, k) in qrels_out.items()))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    default_out = Path(__file__).resolve().parent / "scifact-mini"
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) == 3 else default_out)
