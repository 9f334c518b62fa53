#!/usr/bin/env bash
# Issue 17 item 1: the seed paper's experiment on the MLP at the paper's 500 rounds, 5 seeds, both
# partitions, at the step sizes the 200-round study tuned (docs/lab/results.md §2: η over {0.01, 0.05, 0.1},
# best seed-mean final accuracy, the same η on both partitions), not re-tuned at 500 rounds.
# The private variant is the one users run: `--ldp adaptive --epsilon 2` with its guarantee-holding
# defaults (noise on the update, denoised length, model upload, η_g 1; docs/lab/results.md §5), at FedALF's η.
# Each sweep is runs/seed-mlp500/<name> (both partitions × seeds 0-4); kill it whenever and run it
# again: a finished sweep is skipped, a killed one resumes from its last checkpoint. Wall time per sweep:
# runs/seed-mlp500/times.txt. Tables (docs/lab/results.md §2): `.venv/bin/fedalf report runs/seed-mlp500 --out docs/report-example`.
set -uo pipefail
cd "$(dirname "$0")/.."
. experiments/sweeps.sh  # sweep OUT NAME options: starts it, or resumes it if it exists
C="--model mlp --partition pat1 pat2 --seeds 0 1 2 3 4 --rounds 500 --eval-every 10 --checkpoint-every 50"
run() { name=$1; shift; sweep runs/seed-mlp500 "$name" $C "$@"; }
run fedalf --algorithm fedalf --lr 0.05
run fedavg --algorithm fedavg --lr 0.1
run ldp-fedalf --algorithm fedalf --ldp adaptive --epsilon 2 --lr 0.05
run fedlf-local --algorithm fedlf --client-grad local --lr 0.1
run fedlf-full --algorithm fedlf --client-grad full --server-lr 0.05
run qfedavg --algorithm qfedavg --lr 0.1
