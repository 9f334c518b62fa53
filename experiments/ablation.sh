#!/usr/bin/env bash
# Issue 17 item 3: FedALF's ablation (docs/lab/results.md §1) rerun and kept: upload rule × history rows ×
# ρ, MLP, both partitions, lr 0.05, η_g 0.5 (FedALF's non-private default), 200 rounds, seeds 0-2.
# One sweep per partition in runs/ablation/<partition>; kill and rerun to resume. When both are done it
# copies each run's small files (config.json, metrics.csv, summary.json; no checkpoints) to
# docs/ablation-runs/<partition>/, from which `fedalf report docs/ablation-runs --out <dir>` regenerates the table.
set -uo pipefail
cd "$(dirname "$0")/.."
. experiments/sweeps.sh  # sweep OUT NAME options: starts it, or resumes it if it exists
C="--algorithm fedalf --server-target increment augmented model --history on off --rho 0.01 0.1 1
   --model mlp --lr 0.05 --seeds 0 1 2 --rounds 200 --eval-every 10 --checkpoint-every 50"
ok=1
for part in ${PARTS:-pat1 pat2}; do
  sweep runs/ablation "$part" $C --partition "$part" || ok=0
done
[ $ok = 1 ] || exit 1
for part in pat1 pat2; do
  if [ -f "runs/ablation/$part/sweep.json" ]; then keep runs/ablation "$part" docs/ablation-runs; fi
done
