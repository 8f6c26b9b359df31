"""Commands of the scale extras: `index --ray` (delegated here from `index`) and `export milvus`."""
from __future__ import annotations

import json
from pathlib import Path

import typer

export_app = typer.Typer(no_args_is_help=True, help="Write an index into another system.")


def index_on_ray(model: Path, corpus, out: Path, variant: str, batch_size: int, overwrite: bool, address: str,
                 workers: int) -> None:
    """`uhdsearch index --ray ADDRESS|local`: encode on Ray actors, write a segmented index."""
    from uhdsearch.scale.ray_index import build_on_ray

    built = build_on_ray(model, corpus, out, variant, address=None if address == "local" else address,
                         n_workers=workers, batch_size=batch_size, overwrite=overwrite)
    typer.echo(json.dumps({"index": str(out), "variant": variant, "n_documents": built.n_documents,
                           "n_segments": built.n_segments, "ray": address, "workers": workers}))
