"""Seconds from SIGTERM to exit of ``fedalf run`` while it compiles (``compile``: 2 s after the bar says
"(compiling)") or inside its one 30-round chunk (``chunk``: 3 s after its rounds began), of the tree TREE
(a checkout: its package is imported), with the compilation cache CACHE (a new folder: a cold compile),
writing the run to OUT; JOB ``main``: the README's main job (``fedalf run --out OUT``, the FMNIST CNN, chunks
of 10 rounds before the change) instead of the 30-round MLP. Issue 36 items 3-4; numbers in docs/lab/scaling.md.

    git worktree add /tmp/before bfc64a6     # the tree before the change
    for tree in /tmp/before "$PWD"; do n=$(basename $tree); for ph in compile chunk; do
        .venv/bin/python experiments/probes/signal_latency.py $tree /tmp/cc_$n /tmp/m_$n/$ph $ph [main]; done; done
"""
import os, re, signal, subprocess, sys, threading, time
tree, cache, out, phase = sys.argv[1:5]
job = sys.argv[5] if len(sys.argv) > 5 else "mlp"  # "main": the README's main job (its defaults: the FMNIST CNN)
cmd = [sys.executable, "-m", "fedalf_jax.cli", "run", "--dataset", "fmnist", "--model", "mlp", "--algorithm", "fedalf",
       "--clients", "20", "--clients-per-round", "5", "--rounds", "30", "--eval-every", "30", "--out", out]
if job == "main":
    cmd = [sys.executable, "-m", "fedalf_jax.cli", "run", "--out", out]
env = {**os.environ, "FEDALF_COMPILE_CACHE": cache, "PYTHONPATH": tree}
t_start = time.monotonic()
p = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
buf = {"t": ""}
def rd():
    while True:
        b = os.read(p.stderr.fileno(), 4096)
        if not b: return
        buf["t"] += b.decode(errors="replace")
threading.Thread(target=rd, daemon=True).start()
def seen(pat): return re.search(pat, buf["t"]) is not None
if phase == "compile":
    trigger = lambda: seen(r"\(compiling\)")
    extra = 2.0
else:
    trigger = lambda: seen(r"\(rounds? 1[–)]") or seen(r"\| *[1-9]\d*/\d+ ")
    extra = 3.0
while not trigger():
    if p.poll() is not None: print("ended early", buf["t"][-2000:]); sys.exit(1)
    time.sleep(0.01)
t_trig = time.monotonic(); time.sleep(extra)
p.send_signal(signal.SIGTERM); t0 = time.monotonic()
p.wait(); t1 = time.monotonic()
left = sorted(os.listdir(out)) if os.path.isdir(out) else []
rows = open(os.path.join(out, "metrics.csv")).read().splitlines()[1:] if "metrics.csv" in left else []
print(f"{os.path.basename(tree)} {phase}: SIGTERM {t0 - t_start:.1f} s after start ({extra:.0f} s after the trigger), "
      f"exit {p.returncode} {t1 - t0:.1f} s later; left: {left}; metrics rows: {[r.split(',')[0] for r in rows]}")
print("   last stderr line:", buf["t"].strip().splitlines()[-1][-250:])
