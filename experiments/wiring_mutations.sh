#!/usr/bin/env bash
# The four glue bugs of issue #9, each applied in turn to a copy of HEAD (never to the checkout), with
# tests/test_wiring.py run against it: every bug must make at least one test fail.
#   bash experiments/wiring_mutations.sh
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD; COPY=$(mktemp -d); trap 'rm -rf "$COPY"' EXIT
git archive HEAD | tar -x -C "$COPY"
PYTEST=${PYTEST:-$REPO/.venv/bin/pytest}
status=0
mutate() {  # file, old text, new text, label
  cp "$COPY/$1" "$COPY/.orig"
  python3 - "$COPY/$1" "$2" "$3" <<'PY'
import sys
p, old, new = sys.argv[1:]
s = open(p).read(); assert s.count(old) == 1, old; open(p, "w").write(s.replace(old, new))
PY
  echo "== $4"
  out=$(cd "$COPY" && PYTHONPATH="$COPY" "$PYTEST" -q -p no:warnings tests/test_wiring.py 2>&1)
  echo "$out" | grep -E "^FAILED" || { echo "NOT CAUGHT"; status=1; }
  cp "$COPY/.orig" "$COPY/$1"
}
mutate fedalf_jax/sim/algorithms.py "(last >= t - tau)" "(last > t - tau)" "history window: last >= t - tau -> last > t - tau"
mutate fedalf_jax/sim/round.py "return k_sel, jax.random.split(k_clients, m)" \
  "return k_sel, jnp.broadcast_to(k_clients, (m,) + k_clients.shape)" "one PRNG key for every client of a round"
mutate fedalf_jax/sim/round.py "weights = n_sel.astype(jnp.float32) / jnp.sum(n_sel)" \
  "weights = jnp.full(n_sel.shape, 1.0 / n_sel.shape[0])" "uniform weights 1/m instead of n_i / sum n"
mutate fedalf_jax/sim/client.py "mask = jnp.arange(ci.shape[0]) < cn" "mask = jnp.ones(ci.shape[0], bool)" \
  "evaluation counts padded test samples"
exit $status
