"""Wall time from process start to the first completed round of the README's main job (issue 14):
the moment the progress bar first shows 1/2. Cold: a fresh compilation cache; warm: the same one again.

    FEDALF_COMPILE_CACHE=/tmp/cc .venv/bin/python experiments/probes/first_round_time.py /tmp/out   # cold, then warm
"""
import shutil
import subprocess
import sys
import time

out = sys.argv[1]
shutil.rmtree(out, ignore_errors=True)
t0 = time.perf_counter()
p = subprocess.Popen([".venv/bin/fedalf", "run", "--out", out, "--rounds", "2", "--eval-every", "1"],
                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, bufsize=0)
buf, first = "", None
while True:
    c = p.stderr.read(1)
    if not c:
        break
    buf += c
    if first is None and "1/2 [" in buf:
        first = time.perf_counter() - t0
p.wait()
print(f"first round {first:.1f} s, whole {time.perf_counter() - t0:.1f} s")
