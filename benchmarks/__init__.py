"""uhdsearch's benchmarks, run from the repository root as modules: `python -m benchmarks.speed.search_speed`.

speed/        timings (search, encoding, end to end, growth, load, the service, scale-out)
experiments/  the runs that chose a default; each module's docstring names the default it chose
lib/          settings (configs/*.toml), the one timer, the encoded cache, synthetic data, the peers (bm25s, Seismic)
configs/      one TOML file of settings per module; results/  the result JSON of each module's last run
"""
