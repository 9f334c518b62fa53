#!/usr/bin/env bash
# The client-side baseline examples of issue #37 item 8 (tests/test_examples_client.py): one-line breakages of
# each example, of the never-sampled rule and of a resume's per-client collections, each applied in turn to a
# copy of HEAD (never to the checkout) with the tests that pin it run against it: each must make a test fail.
# The same pattern as tests/wiring_mutations.sh.
#   bash tests/client_examples_mutations.sh            # all (about 20 minutes on 2 loaded cores)
#   ONLY=apfl bash tests/client_examples_mutations.sh  # the breakages whose label contains "apfl"
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD; COPY=$(mktemp -d); trap 'rm -rf "$COPY"' EXIT
if [ -n "${SRC:-}" ]; then cp -r "$SRC"/. "$COPY"; else git archive HEAD | tar -x -C "$COPY"; fi
PYTEST=${PYTEST:-$REPO/.venv/bin/pytest -n 0}
T=tests/test_examples_client.py
status=0
mutate() {  # file, old text, new text, label, pytest -k selection
  case "$4" in *"${ONLY:-}"*) ;; *) return ;; esac
  cp "$COPY/$1" "$COPY/.orig"
  python3 - "$COPY/$1" "$2" "$3" <<'PY'
import sys
p, old, new = sys.argv[1:]
s = open(p).read(); assert s.count(old) == 1, old; open(p, "w").write(s.replace(old, new))
PY
  echo "== $4"
  # shellcheck disable=SC2086
  out=$(cd "$COPY" && PYTHONPATH="$COPY" $PYTEST -q -p no:warnings -p no:cacheprovider $T -k "$5" 2>&1)
  echo "$out" | grep -E "^FAILED" || { echo "NOT CAUGHT"; status=1; }
  cp "$COPY/.orig" "$COPY/$1"
}
mutate examples/propfair.py "-jnp.log(eps) + below + 0.5 * below ** 2" "-jnp.log(eps) + below + below ** 2" \
  "propfair: the quadratic continuation's ½ dropped" "propfair_matches"
mutate examples/fedper.py "jnp.zeros_like(t) if k in head else t - u" "t - u" \
  "fedper: the head's Δ uploaded (averaged) instead of 0" "fedper_and_fedrep"
mutate examples/fedrep.py '(count < hp.own["head_steps"])' '(count <= hp.own["head_steps"])' \
  "fedrep: one head step too many" "fedrep"
mutate examples/apfl.py 'jnp.clip(personal["alpha"], 0.0, 1.0)' 'personal["alpha"]' \
  "apfl: α not clipped to [0, 1]" "apfl_matches"
mutate examples/fedbn.py 'client_collections=("batch_stats",),' '' \
  "fedbn: batch statistics averaged, not kept per client" "fedbn_matches"
mutate examples/moon.py "con = jnp.logaddexp(pos, neg) - pos" "con = jnp.logaddexp(pos, neg) - neg" \
  "moon: the previous model's z taken as the positive" "moon_matches"
mutate fedalf_jax/sim/train.py "return jax.tree_util.tree_map(lambda a, b: jnp.where(seen, a, b), mine, theta)" \
  "return mine" "never sampled: evaluated with its initial state, not θ" "never_sampled"
mutate fedalf_jax/experiment/loop.py "return None if found is None else rd.load_checkpoint(state, round=found[0])" \
  "return None if found is None else rd.load_checkpoint(state, round=found[0])._replace(clients=state.clients)" \
  "resume: the per-client collections start afresh" "survive_a_checkpoint"
exit $status
