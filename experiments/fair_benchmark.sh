#!/usr/bin/env bash
# The fair-FL benchmark (issue 37 item 10): every fair and personalised method on FMNIST, MLP, pat1 and pat2,
# 3 seeds, 200 rounds, each method's local learning rate chosen per cell from {0.01, 0.05, 0.1} by the
# report's rule (the best final mean accuracy over seeds; FedLF, whose clients send full gradients, by its
# server step from the same grid), then one table: mean accuracy, angle, worst 10%, personalised accuracy.
#
#   bash experiments/fair_benchmark.sh [OUT]        # OUT defaults to runs/fair-benchmark
#
# SEEDS, LRS (the local learning rates), FEDLF_LRS (FedLF's server steps) and ROUNDS override the grid; the
# table in docs/fair.md was made by the reduced grid that fits a 2-core CPU in about half an hour:
#   SEEDS="0 1" LRS=0.05 FEDLF_LRS=0.05 bash experiments/fair_benchmark.sh runs/fair-quick
#
# Resumable: killed, run it again (experiments/sweeps.sh): the ended runs are kept, the others start again
# (the runs keep no checkpoints, --checkpoint-every never). The small files of every run are kept in
# docs/fair-runs/ and the table in docs/fair-report/ (fedalf report). On a 2-core CPU expect hours: the 14
# methods x 2 partitions x 3 seeds x 3 rates are 252 runs of 200 rounds (each rate's seeds one program).
set -euo pipefail
cd "$(dirname "$0")/.."
. experiments/sweeps.sh
OUT=${1:-runs/fair-benchmark}
read -r -a seeds <<< "${SEEDS:-0 1 2}"; read -r -a lrs <<< "${LRS:-0.01 0.05 0.1}"
read -r -a fedlf_lrs <<< "${FEDLF_LRS:-0.01 0.05 0.1}"
COMMON=(--dataset fmnist --model mlp --partition pat1 pat2 --rounds "${ROUNDS:-200}" --seeds "${seeds[@]}"
        --checkpoint-every never)  # the small files are what is kept (docs/fair-runs)
LOCAL=(fedavg qfedavg fedalf examples.afl:afl examples.fedmgda:fedmgda examples.term:term
       examples.propfair:propfair examples.fedfv:fedfv examples.ditto:ditto examples.fedper:fedper
       examples.fedrep:fedrep examples.apfl:apfl)
for alg in "${LOCAL[@]}"; do
  name=${alg##*:}
  sweep "$OUT" "$name" --algorithm "$alg" --lr "${lrs[@]}" "${COMMON[@]}" || echo "$name failed (see $OUT/$name.log)"
done
sweep "$OUT" ldp-fedalf --algorithm fedalf --ldp adaptive --epsilon 2 --lr "${lrs[@]}" "${COMMON[@]}" \
  || echo "ldp-fedalf failed"
sweep "$OUT" fedlf --algorithm fedlf --server-lr "${fedlf_lrs[@]}" "${COMMON[@]}" || echo "fedlf failed"
for d in "$OUT"/*/; do
  [ -f "$d/sweep.json" ] && keep "$OUT" "$(basename "$d")" docs/fair-runs
done
.venv/bin/fedalf report docs/fair-runs --out docs/fair-report
