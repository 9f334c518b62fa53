#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtual environment in .venv with fedalf-jax (editable) and its
# test and docs extras (pytest; sphinx and myst-parser for the guide's strict build), plus Debian's
# Fashion-MNIST when apt is available. Safe to run again.
# More extras as arguments: `bash experiments/setup.sh notebooks` adds Jupyter (the README's notebook
# command; ~50 more packages, so not by default), `tensorboard`, `tfds`; `torch` makes a second environment,
# .venv-torch, with PyTorch (CPU) for `fedalf bench --pytorch .venv-torch/bin/python` and
# experiments/torch_ratio.sh (TORCH_INDEX: a pip index for torch, e.g. https://download.pytorch.org/whl/cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=test,docs
TORCH=0
for extra in "$@"; do
  case "$extra" in
    notebooks|tensorboard|tfds) EXTRAS="$EXTRAS,$extra" ;;
    torch) TORCH=1 ;;
    *) echo "setup: unknown extra '$extra' (choose from notebooks, tensorboard, tfds, torch)" >&2; exit 2 ;;
  esac
done
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# setuptools' editable build prints an informational box ("Editable installation ... be careful with
# folders named like the package"); it is not a problem here, so it is silenced. experiments/constraints.txt:
# versions kept out because they are slower (each line says why)
PYTHONWARNINGS="ignore:Editable installation${PYTHONWARNINGS:+,$PYTHONWARNINGS}" \
  .venv/bin/python -m pip install --quiet -c experiments/constraints.txt -e ".[$EXTRAS]"
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && command -v apt-get >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"
  $SUDO apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 \
    || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1; } \
    || echo "setup: could not install dataset-fashion-mnist; pass --data-dir to fedalf run (see README)" >&2
fi
# jemalloc: the fedalf command preloads it so that a round reuses the pages the last one freed (glibc's malloc
# maps and unmaps XLA's large temporaries every round: fedalf_jax/allocator.py); without it the command runs on
if [ ! -f /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 ] && [ ! -f /usr/lib/aarch64-linux-gnu/libjemalloc.so.2 ] \
    && command -v apt-get >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO="sudo"
  $SUDO apt-get install -y -q libjemalloc2 >/dev/null 2>&1 \
    || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q libjemalloc2 >/dev/null 2>&1; } \
    || echo "setup: could not install libjemalloc2; fedalf runs with glibc's malloc (huge pages)" >&2
fi
if [ "$TORCH" = 1 ]; then  # what experiments/torch_round.py imports: torch and numpy
  [ -x .venv-torch/bin/python ] || "$PY" -m venv .venv-torch
  .venv-torch/bin/python -m pip install --quiet --upgrade pip
  .venv-torch/bin/python -m pip install --quiet ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} torch numpy
  echo "setup: ready (.venv-torch: $(.venv-torch/bin/python -c 'import torch; print("torch", torch.__version__)'))"
fi
echo "setup: ready (.venv)"
