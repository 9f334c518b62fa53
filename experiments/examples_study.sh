#!/usr/bin/env bash
# Issue #28 item 9: the examples/ algorithms against FedAvg and FedProx on Fashion-MNIST (docs/extending.md,
# "The examples on Fashion-MNIST"): MLP, 100 clients, 10 per round, 100 rounds, lr 0.05, seeds 0-2, under
# pat1 and Dirichlet(0.3); FedAdam and FedYogi at eta_g 0.03 with beta1 0.9 and 0.99 in one program.
# One sweep per partition and group in runs/examples/<group>-<partition>; kill and
# rerun to resume. Each finished sweep's small files are copied to docs/examples-runs/, from which
#   .venv/bin/fedalf report docs/examples-runs --out runs/examples-report
# regenerates the table.
set -uo pipefail
cd "$(dirname "$0")/.."
. experiments/sweeps.sh  # sweep OUT NAME options: starts it, or resumes it if it exists
C="--dataset fmnist --model mlp --lr 0.05 --seeds 0 1 2 --rounds 100 --eval-every 10 --checkpoint-every 50"
declare -A GROUP=(
  [base]="fedavg fedprox examples.scaffold:scaffold examples.fednova:fednova"
  [adaptive]="examples.fedadam:fedadam examples.fedadam:fedyogi"
  [personal]="examples.ditto:ditto"
)
declare -A EXTRA=(  # FedAdam/FedYogi: an adaptive server step wants a small eta_g; beta1 swept in one program
  [adaptive]="--server-lr 0.03 --hp beta1=0.9,0.99"
  [personal]="--hp lam=0.1,1"  # Ditto's lambda swept in one program
)
declare -A PART=([pat1]="--partition pat1" [dir0.3]="--partition dirichlet --alpha 0.3")
ok=1
for g in ${GROUPS_:-base adaptive personal}; do
  for p in ${PARTS:-pat1 dir0.3}; do
    # shellcheck disable=SC2086  # word-split option lists
    if sweep runs/examples "$g-$p" $C --algorithm ${GROUP[$g]} ${EXTRA[$g]:-} ${PART[$p]}; then
      keep runs/examples "$g-$p" docs/examples-runs
    else
      ok=0
    fi
  done
done
[ $ok = 1 ]
