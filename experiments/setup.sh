#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtual environment in .venv with fedalf-jax (editable) and its
# test extras, plus Debian's Fashion-MNIST when apt is available. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test]"
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && command -v apt-get >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"
  $SUDO apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 \
    || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1; } \
    || echo "setup: could not install dataset-fashion-mnist; pass --data-dir to fedalf run (see README)" >&2
fi
echo "setup: ready (.venv)"
