#!/usr/bin/env bash
# Issue 17 item 2: the seed paper's CNN on FMNIST, 200 rounds, both partitions, at the step sizes the MLP
# study chose (docs/lab/results.md §2, not re-tuned for the CNN: FedAvg 0.1, FedLF with local SGD 0.1,
# FedALF 0.05; LDP-FedALF at FedALF's lr with the private defaults, epsilon 2).
# The sweeps run in order of what the tables need most; each is a folder runs/seed-cnn/<name>. Kill it
# whenever CPU time runs out and run it again: a finished sweep is skipped, a killed one resumes from its
# last checkpoint (`fedalf sweep --resume`). `ROUNDS=N bash experiments/seed_cnn.sh` (N > 200) extends each
# sweep it reaches to N rounds. Wall time per sweep: runs/seed-cnn/times.txt.
# Each sweep that finishes has its small files (config, metrics, summary; no checkpoints) kept in
# docs/cnn-runs/<name>, from which docs/lab/results.md §7's table and the curves are regenerated:
# `.venv/bin/fedalf report docs/cnn-runs --out docs/cnn-report`.
set -uo pipefail
cd "$(dirname "$0")/.."
. experiments/sweeps.sh  # sweep OUT NAME options: starts it, or resumes it if it exists
C="--model cnn --rounds ${ROUNDS:-200} --eval-every 10 --checkpoint-every 20"
run() { name=$1; shift; sweep runs/seed-cnn "$name" $C "$@" && keep runs/seed-cnn "$name" docs/cnn-runs; }
# one seed of each, pat1 first
run fedalf_pat1 --algorithm fedalf --partition pat1 --lr 0.05 --seeds 0
run fedavg_pat1 --algorithm fedavg --partition pat1 --lr 0.1 --seeds 0
run fedalf_pat2 --algorithm fedalf --partition pat2 --lr 0.05 --seeds 0
run fedavg_pat2 --algorithm fedavg --partition pat2 --lr 0.1 --seeds 0
run ldp-fedalf_pat1 --algorithm fedalf --ldp adaptive --epsilon 2 --partition pat1 --lr 0.05 --seeds 0
run fedlf-local_pat1 --algorithm fedlf --client-grad local --partition pat1 --lr 0.1 --seeds 0
run ldp-fedalf_pat2 --algorithm fedalf --ldp adaptive --epsilon 2 --partition pat2 --lr 0.05 --seeds 0
run fedlf-local_pat2 --algorithm fedlf --client-grad local --partition pat2 --lr 0.1 --seeds 0
# the second seed of FedAvg and FedALF on pat1 (the issue's minimum), then on pat2
run fedalf_pat1.s1 --algorithm fedalf --partition pat1 --lr 0.05 --seeds 1
run fedavg_pat1.s1 --algorithm fedavg --partition pat1 --lr 0.1 --seeds 1
run fedalf_pat2.s1 --algorithm fedalf --partition pat2 --lr 0.05 --seeds 1
run fedavg_pat2.s1 --algorithm fedavg --partition pat2 --lr 0.1 --seeds 1
# then the second seed of the others: FedLF-local on pat1 (FedALF vs FedLF is within one seed's reach
# there), LDP-FedALF on pat2 (its seed 0 ended level with FedAvg), then the other two
run fedlf-local_pat1.s1 --algorithm fedlf --client-grad local --partition pat1 --lr 0.1 --seeds 1
run ldp-fedalf_pat2.s1 --algorithm fedalf --ldp adaptive --epsilon 2 --partition pat2 --lr 0.05 --seeds 1
run ldp-fedalf_pat1.s1 --algorithm fedalf --ldp adaptive --epsilon 2 --partition pat1 --lr 0.05 --seeds 1
run fedlf-local_pat2.s1 --algorithm fedlf --client-grad local --partition pat2 --lr 0.1 --seeds 1
