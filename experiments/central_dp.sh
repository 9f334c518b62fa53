#!/usr/bin/env bash
# Issue #15 item 5: central user-level DP (DP-FedAvg) at this federation's size, FMNIST MLP pat1, 200 rounds.
# Each setting is one sweep in runs/central-dp/<name>; `python experiments/ldp_study_table.py runs/central-dp`.
set -uo pipefail
cd "$(dirname "$0")/.."
C="--model mlp --partition pat1 --dp central --rounds 200 --eval-every 10 --no-progress --seeds 0 1"
run() { name=$1; shift; s=$(date +%s); .venv/bin/fedalf sweep $C "$@" --out "runs/central-dp/$name" \
          > "runs/central-dp/$name.log" 2>&1; echo "$name rc=$? $(( $(date +%s) - s )) s" >> runs/central-dp/times.txt; }
mkdir -p runs/central-dp
run fedavg_eps --algorithm fedavg --epsilon 2 8 --clip 1.0
run fedalf_eps2 --algorithm fedalf --history off --epsilon 2 --clip 1.0
