#!/usr/bin/env bash
# The fair-FL benchmark (issue 37 item 10): every fair and personalised method on FMNIST, MLP, pat1 and pat2,
# 3 seeds, 200 rounds, each method's local learning rate chosen per cell from {0.01, 0.05, 0.1} by the
# report's rule (the best final mean accuracy over seeds; FedLF, whose clients send full gradients, by its
# server step from the same grid), then one table: mean accuracy, angle, worst 10%, personalised accuracy.
#
#   bash experiments/fair_benchmark.sh [OUT]        # OUT defaults to runs/fair-benchmark
#
# SEEDS, LRS (the local learning rates), FEDLF_LRS (FedLF's server steps) and ROUNDS override the grid; KEEP and
# REPORT the folders of the kept runs and of the report. The first, reduced run (1 seed, 100 rounds, one η;
# about 11 minutes on a 2-core CPU) was
#   ROUNDS=100 SEEDS=0 LRS=0.05 FEDLF_LRS=0.05 KEEP=docs/fair-quick-runs REPORT=docs/fair-quick-report \
#     bash experiments/fair_benchmark.sh runs/fair-quick
# JOBS (default 2) sweeps run at once: one sweep's program keeps about one core busy on a CPU.
#
# Resumable: killed, run it again (experiments/sweeps.sh): ended sweeps return at once, the others resume
# from their last checkpoint (every 50 rounds). The small files of every run are kept in KEEP (docs/fair-runs/)
# and the table in REPORT (docs/fair-report/, fedalf report), of the sweeps whose runs all ended: a sweep that
# failed is named on stderr, keeps the KEEP/NAME of an earlier invocation as it was, and is left out of the
# report; the script then exits with status 1 (run it again to resume). FEDALF is the fedalf command (default
# .venv/bin/fedalf). On a 2-core CPU expect about 4 hours of CPU: the 14 methods x 2 partitions x 3 seeds x 3
# rates are 252 runs of 200 rounds (each partition's 9 runs one program).
set -euo pipefail
cd "$(dirname "$0")/.."
. experiments/sweeps.sh
OUT=${1:-runs/fair-benchmark}
KEEP=${KEEP:-docs/fair-runs}
REPORT=${REPORT:-docs/fair-report}
read -r -a seeds <<< "${SEEDS:-0 1 2}"; read -r -a lrs <<< "${LRS:-0.01 0.05 0.1}"
read -r -a fedlf_lrs <<< "${FEDLF_LRS:-0.01 0.05 0.1}"
COMMON=(--dataset fmnist --model mlp --partition pat1 pat2 --rounds "${ROUNDS:-200}" --seeds "${seeds[@]}"
        --checkpoint-every 50)
# NAME ALGORITHM [options]: the paper's five first (the comparison FedALF is about), then the field's examples.
JOBLIST=("fedavg fedavg --lr ${lrs[*]}" "qfedavg qfedavg --lr ${lrs[*]}" "fedalf fedalf --lr ${lrs[*]}"
         "fedlf fedlf --server-lr ${fedlf_lrs[*]}"
         "ldp-fedalf fedalf --ldp adaptive --epsilon 2 --lr ${lrs[*]}")
for ex in afl fedmgda term propfair fedfv ditto fedper fedrep apfl; do
  JOBLIST+=("$ex examples.$ex:$ex --lr ${lrs[*]}")
done
mkdir -p "$OUT"
if command -v flock > /dev/null; then  # one invocation per OUT: a second would remove the first's claims below
  exec 9> "$OUT/.benchmark.lock"
  flock -n 9 || { echo "fair_benchmark: another invocation is running on $OUT; wait for it to end" >&2; exit 2; }
fi
rm -rf "$OUT"/.claim-*   # a claim names the sweep a worker of this invocation took
worker() {
  local job name alg opts rc
  for job in "${JOBLIST[@]}"; do
    read -r name alg opts <<< "$job"
    mkdir "$OUT/.claim-$name" 2>/dev/null || continue
    rc=0
    # shellcheck disable=SC2086  # opts are words
    sweep "$OUT" "$name" --algorithm "$alg" $opts "${COMMON[@]}" || rc=$?
    echo "$rc" > "$OUT/.claim-$name/rc"  # the sweep's status, read below (a claim without one: it did not end)
    [ "$rc" = 0 ] || echo "fair_benchmark: $name failed (rc=$rc; see $OUT/$name.log)" >&2
  done
}
ended() {  # every run OUT/NAME/sweep.json lists has its summary.json (done or diverged: it ended)
  local dirs d
  dirs=$(grep -o '"dir": "[^"]*"' "$OUT/$1/sweep.json" 2>/dev/null | cut -d'"' -f4) && [ -n "$dirs" ] || return 1
  for d in $dirs; do [ -f "$OUT/$1/$d/summary.json" ] || return 1; done
}
pids=()
for _ in $(seq "${JOBS:-2}"); do worker & pids+=($!); done
# Ctrl-C, SIGTERM or SIGHUP: each worker passes SIGTERM on to its sweep (sweeps.sh), which saves its runs and
# exits, and takes no further sweep; this script waits for them, then exits (run it again to resume)
trap 'trap - INT TERM HUP; echo "fair_benchmark: stopping: each running sweep saves its runs" >&2
      kill -TERM "${pids[@]}" 2>/dev/null || true; wait || true; exit 143' INT TERM HUP
wait
trap - INT TERM HUP
# KEEP/NAME becomes a copy of this benchmark's sweep NAME once every run of it ended (so no runs of an older
# grid), copied beside it first: a failed sweep or copy leaves the KEEP/NAME of an earlier invocation as it was
complete=() failed=()
for job in "${JOBLIST[@]}"; do
  read -r name _ <<< "$job"
  rm -rf "${KEEP:?}/.incoming/$name"
  if [ "$(cat "$OUT/.claim-$name/rc" 2>/dev/null)" = 0 ] && ended "$name" && keep "$OUT" "$name" "$KEEP/.incoming"
  then
    rm -rf "${KEEP:?}/$name"
    mv "$KEEP/.incoming/$name" "$KEEP/$name"
    complete+=("$KEEP/$name")
  else
    failed+=("$name")
  fi
done
rm -rf "$OUT"/.claim-* "${KEEP:?}/.incoming"
# the report of the sweeps this invocation completed (a failed one's KEEP/NAME, of an earlier run, is left out)
if [ ${#complete[@]} -gt 0 ]; then
  ${FEDALF:-.venv/bin/fedalf} report "${complete[@]}" --out "$REPORT"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "fair_benchmark: ${#failed[@]} of ${#JOBLIST[@]} sweeps failed or have runs that did not end: ${failed[*]}" \
       "(see $OUT/NAME.log; $KEEP/NAME left as it was); $REPORT holds the other ${#complete[@]}; run this" \
       "again to resume them" >&2
  exit 1
fi
