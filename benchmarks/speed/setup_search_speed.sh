#!/usr/bin/env bash
# Set-up for benchmarks/speed/search_speed.py: real-text dictionaries for the bm25s rows, Seismic for its rows.
set -euo pipefail
cd "$(dirname "$0")/../.."  # the repository root
PY=${PY:-.venv/bin/python}
# gcide: /usr/share/dictd/gcide.dict.dz (dictd format); wordnet-base: /usr/share/wordnet/data.{noun,verb,adj,adv}
SUDO=$(command -v sudo >/dev/null && [ "$(id -u)" != 0 ] && echo sudo || true)
$SUDO apt-get install -y --no-install-recommends dict-gcide wordnet-base
"$PY" -m pip install --quiet pyseismic-lsr
"$PY" - <<'PY'
import pathlib
for p in ["/usr/share/dictd/gcide.dict.dz", "/usr/share/wordnet/data.noun"]:
    print(p, "ok" if pathlib.Path(p).exists() else "MISSING")
import seismic
print("seismic", getattr(seismic, "__version__", "?"), [n for n in dir(seismic) if "Index" in n])
PY
