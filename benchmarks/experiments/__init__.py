"""The runs that chose a default (each module's docstring names it): `python -m benchmarks.experiments.<name>`."""
