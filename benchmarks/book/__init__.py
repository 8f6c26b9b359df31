"""The results book: the tables of `docs/results/*.md` and the README's headline, rendered from
`benchmarks/results/*.json`.

    .venv/bin/python -m benchmarks.book            # rewrite every generated table in place
    .venv/bin/python -m benchmarks.book --check    # exit 1 and name each table whose page differs from its JSON

A page marks a generated table with `<!-- table: NAME -->` ... `<!-- /table -->`; everything between the two
markers belongs to the renderer, everything outside them to the page's author.
"""
