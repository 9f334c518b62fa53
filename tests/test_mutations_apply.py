"""tests/wiring_mutations.sh stays runnable: each mutation's old text occurs exactly once in its file, so a
refactor that moves the code it names is noticed here, in seconds, not as a "NOT CAUGHT" (or never) in the
15-minute script. (This stop found 24 mutations whose text had moved, 13 of them since earlier stops.)"""

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# bash reads the script's mutations (its quoting and variables are bash's) and prints each one's file, old text
# and label, NUL-separated; the counting is done here, in one process (a Python per mutation took ~10 s)
CHECK = r'''
cd "$REPO"
mutate() { printf '%s\0%s\0%s\0' "$1" "$2" "$4"; }
'''


def test_every_mutation_names_text_that_occurs_once():
    src = (REPO / "tests" / "wiring_mutations.sh").read_text()
    start = src.index("mutate() {")
    body = src[src.index("\n}\n", start) + 3:].replace("exit $status", "")
    out = subprocess.run(["bash", "-s"], input=(CHECK + body).encode(), env={"REPO": str(REPO), "PATH": "/usr/bin:/bin"},
                         capture_output=True, timeout=300)  # on stdin: one argument may not exceed 128 KiB (Linux)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    fields = out.stdout.decode().split("\0")[:-1]
    found = [fields[i:i + 3] for i in range(0, len(fields), 3)]
    texts: dict = {}
    bad = []
    for path, old, label in found:
        if path not in texts:
            f = REPO / path
            texts[path] = f.read_text(encoding="utf-8") if f.is_file() else None
        n = "no such file" if texts[path] is None else texts[path].count(old)
        if n != 1:
            bad.append(f"{label}: its text occurs {n} times in {path}")
    assert not bad, "\n".join(bad)
    assert len(found) == src.count("\nmutate ") > 300  # the script's mutations were all read
