"""Commands of the scale extras: `index --ray` (delegated here from `index`) and `export milvus`."""
from __future__ import annotations

import json
from pathlib import Path

import typer

export_app = typer.Typer(no_args_is_help=True, help="Write an index into another system.")


def index_on_ray(model: Path, corpus, out: Path, variant: str, batch_size: int, overwrite: bool, address: str,
                 workers: int, gpus_per_worker: float = 0.0) -> None:
    """`uhdsearch index --ray ADDRESS|local`: encode on Ray actors, write a segmented index."""
    from uhdsearch.scale.ray_index import build_on_ray

    built = build_on_ray(model, corpus, out, variant, address=None if address == "local" else address,
                         n_workers=workers, batch_size=batch_size, overwrite=overwrite,
                         gpus_per_worker=gpus_per_worker)
    typer.echo(json.dumps({"index": str(out), "variant": variant, "n_documents": built.n_documents,
                           "n_segments": built.n_segments, "ray": address, "workers": workers,
                           "gpus_per_worker": gpus_per_worker}))


@export_app.command("milvus")
def export_milvus(
    index_dir: Path = typer.Argument(..., help="Index directory (binary exports 1.0s, weighted its values)."),
    uri: str = typer.Option(..., "--uri", help="A milvus-lite file (uhd.db) or a Milvus server URL."),
    collection: str = typer.Option(..., "--collection", help="Collection name."),
    batch_size: int = typer.Option(1000, "--batch-size", help="Documents per insert."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Drop an existing collection of that name."),
) -> None:
    """Write each document's UHD vector to Milvus as a SPARSE_FLOAT_VECTOR (inner product)."""
    from uhdsearch.scale.milvus import export_to_milvus

    report = export_to_milvus(index_dir, uri, collection, batch_size=batch_size, overwrite=overwrite)
    typer.echo(json.dumps({**report, "skipped": len(report["skipped"]), "uri": uri}))
