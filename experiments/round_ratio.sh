#!/bin/bash
# The FedALF/FedAvg CNN round (issue #29): per-round seconds = (12·s12 − 2·s2)/10, where sR is the final
# row's seconds_per_round of an R-round `fedalf run` (its one chunk of R rounds plus one evaluation,
# compile excluded), so the evaluation cancels. README main job's settings, evaluation only at the end.
#   TREES="/old/checkout /new/checkout" REPS=3 bash experiments/round_ratio.sh   # default: this tree, 1 repeat
# Prints: repeat, tree, algorithm, s12, s2, seconds per round, load average.
set -u
PY=${PYTHON:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}
export FEDALF_COMPILE_CACHE=${FEDALF_COMPILE_CACHE:-/tmp/round_ratio_cache}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
OUT=$(mktemp -d)
for rep in $(seq 1 "${REPS:-1}"); do
  for tree in ${TREES:-$(cd "$(dirname "$0")/.." && pwd)}; do
    for alg in fedavg fedalf; do
      s=()
      for r in 12 2; do
        d=$OUT/$alg-$r; rm -rf "$d"
        PYTHONPATH=$tree "$PY" -m fedalf_jax.cli run --algorithm $alg --model cnn --partition pat1 --clients 100 \
          --clients-per-round 10 --batch-size 50 --local-epochs 1 --rounds $r --eval-every 1000 --no-progress \
          --data-dir "$DATA" --checkpoint-every 100000 --out "$d" > "$d.log" 2>&1 \
          || { echo "round_ratio: $alg --rounds $r failed in $tree (log: $d.log)" >&2; exit 1; }
        s+=("$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['final']['seconds_per_round'])" "$d/summary.json")")
      done
      echo -e "$rep\t$tree\t$alg\t${s[0]}\t${s[1]}\t$("$PY" -c "print(round((12*${s[0]}-2*${s[1]})/10, 4))")\t$(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
rm -rf "$OUT"
