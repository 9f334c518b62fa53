#!/usr/bin/env bash
# One prepared GPU session (the device tool's H200; ~10 minutes of the 15 a session is lent).
# Measures what docs/benchmarks.md and docs/results.md leave open on a GPU: the round time with `lax`
# conv and vmapped clients, sweep-width scaling, and the long runs this repo's 2-core CPU cannot do
# (the CNN seed experiment, the MLP seed experiment extended to 500 rounds).
#
# Prepare once on the CPU machine, in the repo root (the device image has jax/flax/optax/chex, not jaxopt):
#   echo /.whl/ >> .git/info/exclude; echo /.data/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 -d .whl jaxopt==0.8.5
#   mkdir -p .data && cp /usr/share/datasets/fashion-mnist/*.gz .data/
# Then call the device tool's run with carry [".whl", ".data"] (run directories with checkpoints are
# too big to carry: the MLP history rows are 80 MB a run) and the command
#   bash experiments/gpu_session.sh
# Everything it measures lands in $OUT (JSON + logs + a tarball of the new run directories' small files).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:.
export FEDALF_DATA_DIR=$PWD/.data PYTHONUNBUFFERED=1
F="python3 -m fedalf_jax.cli"
budget() { timeout "$1" "${@:2}" 2>&1 | tee -a "$OUT/log.txt"; }
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$OUT/log.txt"
python3 -c "import jax; print(jax.__version__, jax.devices())" | tee -a "$OUT/log.txt"

# 1. round time: CNN and MLP, FedAvg and FedALF, lax conv + vmapped clients (the GPU defaults)
for m in cnn mlp; do for a in fedavg fedalf; do
  budget 90 $F bench --model $m --algorithm $a --conv-impl lax --client-map vmap --repeats 10 \
      --no-sequential --json "$OUT/round_${m}_${a}.json"
done; done
# 2. sweep-width scaling: W runs vmapped in one program against W separate runs
budget 150 $F bench --model cnn --algorithm fedalf --sweep-width 1 4 16 64 --repeats 5 --json "$OUT/sweep_width_cnn.json"
# 3. the CNN seed experiment (200 rounds, 2 seeds) and the MLP one at 500 rounds, 5 seeds
budget 200 python3 experiments/seed_experiment.py --model cnn --rounds 200 --tune-seeds 0 1 --extra-seeds \
    --only fedavg fedlf-local fedalf ldp-fedalf-local ldp-fedalf-perturbed --out runs/seed-cnn
budget 150 python3 experiments/seed_experiment.py --model mlp --rounds 500 --out runs/seed-mlp-500
# 4. FedALF's ablation (docs/results.md §1): upload rule × history × ρ, both partitions, 3 seeds
budget 150 $F sweep --algorithm fedalf --server-target increment augmented model --history on off \
    --rho 0.01 0.1 1 --model mlp --partition pat1 pat2 --lr 0.05 --seeds 0 1 2 --rounds 200 \
    --out runs/ablation-fedalf --no-progress --resume
tar czf "$OUT/runs.tgz" --exclude='*.npz' runs 2>/dev/null
ls -la "$OUT"
