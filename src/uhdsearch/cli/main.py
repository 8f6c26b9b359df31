"""uhdsearch command line: each command parses, calls one library function, prints.

Results go to stdout, progress and logs to stderr; a user error prints one line and exits 2, a bug shows its
traceback.
"""
from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path
from typing import Optional

import typer

from uhdsearch.cli.floats import finite_floats
from uhdsearch.cli.quiet import hide_progress_bars, show_progress_bars
from uhdsearch.errors import UhdError, UsageError
from uhdsearch.io import check_output_dir

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="UHD-BERT sparse retrieval: train, index, search, evaluate.")
_state = {"debug": False}


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks."),
          quiet: bool = typer.Option(False, "--quiet",
                                     help="No progress bars; only warnings and errors in the log.")) -> None:
    _state["debug"] = debug
    if quiet:
        hide_progress_bars()
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("faiss").setLevel(logging.WARNING)  # faiss logs every CPU-feature probe at INFO


def _layers(text: Optional[str]) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip()) if text else (-1,)
    except ValueError:
        raise UsageError(f"--bucket-layers {text!r} must be comma-separated integers, e.g. 2,4,6") from None


def _weights(text: Optional[str]) -> Optional[tuple[float, ...]]:
    try:
        weights = tuple(float(x) for x in text.split(",")) if text else None
    except ValueError:
        raise UsageError(f"--bucket-weights {text!r} must be comma-separated numbers, e.g. 1,0.5,1") from None
    if weights and not all(math.isfinite(w) for w in weights):
        raise UsageError(f"--bucket-weights {text!r}: every weight must be a finite number (not NaN or inf)")
    return weights


