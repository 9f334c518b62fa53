#!/usr/bin/env bash
# A prepared GPU session in three steps, one device-tool call each (the device tool's H200: 15 minutes
# of device time a session, machine start included, and at most 600 s a command). Each step stops
# itself within its limit (default 240 s, at most 540 s) and leaves every result in $OUT as soon as it
# is measured, so a step cut short still returns what it finished:
#   1  round time: CNN and MLP × FedAvg and FedALF (fedalf bench --suite gpu --part round)
#   2  sweep-width scaling: CNN FedALF, W = 1, 8, 32, 64 runs in one program against W separate runs,
#      stopping at the first W that runs out of memory (fedalf bench --suite gpu --part sweep)
#   3  a 500-round FMNIST FedALF MLP run (pat1, --matmul-precision highest, so that it compares with
#      the CPU runs of docs/results.md); config.json, clients.json, metrics.csv and summary.json are
#      copied to $OUT every 20 s and at the end (not the .npz checkpoints). Run again on the same warm
#      machine, it continues the run (--resume).
# At the defaults the three steps take at most 3 × 240 s = 12 minutes; give a step more on its own,
# e.g. `bash experiments/gpu_session.sh 2 540` for the widths a shorter step skips.
#
# Prepare once on the CPU machine, in the repo root (the device image has jax/flax/optax/chex, not jaxopt):
#   echo /.whl/ >> .git/info/exclude; echo /.data/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 -d .whl jaxopt==0.8.5
#   mkdir -p .data && cp /usr/share/datasets/fashion-mnist/*.gz .data/
# Then, per step, call the device tool's run with carry [".whl", ".data"] and the command
#   bash experiments/gpu_session.sh 1        (then 2, then 3; timeout_s a little above the step's limit)
# Run directories are not carried (the MLP history rows are 80 MB a run); everything a step measures
# lands in $OUT: bench/<measurement>.json, bench/table.txt, stepN.log, run-fedalf-mlp-500/.
#
# A dry run on a CPU (a minute or two a step, synthetic data): PATH=.venv/bin:$PATH SUITE=smoke \
#   EXTRA="--dataset synthetic --rounds 20 --eval-every 5" OUT=/tmp/gpu-dry bash experiments/gpu_session.sh 3
# (SUITE picks the bench suite of steps 1 and 2; EXTRA is appended to every fedalf command.)
set -uo pipefail
STEP=${1:-}
case "$STEP" in
  1) LIMIT=${2:-240} ;;
  2) LIMIT=${2:-240} ;;
  3) LIMIT=${2:-240} ;;
  *) echo "usage: bash experiments/gpu_session.sh STEP [SECONDS]  (STEP 1, 2 or 3; SECONDS <= 540)" >&2; exit 2 ;;
esac
MAX_STEP_S=540
if ! [[ "$LIMIT" =~ ^[0-9]+$ ]] || (( LIMIT < 60 || LIMIT > MAX_STEP_S )); then
  echo "gpu_session: a step's SECONDS must be 60..$MAX_STEP_S, got $LIMIT" >&2; exit 2
fi
OUT=${OUT:-/tmp/gpu-out}
SUITE=${SUITE:-gpu}
EXTRA=${EXTRA:-}
mkdir -p "$OUT"
LOG="$OUT/step$STEP.log"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:.
fi
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.95}
[ -d .data ] && export FEDALF_DATA_DIR=$PWD/.data
F="python3 -m fedalf_jax.cli"
left() { echo $(( LIMIT - SECONDS )); }  # seconds of this step's limit left (bash's SECONDS: since start)
# budget S CMD...: CMD gets S seconds, then one SIGINT (fedalf finishes what is in flight, writes it and
# exits; --foreground: without it timeout signals twice, and a second Ctrl-C leaves at once), SIGKILL 10 s later
budget() { timeout --foreground -s INT -k 10 "$1" "${@:2}" 2>&1 | tee -a "$LOG"; }
{ nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null || echo "no nvidia-smi"
  python3 -c "import jax; print('jax', jax.__version__, jax.devices())"; } 2>&1 | tee -a "$LOG"

case "$STEP" in
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
    budget $(( $(left) - 25 )) $F run --algorithm fedalf --model mlp --dataset fmnist --partition pat1 \
        --rounds 500 --matmul-precision highest --checkpoint-every 500 --out "$RUN" --resume --no-progress $EXTRA
    kill "$COPIER" 2>/dev/null
    wait "$COPIER" 2>/dev/null
    copy
    ;;
esac
echo "step $STEP: $SECONDS s of $LIMIT" | tee -a "$LOG"
ls -la "$OUT" "$OUT"/* 2>/dev/null | tee -a "$LOG" >/dev/null
