#!/usr/bin/env bash
# fedalf's FedAvg CNN round against a lean PyTorch loop of it (issue 29; docs/lab/benchmarks.md, "FedAvg against
# a lean PyTorch loop"): `fedalf bench --pytorch` REPEATS times in a row (each: the compiled round's 5 rounds,
# then the PyTorch loop's warm-up and 5 rounds), the load before each, then the medians of the three figures.
#   bash experiments/torch_ratio.sh [PYTHON_WITH_TORCH] [REPEATS] [extra fedalf bench flags...]
# PYTHON_WITH_TORCH: default $FEDALF_TORCH_PYTHON, else .venv-torch/bin/python (`bash experiments/setup.sh torch`
# makes it); a relative path is taken from the checkout's root.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_PY=${1:-${FEDALF_TORCH_PYTHON:-.venv-torch/bin/python}}; REPEATS=${2:-3}; shift $(( $# < 2 ? $# : 2 ))
if [ ! -x "$TORCH_PY" ] && ! command -v "$TORCH_PY" >/dev/null; then
  echo "torch_ratio: no interpreter $TORCH_PY; make one with \`bash experiments/setup.sh torch\` or pass PYTHON_WITH_TORCH" >&2
  exit 2
fi
FEDALF=${FEDALF:-.venv/bin/fedalf}  # may hold arguments: FEDALF="python -m fedalf_jax.cli"
OUT=$(mktemp -d)
for i in $(seq "$REPEATS"); do
  echo "== $i: $(uptime)"
  # shellcheck disable=SC2086
  $FEDALF bench --pytorch "$TORCH_PY" --no-sequential --json "$OUT/$i.json" "$@" 2>/dev/null | grep -E "^  (compiled round|PyTorch loop|fedalf / PyTorch) "
done
echo "== end: $(uptime)"
python3 - "$OUT" <<'PY'
import json, pathlib, statistics, sys
rs = [json.loads(p.read_text()) for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json"))]
f = lambda k: [r[k] for r in rs]
for k in ("compiled_s_per_round", "pytorch_s_per_round", "fedalf_over_pytorch"):
    print(f"{k}: median {statistics.median(f(k)):.3f}  ({', '.join(f'{v:.3f}' for v in f(k))})")
print(f"torch {rs[0]['pytorch']['torch']}, {rs[0]['pytorch']['threads']} threads; conv {rs[0]['conv_impl']}, "
      f"clients mapped with {rs[0]['client_map']}")
PY
