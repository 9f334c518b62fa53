#!/usr/bin/env bash
# A GPU session in four steps, for a machine with an NVIDIA GPU (README, "GPU": set-up, checking that
# JAX sees the GPU). Run from anywhere; results land in $OUT (default runs/gpu-session in the checkout).
#   0  smoke (~30 s): import jax, print its version and devices, one round of a tiny synthetic FedALF
#      run (runs/gpu-session/smoke-run); stops with an error if anything fails or JAX sees no GPU
#   1  round time: CNN and MLP × FedAvg and FedALF (fedalf bench --suite gpu --part round)
#   2  sweep-width scaling: CNN FedALF, W = 1, 8, 32, 64 runs in one program against W separate runs,
#      stopping at the first W that runs out of memory (fedalf bench --suite gpu --part sweep)
#   3  a 500-round FMNIST FedALF MLP run (pat1, --matmul-precision highest, so that it compares with
#      the CPU runs of docs/lab/results.md) in runs/gpu-fedalf-mlp-500; config.json, clients.json,
#      metrics.csv and summary.json are copied to $OUT every 20 s and at the end (not the .npz
#      checkpoints). Run again, it continues the run (--resume).
#   bash experiments/gpu_session.sh 0        (then 1, 2, 3)
# Steps 1-3 stop themselves within SECONDS (default 240, at most 540; `... 2 540` for the widths a shorter
# step skips), leaving every result in $OUT as soon as it is measured, so a step cut short keeps what it
# finished: $OUT/bench/<measurement>.json, $OUT/bench/table.txt, $OUT/stepN.log, $OUT/run-fedalf-mlp-500/.
# Exit status: 0 when the step finished or stopped at its time limit (it says which), non-zero (the failing
# command's) on any error.
#
# Python: $PYTHON, else the checkout's .venv/bin/python (bash experiments/setup.sh makes it). Wheels in
# .whl/ (a machine without network: `pip download` them elsewhere) are installed into /tmp/site first.
# Fashion-MNIST: .data/ when present, else where fedalf finds it (README). A dry run on a CPU (synthetic
# data, a minute or two a step): ALLOW_CPU=1 SUITE=smoke EXTRA="--dataset synthetic --rounds 20 --eval-every 5" \
#   OUT=/tmp/gpu-dry bash experiments/gpu_session.sh 3
# (SUITE picks the bench suite of steps 1 and 2; EXTRA is appended to every fedalf command of steps 1-3.)
set -euo pipefail
case "${OUT:-}" in ""|/*) ;; *) OUT=$PWD/$OUT ;; esac  # a relative $OUT: from where the script was started
cd "$(dirname "$0")/.."
STEP=${1:-}
case "$STEP" in
  0) LIMIT=${2:-120} ;;
  1) LIMIT=${2:-240} ;;
  2) LIMIT=${2:-240} ;;
  3) LIMIT=${2:-240} ;;
  *) echo "usage: bash experiments/gpu_session.sh STEP [SECONDS]  (STEP 0 (smoke), 1, 2 or 3; SECONDS <= 540)" >&2; exit 2 ;;
esac
MAX_STEP_S=540
if ! [[ "$LIMIT" =~ ^[0-9]+$ ]] || (( LIMIT < 60 || LIMIT > MAX_STEP_S )); then
  echo "gpu_session: a step's SECONDS must be 60..$MAX_STEP_S, got $LIMIT" >&2; exit 2
fi
PY=${PYTHON:-.venv/bin/python}
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "gpu_session: no Python at $PY: run 'bash experiments/setup.sh' first (README, GPU), or set PYTHON=/path/to/python" >&2
  exit 2
fi
OUT=${OUT:-runs/gpu-session}
SUITE=${SUITE:-gpu}
EXTRA=${EXTRA:-}
mkdir -p "$OUT"
LOG="$OUT/step$STEP.log"
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.95}
if [ -d .data ]; then export FEDALF_DATA_DIR=$PWD/.data; fi
F="$PY -m fedalf_jax.cli"
left() { echo $(( LIMIT - SECONDS )); }  # seconds of this step's limit left (bash's SECONDS: since start)
# budget S CMD...: CMD gets S seconds, then one SIGINT (fedalf finishes what is in flight, writes it and
# exits; --foreground: without it timeout signals twice, and a second Ctrl-C leaves at once), SIGKILL 10 s
# later. Its status: 0 done; 124 stopped at the limit (said so; the smoke step must finish: an error there);
# anything else is the command's error, which ends the script with that status.
budget() {
  local rc=0
  timeout --foreground -s INT -k 10 "$1" "${@:2}" 2>&1 | tee -a "$LOG" || rc=$?
  if (( rc == 124 )) && [ "$STEP" != 0 ]; then
    echo "gpu_session: step $STEP stopped at its limit of $LIMIT s; what it finished is in $OUT (run the step again" \
         "with more SECONDS for the rest)" | tee -a "$LOG"
  elif (( rc != 0 )); then
    echo "gpu_session: step $STEP failed (exit $rc); see $LOG" | tee -a "$LOG" >&2
    exit "$rc"
  fi
}
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total --format=csv 2>&1 | tee -a "$LOG" || true
else
  echo "gpu_session: no nvidia-smi" | tee -a "$LOG"
fi
# the device check, every step: jax imports, its version, what it computes on
if ! "$PY" -c "import jax; print('jax', jax.__version__, 'backend', jax.default_backend(), 'devices', jax.devices())" \
    2>&1 | tee -a "$LOG"; then
  echo "gpu_session: $PY cannot import jax (see $LOG): run 'bash experiments/setup.sh' and install JAX's CUDA build (README, GPU)" >&2
  exit 1
fi
BACKEND=$("$PY" -c "import jax; print(jax.default_backend())" 2>/dev/null)
if [ "$BACKEND" = cpu ] && [ -z "${ALLOW_CPU:-}" ]; then
  echo "gpu_session: jax sees no GPU (backend cpu): install JAX's CUDA build, '$PY -m pip install \"jax[cuda13]==0.10.2\"' (README, GPU), or set ALLOW_CPU=1 for a dry run on the CPU" >&2
  exit 1
fi

case "$STEP" in
  0)
    budget $(( $(left) - 15 )) $F run --algorithm fedalf --model mlp --dataset synthetic --clients 6 \
        --clients-per-round 3 --synthetic-train 300 --synthetic-test 60 --rounds 1 --eval-every 1 \
        --out "$OUT/smoke-run" --overwrite --no-progress
    grep -q '"status": "done"' "$OUT/smoke-run/summary.json" \
      || { echo "gpu_session: the smoke run did not finish (no done summary in $OUT/smoke-run)" >&2; exit 1; }
    echo "gpu_session: smoke OK: jax on $BACKEND ran one FedALF round" | tee -a "$LOG"
    ;;
  1|2)
    PART=$([ "$STEP" = 1 ] && echo round || echo sweep)
    # --budget: no measurement is started that the finished ones predict would end after it
    budget $(( $(left) - 15 )) $F bench --suite "$SUITE" --part $PART --out "$OUT/bench" \
        --budget $(( $(left) - 45 )) $EXTRA
    ;;
  3)
    RUN=runs/gpu-fedalf-mlp-500
    DEST="$OUT/run-fedalf-mlp-500"
    copy() {
      mkdir -p "$DEST"
      for f in config.json clients.json metrics.csv summary.json; do
        [ -f "$RUN/$f" ] && cp "$RUN/$f" "$DEST/.$f.part" && mv "$DEST/.$f.part" "$DEST/$f"
      done
      return 0
    }
    ( trap 'kill $! 2>/dev/null; exit 0' TERM; while true; do sleep 20 & wait $!; copy; done ) >/dev/null 2>&1 &
    COPIER=$!
    trap 'kill "$COPIER" 2>/dev/null || true' EXIT  # also when the run fails
    budget $(( $(left) - 25 )) $F run --algorithm fedalf --model mlp --dataset fmnist --partition pat1 \
        --rounds 500 --matmul-precision highest --checkpoint-every 500 --out "$RUN" --resume --no-progress $EXTRA
    kill "$COPIER" 2>/dev/null || true
    wait "$COPIER" 2>/dev/null || true
    copy
    ;;
esac
echo "step $STEP: $SECONDS s of $LIMIT" | tee -a "$LOG"
ls -la "$OUT" "$OUT"/* 2>/dev/null | tee -a "$LOG" >/dev/null || true
