#!/usr/bin/env bash
# The declared minimum versions, checked (issue 38): a throwaway virtual environment with every dependency
# of pyproject.toml's [project] list pinned to its floor (`name>=X` installed as `name==X`), the test tools
# (the test extras, as declared) at whatever pip picks beside those pins, then a quick tier of tests run
# there against this checkout (PYTHONPATH; nothing is installed into it and .venv is not touched).
#   bash experiments/min_versions.sh [VENV] [PYTEST ARGS...]
# VENV: default ${TMPDIR:-/tmp}/fedalf-min-versions (made, or reused). The quick tier: the tests marked
# `quick` when the suite declares that marker, then ALSO below; PYTEST ARGS replace both. It prints the
# versions installed and pytest's summary; docs/min_versions.md says what was tested last.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${1:-${TMPDIR:-/tmp}/fedalf-min-versions}; [ $# -gt 0 ] && shift
# Beside the quick tier, the tests that tell old versions apart: the multi-device runs (jax.shard_map) and
# the QP solved alone against in a batch (a sweep's QPs; different on jax 0.9.2 and older).
ALSO="tests/test_devices.py tests/test_qp.py tests/test_layers.py"
PINS=$("$PY" - <<'EOF'
import re
text = open("pyproject.toml").read()
deps = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
pins = [f"{name}=={floor}" for name, floor in re.findall(r'"([A-Za-z0-9_.\-]+)>=([0-9][^",;\s]*)"', deps)]
missing = [d for d in re.findall(r'"([^"]+)"', deps) if ">=" not in d]
if missing:
    raise SystemExit(f"min_versions: no floor (>=) to pin for {missing}")
print(" ".join(pins))
EOF
)
# the test extras as declared (not pinned: the test tools, resolved beside the pins)
TESTS=$("$PY" -c 'import re; t = open("pyproject.toml").read(); print(" ".join(re.findall(r"\"([^\"]+)\"", re.search(r"^test = \[(.*?)\]", t, re.M).group(1))))')
echo "min_versions: pinned $PINS"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# shellcheck disable=SC2086  # $PINS: one word per requirement
"$VENV/bin/python" -m pip install --quiet $PINS $TESTS
"$VENV/bin/python" -m pip list 2>/dev/null | grep -iE "^(jax|jaxlib|flax|optax|jaxopt|chex|numpy|tqdm|matplotlib|pandas|dp-accounting|scipy|pytest|pytest-xdist) "
markers=$(PYTHONPATH=$PWD "$VENV/bin/python" -m pytest -p no:cacheprovider --markers 2>/dev/null || true)
status=0
if [ $# -gt 0 ]; then
  echo "min_versions: pytest $*"
  PYTHONPATH=$PWD "$VENV/bin/python" -m pytest -p no:cacheprovider -n 0 -q "$@" || status=$?
else
  if grep -q "^@pytest.mark.quick" <<<"$markers"; then
    echo "min_versions: pytest -m quick"
    PYTHONPATH=$PWD "$VENV/bin/python" -m pytest -p no:cacheprovider -n 0 -q -m quick || status=$?
  fi
  echo "min_versions: pytest $ALSO"
  # shellcheck disable=SC2086
  PYTHONPATH=$PWD "$VENV/bin/python" -m pytest -p no:cacheprovider -n 0 -q $ALSO || status=$?
fi
exit "$status"
