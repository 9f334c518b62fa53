#!/usr/bin/env bash
# Issue #15 item 5: central user-level DP (DP-FedAvg) at this federation's size, FMNIST MLP pat1, 200 rounds.
# Each setting is one sweep in runs/central-dp/<name>; `python experiments/ldp_study_table.py runs/central-dp`.
set -uo pipefail
cd "$(dirname "$0")/.."
. experiments/sweeps.sh  # sweep OUT NAME options: starts it, or resumes it if it exists
C="--model mlp --partition pat1 --dp central --rounds 200 --eval-every 10 --seeds 0 1"
run() { name=$1; shift; sweep runs/central-dp "$name" $C "$@"; }
run fedavg_eps --algorithm fedavg --epsilon 2 8 --clip 1.0
run fedalf_eps2 --algorithm fedalf --history off --epsilon 2 --clip 1.0
