#!/usr/bin/env bash
# FedLF's Table 1, the Fashion-MNIST rows (issue 59), with FedLF's protocol: the MLP, N = 100 clients, C = 0.1,
# B = 50, E = 1, lr 0.1 decayed by 0.999 per round, 3,000 rounds, 5 seeds, both pathological partitions (this
# project's pat1 is two classes per client, FedLF's Pat-2; pat2 one class, FedLF's Pat-1). Each algorithm's 5 seeds
# are one sweep (one program), checkpointed every 250 rounds, compressed; run again to resume what is unfinished.
#   bash experiments/fedlf_table1.sh [OUT [NAME ...]]   # OUT defaults to runs/table1; NAMEs pick rows, e.g. fedavg-pat1
# FedLF sends full gradients: its 0.1 is the server step (--server-lr), its clients take no local step. FedMDFG
# (examples/fedmdfg.py) joins when it is present. ~30-40 min of one core per FedLF sweep on a 2-core CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/table1}
shift || true
ONLY=("$@")
FEDALF=${FEDALF:-.venv/bin/fedalf}
COMMON=(--dataset fmnist --model mlp --clients 100 --clients-per-round 10 --batch-size 50 --local-epochs 1
        --rounds 3000 --seeds 0 1 2 3 4 --eval-every 100 --checkpoint-every 250 --compress-checkpoints --no-progress)
JOBS=("fedlf-pat1 --partition pat1 --algorithm fedlf --server-lr 0.1 --server-lr-decay 0.999"
      "fedlf-pat2 --partition pat2 --algorithm fedlf --server-lr 0.1 --server-lr-decay 0.999"
      "fedavg-pat1 --partition pat1 --algorithm fedavg --lr 0.1 --lr-decay 0.999"
      "fedavg-pat2 --partition pat2 --algorithm fedavg --lr 0.1 --lr-decay 0.999"
      "qfedavg-pat1 --partition pat1 --algorithm qfedavg --lr 0.1 --lr-decay 0.999 --q 0.1"
      "qfedavg-pat2 --partition pat2 --algorithm qfedavg --lr 0.1 --lr-decay 0.999 --q 0.1"
      "fedalf-pat1 --partition pat1 --algorithm fedalf --lr 0.1 --lr-decay 0.999"
      "fedalf-pat2 --partition pat2 --algorithm fedalf --lr 0.1 --lr-decay 0.999"
      "ldp-fedalf-pat1 --partition pat1 --algorithm fedalf --ldp adaptive --epsilon 2 --lr 0.1 --lr-decay 0.999"
      "ldp-fedalf-pat2 --partition pat2 --algorithm fedalf --ldp adaptive --epsilon 2 --lr 0.1 --lr-decay 0.999")
if [ -f examples/fedmdfg.py ]; then
  JOBS+=("fedmdfg-pat1 --partition pat1 --algorithm examples.fedmdfg:fedmdfg --lr 0.1 --lr-decay 0.999"
         "fedmdfg-pat2 --partition pat2 --algorithm examples.fedmdfg:fedmdfg --lr 0.1 --lr-decay 0.999")
fi
status=0
for job in "${JOBS[@]}"; do
  read -r name opts <<< "$job"
  if [ ${#ONLY[@]} -gt 0 ] && [[ ! " ${ONLY[*]} " == *" $name "* ]]; then continue; fi
  dir="$OUT/$name"
  if [ -f "$dir/sweep.json" ]; then
    # shellcheck disable=SC2086
    "$FEDALF" sweep --resume --out "$dir" --no-progress || { echo "fedlf_table1: $name did not finish" >&2; status=1; }
  else
    # shellcheck disable=SC2086
    "$FEDALF" sweep "${COMMON[@]}" $opts --out "$dir" || { echo "fedlf_table1: $name did not finish" >&2; status=1; }
  fi
done
exit $status
