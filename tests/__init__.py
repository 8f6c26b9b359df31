"""uhdsearch's tests, a package so that their helpers import by full name (`tests.index.index_oracle`,
`tests.hardening.crash_harness`) with the repository root on sys.path (pyproject.toml's pytest `pythonpath`)."""
