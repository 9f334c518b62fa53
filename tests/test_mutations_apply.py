"""tests/wiring_mutations.sh stays runnable: each mutation's old text occurs exactly once in its file, so a
refactor that moves the code it names is noticed here, in seconds, not as a "NOT CAUGHT" (or never) in the
15-minute script. (This stop found 24 mutations whose text had moved, 13 of them since earlier stops.)"""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHECK = r'''
cd "$REPO"
mutate() {
  "$PYTHON" - "$1" "$2" "$4" <<'PY'
import sys
p, old, label = sys.argv[1:]
try:
    n = open(p, encoding="utf-8").read().count(old)
except FileNotFoundError:
    n = "no such file"
if n != 1:
    print(f"{label}: its text occurs {n} times in {p}")
PY
}
'''


def test_every_mutation_names_text_that_occurs_once():
    src = (REPO / "tests" / "wiring_mutations.sh").read_text()
    start = src.index("mutate() {")
    body = src[src.index("\n}\n", start) + 3:].replace("exit $status", "")
    out = subprocess.run(["bash", "-c", CHECK + body], env={"REPO": str(REPO), "PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == "", out.stdout
    assert src.count("\nmutate ") > 300  # the script's mutations were all read