@app.command()
def quickstart(
    out: Path = typer.Option(Path("out/quickstart"), "--out", help="Directory for results.json, model, indexes, runs."),
    data: Optional[Path] = typer.Option(None, "--data", help="BEIR-layout collection (default: bundled SciFact)."),
    split: str = typer.Option("test", "--split", help="qrels split to evaluate on."),
    fast: bool = typer.Option(False, "--fast", help="Smoke run in under 3 minutes (small corpus and model)."),
    preset: Optional[str] = typer.Option(None, "--preset", help="Training preset: quickstart (default; fast with "
                                         "--fast), compact (half the head: faster without bfloat16 hardware), "
                                         "fast or paper."),
    backbone: Optional[Path] = typer.Option(None, "--backbone", help="Local Hugging Face BERT directory."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out as a whole (swapped in at the end: "
                                   "a kill leaves it old or new)."),
) -> None:
    """Train a UHD model, index the collection, and compare UHD, BM25 and dense retrieval."""
    from uhdsearch.recipes.quickstart import run_quickstart
    from uhdsearch.recipes.presets import preset as named_preset

    check_output_dir(out, {"--data": data, "--backbone": backbone})
    recipe = named_preset(preset) if preset is not None else None
    done = run_quickstart(out, data_dir=data, split=split, fast=fast, backbone=backbone, recipe=recipe,
                          overwrite=overwrite)
    typer.echo(done.comparison.format_table())
    typer.echo("re-ranking BM25's top 1000:")
    for name, scores in done.rerank.items():
        typer.echo(f"  {name:28s} " + "  ".join(f"{m} {v:.4f}" for m, v in scores.items()))
    seconds = done.seconds
    typer.echo(f"train {seconds['train']:.0f} s, index {seconds['index']:.0f} s, "
               f"uhd-binary-norm search {seconds['search_ms_per_query']:.1f} ms/query (encode + search, median)")
    typer.echo(f"wrote {done.path}")


@app.command()
def train(
    data: Path = typer.Option(..., "--data", help="BEIR-layout collection to train on."),
    out: Path = typer.Option(..., "--out", help="Model directory to write."),
    split: Optional[str] = typer.Option("train", "--split", help="qrels split with training pairs ('' = ICT only)."),
    backbone: Optional[Path] = typer.Option(None, "--backbone", help="Local Hugging Face BERT directory."),
    preset: str = typer.Option("quickstart", "--preset", help="Settings to start from: quickstart, compact, fast or "
                               "paper (uhdsearch.recipes.presets); the options below override them."),
    dim: Optional[int] = typer.Option(None, "--dim"),
    wta_k: Optional[int] = typer.Option(None, "--wta-k"),
    query_k: Optional[int] = typer.Option(None, "--query-k", help="Query truncation (Table 4); 0 keeps every "
                                          "active dimension."),
    bucket_layers: Optional[str] = typer.Option(None, "--bucket-layers", help="e.g. 2,4,6 (default: last layer)."),
    bucket_weights: Optional[str] = typer.Option(None, "--bucket-weights"),
    document_max_length: Optional[int] = typer.Option(None, "--document-max-length"),
    epochs: Optional[float] = typer.Option(None, "--epochs"),
    learning_rate: Optional[float] = typer.Option(None, "--learning-rate"),
    ict_per_document: Optional[int] = typer.Option(None, "--ict-per-document",
                                                   help="Inverse Cloze Task pairs per passage."),
    loss: Optional[str] = typer.Option(None, "--loss", help="hinge (the paper's Eq. 8), infonce, kl or margin_mse "
                                       "(kl and margin_mse distil from the dense backbone)."),
    binary_aware: Optional[bool] = typer.Option(None, "--binary-aware/--float-scores",
                                                help="Train through the binarized overlap that search uses "
                                                "(default: the preset's)."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps"),
    distill_weight: Optional[float] = typer.Option(None, "--distill-weight"),
    hard_negative_depth: Optional[int] = typer.Option(None, "--hard-negative-depth",
                                                      help="BM25 hard negatives from the top N."),
    train_backbone_layers: Optional[int] = typer.Option(None, "--train-backbone-layers",
                                                        help="0 frozen, N top layers (trained on the states of "
                                                        "the frozen layers below, computed once), -1 all."),
    backbone_learning_rate: Optional[float] = typer.Option(None, "--backbone-learning-rate",
                                                           help="Learning rate of the trained backbone layers "
                                                           "(default: --learning-rate)."),
    max_minutes: Optional[float] = typer.Option(None, "--max-minutes", help="Training time budget (default: the "
                                                "preset's)."),
    eval_every: Optional[int] = typer.Option(None, "--eval-every", help="Dev nDCG@10 every N steps (0 = off); "
                                             "best kept."),
    overwrite: bool = typer.Option(False, "--overwrite"),
) -> None:
    """Train a UHD encoder (by default: frozen backbone, WTA heads) on qrels pairs and ICT pairs."""
    from uhdsearch.encoder.backbone import Backbone
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.datasets import load_beir
    from uhdsearch.recipes.presets import preset as named_preset
    from uhdsearch.recipes.recipe import load_train_split, train_on_collection

    check_output_dir(out, {"--data": data, "--backbone": backbone})
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists; pass --overwrite to replace it")
    given = {"dim": dim, "wta_k": wta_k, "document_max_length": document_max_length, "epochs": epochs,
             "learning_rate": learning_rate, "ict_per_document": ict_per_document, "distill_weight": distill_weight,
             "hard_negative_depth": hard_negative_depth, "loss": loss, "binary_aware": binary_aware,
             "max_steps": max_steps, "train_backbone_layers": train_backbone_layers,
             "backbone_learning_rate": backbone_learning_rate,
             "bucket_layers": _layers(bucket_layers) if bucket_layers is not None else None,
             "bucket_weights": _weights(bucket_weights), "max_minutes": max_minutes}
    overrides = {k: v for k, v in given.items() if v is not None}
    if query_k is not None:
        overrides["query_k"] = query_k or None
    if eval_every is not None:
        overrides["eval_every"] = eval_every or None
    recipe = named_preset(preset, use_train_qrels=bool(split), **overrides)
    corpus = load_beir(data, split).corpus if split else _corpus_only(data)
    model = UHDEncoder(Backbone.from_pretrained(backbone), recipe.encoder)
    result, n_pairs = train_on_collection(model, list(corpus.values()), load_train_split(data, split or None), recipe)
    model.save_pretrained(out, overwrite=overwrite)
    typer.echo(json.dumps({"model": str(out), "pairs": n_pairs, "steps": result.steps,
                           "planned_steps": result.planned_steps, "out_of_time": result.out_of_time,
                           "seconds": round(result.seconds, 1)}))


def _corpus_only(data: Path):
    from uhdsearch.evaluation.datasets import load_corpus

    return load_corpus(data / "corpus.jsonl")


@app.command()
def index(
    model: Path = typer.Option(..., "--model", help="Model directory (uhdsearch train or quickstart)."),
    data: Path = typer.Option(..., "--data", help="BEIR-layout directory or a corpus.jsonl file."),
    out: Path = typer.Option(..., "--out", help="Index directory to write."),
    variant: str = typer.Option("binary", "--variant", help="binary, weighted, or planes (document impacts as "
                                "2-bit planes, searched with 3-bit query weights: index/impacts.py)."),
    batch_size: int = typer.Option(32, "--batch-size"),
    overwrite: bool = typer.Option(False, "--overwrite"),
    ray: Optional[str] = typer.Option(None, "--ray", help="Encode on Ray: a cluster address, or 'local'; "
                                      "writes a segmented index (extra: ray)."),
    workers: int = typer.Option(2, "--workers", help="Ray encoding actors (with --ray)."),
    gpus_per_worker: float = typer.Option(0.0, "--gpus-per-worker", help="With --ray: GPUs reserved per actor, "
                                          "which then encodes on its GPU (0.5: two actors share one)."),
) -> None:
    """Encode a corpus and write a binarized (or weighted) inverted index."""
    from uhdsearch.encoder.model import UHDEncoder
    from uhdsearch.evaluation.datasets import load_corpus
    from uhdsearch.index.inverted import BinaryIndex, WeightedIndex

    if variant not in ("binary", "weighted", "planes"):
        raise UsageError(f"--variant {variant!r}; choose binary, weighted or planes")
    if variant == "planes" and ray is not None:
        raise UsageError("--variant planes is built in this process; --ray writes segmented binary or weighted "
                         "indexes")
    if batch_size <= 0:
        raise UsageError(f"--batch-size {batch_size} must be a positive integer")
    if gpus_per_worker and ray is None:
        raise UsageError("--gpus-per-worker applies to --ray (without it, encoding runs in this process)")
    if gpus_per_worker < 0:
        raise UsageError(f"--gpus-per-worker {gpus_per_worker:g} must be 0 or more")
    check_output_dir(out, {"--data": data, "--model": model})
    corpus = load_corpus(data / "corpus.jsonl" if data.is_dir() else data)
    if ray is not None:
        from uhdsearch.cli.scale import index_on_ray

        return index_on_ray(model, corpus, out, variant, batch_size, overwrite, ray, workers, gpus_per_worker)
    encoder = UHDEncoder.from_pretrained(model)
    if variant == "planes":
        from uhdsearch.index.impacts import ImpactPlanes

        built = ImpactPlanes.build(encoder, corpus, out, batch_size=batch_size, overwrite=overwrite).index
    else:
        klass = BinaryIndex if variant == "binary" else WeightedIndex
        built = klass.build(encoder, corpus, out, batch_size=batch_size, overwrite=overwrite)
    typer.echo(json.dumps({"index": str(out), "variant": variant, "n_documents": built.n_documents,
                           "n_postings": built.n_postings()}))


@app.command()
def search(
    model: Path = typer.Option(..., "--model"),
    index_dir: Path = typer.Option(..., "--index"),
    queries: Optional[Path] = typer.Option(None, "--queries", help="queries.jsonl ({_id, text} per line)."),
    query: Optional[str] = typer.Option(None, "--query", help="One query text (id 'q1')."),
    k: int = typer.Option(10, "--k", help="Results per query."),
    scoring: Optional[str] = typer.Option(None, "--scoring", help="binary or weighted (default: the index's)."),
    query_k: Optional[int] = typer.Option(None, "--query-k", help="Override the model's query_k (0 = keep all)."),
    bucket_weights: Optional[str] = typer.Option(None, "--bucket-weights", help="One weight per bucket, e.g. "
                                                 "1,0.5 (default: the model's)."),
    wta_k: Optional[int] = typer.Option(None, "--wta-k", help="Override winners per token at inference."),
    rerank: Optional[Path] = typer.Option(None, "--rerank", help="TREC run whose candidates to re-rank."),
    onnx: bool = typer.Option(False, "--onnx", help="Run the backbone through ONNX Runtime: ~2x faster query "
                              "encoding on a CPU, after a ~3 s export at start."),
    max_df: str = typer.Option("auto", "--max-df", help="Drop query dims active in more than this fraction of "
                               "the documents (stop dimensions), e.g. 0.1; 'none' keeps all; 'auto': 0.3 on "
                               "indexes of 1,000 documents or more."),
    idf: bool = typer.Option(False, "--idf", help="Weight query dims by IDF (binary: 4-bit levels, exact)."),
    cascade: str = typer.Option("auto", "--cascade", help="Two passes: query dims active in at most FIRST_MAX_DF "
                                "of the documents pick DEPTH candidates, the rest are counted for those only "
                                "(not exact); e.g. 0.1:100; 'none': exact; 'auto': on binary indexes of "
                                "100,000 documents or more, 0.1:300 (0.1:100 with --length-norm none). The "
                                "2nd pass builds rows in memory after 5,000 queries (~1.9 KB a document); "
                                "F:DEPTH:probe probes the postings instead."),
    lookup: bool = typer.Option(False, "--lookup", help="Encode queries by table lookup (MODEL/query_lookup.npz, "
                                "built by `uhdsearch lookup`): ~0.3 ms a query, lower quality."),
    student: Optional[Path] = typer.Option(None, "--student", help="Encode queries with a distilled query student "
                                           "(a .safetensors file, e.g. models/query-student-minilm-l6-2layers"
                                           ".safetensors for the default backbone): 2 of MiniLM's 6 layers."),
    length_norm: str = typer.Option("auto", "--length-norm", help="Divide binary counts by the document's active "
                                    "dims ** ALPHA, e.g. 0.3; 'none': plain counts; 'auto': 0.3 with binary "
                                    "scoring (chosen on SciFact train)."),
    duplicate_queries: str = typer.Option("error", "--duplicate-queries", help="A query id on two lines of "
                                          "--queries: error (default), keep-first or keep-last (one warning "
                                          "gives the count)."),
) -> None:
    """Search an index; writes a TREC run to stdout."""
    from uhdsearch.encoder.query import open_query_encoder
    from uhdsearch.evaluation.datasets import load_queries
    from uhdsearch.index import open_index
    from uhdsearch.search.options import SearchOptions, cli_spelling
    from uhdsearch.search.searcher import Searcher
    from uhdsearch.types import Query, Run, format_run

    if (queries is None) == (query is None):
        raise UsageError("give exactly one of --queries FILE or --query TEXT")
    if k <= 0:
        raise UsageError(f"--k {k} must be a positive integer")
    options = SearchOptions.parse({"scoring": scoring, "query_k": query_k, "bucket_weights": bucket_weights,
                                   "max_df": max_df, "idf": idf, "cascade": cascade, "length_norm": length_norm},
                                  spell=cli_spelling)
    on_duplicate = {"error": "error", "keep-first": "first", "keep-last": "last"}.get(duplicate_queries)
    if on_duplicate is None:
        raise UsageError(f"--duplicate-queries {duplicate_queries!r}; choose error, keep-first or keep-last")
    items = list(load_queries(queries, on_duplicate).values()) if queries is not None else [Query("q1", query)]
    if lookup and (onnx or wta_k is not None):
        raise UsageError("--lookup encodes queries by a table fixed when `uhdsearch lookup` built it: --onnx and "
                         "--wta-k do not apply to it")
    if lookup and student is not None:
        raise UsageError("--lookup and --student are two query encoders: give one")
    kind = "table" if lookup else "student" if student is not None else "onnx" if onnx else "full"
    # read before the index is opened: a wrong table or student file fails fast
    encoder = open_query_encoder(model, kind, student=student, onnx=onnx and student is not None, wta_k=wta_k)
    index = open_index(index_dir)  # static, impact planes or segmented (uhdsearch index --ray, live updates)
    searcher = Searcher(encoder, index, options=options)
    run = searcher.rerank(items, Run.load(str(rerank)), k) if rerank else searcher.search(items, k)
    sys.stdout.write(format_run(run))


@app.command()
def evaluate(
    run: Path = typer.Option(..., "--run", help="TREC run file."),
    qrels: Path = typer.Option(..., "--qrels", help="qrels (BEIR TSV or TREC)."),
    measures: str = typer.Option("nDCG@10,RR@10,R@100,R@1000", "--measures"),
) -> None:
    """Score a TREC run against qrels with ir_measures; prints JSON."""
    from uhdsearch.evaluation.metrics import evaluate as evaluate_run
    from uhdsearch.evaluation.qrels import load_qrels
    from uhdsearch.types import load_run

    names = [m.strip() for m in measures.split(",") if m.strip()]
    scores = evaluate_run(load_run(run), load_qrels(qrels), names)
    typer.echo(json.dumps({m: round(v, 4) for m, v in scores.items()}))


@app.command(name="compare")
def compare_systems(
    data: Optional[Path] = typer.Option(None, "--data", help="BEIR-layout collection (default: bundled SciFact)."),
    train_data: Optional[Path] = typer.Option(None, "--train-data",
                                              help="Train and fit every learned part on this collection instead "
                                                   "(out of domain)."),
    systems: str = typer.Option("all", "--systems", help="Comma-separated system names, or 'all'."),
    out: Optional[Path] = typer.Option(None, "--out", help="Results JSON, e.g. benchmarks/results/baselines_scifact.json."),
    split: str = typer.Option("test", "--split", help="qrels split to evaluate on."),
    fast: bool = typer.Option(False, "--fast", help="The quickstart's fast UHD recipe (small head, 1 min training)."),
    backbone: Optional[Path] = typer.Option(None, "--backbone", help="Local Hugging Face BERT directory."),
    uhd_model: Optional[Path] = typer.Option(None, "--uhd-model", help="Evaluate this trained UHD model (e.g. the "
                                             "quickstart's out/quickstart/model) instead of training one."),
    document_max_length: int = typer.Option(256, "--document-max-length"),
    k: int = typer.Option(1000, "--k", help="Results per query."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out file."),
    list_systems: bool = typer.Option(False, "--list", help="Print the registered system names and exit."),
    search_option: Optional[list[str]] = typer.Option(None, "--search", help="KEY=VALUE: a search option of the "
                                                      "'uhd' system, as `uhdsearch search` takes it (e.g. "
                                                      "max_df=0.2, length_norm=none); repeatable."),
) -> None:
    """Build or train each system, evaluate on --split, print a table with paired t-tests against bm25."""
    from uhdsearch.experiments import SYSTEMS, compare

    if list_systems:
        typer.echo("\n".join(SYSTEMS))
        return
    if data is not None and not data.is_dir():
        raise FileNotFoundError(f"--data {data} is not a directory")
    if train_data is not None and not train_data.is_dir():
        raise FileNotFoundError(f"--train-data {train_data} is not a directory")
    if k <= 0:
        raise UsageError(f"--k {k} must be a positive integer")
    if document_max_length <= 0:
        raise UsageError(f"--document-max-length {document_max_length} must be a positive integer")
    options = _search_options(search_option or [])
    report = compare(data, systems, train_data_dir=train_data, split=split, fast=fast, backbone=backbone,
                     uhd_model=uhd_model, max_length=document_max_length, k=k, out_path=out, overwrite=overwrite,
                     search_options=options)
    typer.echo(report.format_table())
    if out is not None:
        typer.echo(f"wrote {out}")


def _search_options(pairs: list[str]):
    """compare's --search KEY=VALUE pairs -> SearchOptions (None when none are given)."""
    from uhdsearch.search.options import SearchOptions, cli_spelling

    if not pairs:
        return None
    values = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--search {pair!r}: give KEY=VALUE, e.g. max_df=0.2")
        values[key.strip().replace("-", "_")] = value.strip()
    return SearchOptions.parse(values, spell=cli_spelling)


from uhdsearch.cli.serve import serve  # noqa: E402

app.command()(serve)
from uhdsearch.cli.study import report, study  # noqa: E402  (the studies' commands, issue 18)

app.command()(study)
app.command()(report)
from uhdsearch.cli.lookup import lookup  # noqa: E402

app.command()(lookup)
from uhdsearch.cli.scale import export_app  # noqa: E402 - typer only; its commands import ray/pymilvus lazily

app.add_typer(export_app, name="export")
from uhdsearch.cli.info import info  # noqa: E402

app.command()(info)


def main(argv: list[str] | None = None) -> int:
    """Entry point: user errors become one `error: ...` line on stderr and exit code 2; bugs stay bugs.

    User errors are the project's own (UhdError and subclasses), file errors (OSError) and malformed command
    lines. Any other exception propagates with its traceback (a non-zero exit), because it is a bug.
    """
    try:
        return _run(argv)
    finally:
        show_progress_bars()  # --quiet hid them for this command only


def _run(argv: list[str] | None) -> int:
    _state["debug"] = False
    try:
        code = finite_floats(typer.main.get_command(app)).main(args=argv, standalone_mode=False)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:
        if isinstance(exc, _click_types("Abort")):
            typer.echo("aborted", err=True)
            return 130
        if isinstance(exc, _click_types("NoArgsIsHelpError")):  # typer has printed the usage already
            return 2
        if isinstance(exc, _click_types("ClickException")):  # malformed options or commands
            hint = " (see --help)" if getattr(exc, "ctx", None) is not None else ""
            typer.echo(f"error: {_one_line(Exception(exc.format_message()))}{hint}", err=True)
            return 2
        if not _is_user_error(exc) or _state["debug"]:
            raise
        typer.echo(f"error: {_one_line(exc)}", err=True)
        return 2
    # Without standalone mode, typer returns the code of a typer.Exit (Ctrl-C is Exit(130)) instead of exiting.
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def _is_user_error(exc: BaseException) -> bool:
    """The project's own errors (UhdError: bad input, named where) and file errors; anything else is a bug."""
    return isinstance(exc, (UhdError, OSError))


def _click_types(name: str) -> tuple[type, ...]:
    """`name` from typer's vendored click (typer._click in newer typer) and from click itself (older typer)."""
    import importlib

    found = []
    for module in ("typer._click.exceptions", "typer.exceptions", "click.exceptions"):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _one_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, KeyError):
        text = f"missing key {text}"
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
