"""Timings: `python -m benchmarks.speed.<name> --config benchmarks/configs/<name>.toml`."""
