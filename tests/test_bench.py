import json

from fedalf_jax.cli import main


def test_bench_writes_both_timings(tmp_path, capsys):
    out = tmp_path / "b.json"
    argv = ["bench", "--dataset", "synthetic", "--model", "mlp", "--clients", "6", "--clients-per-round", "3",
            "--synthetic-train", "300", "--synthetic-test", "60", "--repeats", "2", "--algorithm", "fedalf",
            "--depth-width", "1", "2", "--depth-rounds", "3", "--json", str(out)]
    assert main(argv) == 0
    res = json.loads(out.read_text())
    depth = res["server_depth"]
    assert depth["qp_method"] == "active" and depth["run_map"] == "map" and set(depth["widths"]) == {"1", "2"}
    one, two = depth["widths"]["1"], depth["widths"]["2"]
    # W = 1 is seed 0; W = 2 is seeds 0 and 1, one after another (the CPU's run_map): its rounds' trips
    # are the sums of its runs', and its run 0 is the W = 1 run
    assert len(one["per_round"]) == 3 and two["per_run"][0] == one["per_run"][0] == one["per_round"]
    assert two["per_round"] == [a + b for a, b in zip(*two["per_run"])]
    assert two["trips_per_run_round"] == two["trips_per_round"] / 2
    # per merge step ≤ 1 + (2n + 20) with n = 3 + 1 + 6 QP rows (clients, fair row, history); ≤ 3 steps (layers)
    assert all(0 < t <= 3 * (1 + 2 * 10 + 20) for t in one["per_round"])
    for k in ("compiled_s_per_round", "sequential_s_per_round", "compile_s", "server_s", "rounds_per_s"):
        assert res[k] > 0, k
    assert len(res["compiled_times"]) == 2 and 0 < res["server_share"] < 10
    # what it printed: the readable table of the same numbers (the JSON above keeps them unrounded)
    printed = capsys.readouterr().out
    assert printed.startswith("fedalf bench: fedalf, model mlp, synthetic data, on cpu")
    _check_table(printed)
    assert f"server share {B.sig(100 * res['server_share'])}% of the compiled round" in printed
    assert B.duration(res["compiled_s_per_round"]) + "/round" in printed
    assert "server depth, W=1" in printed and "server depth, W=2" in printed


def _check_table(printed: str) -> None:
    """No raw floats (at most 3 significant digits), units on the times, nothing the model does not use."""
    plain = printed.replace(",", "")
    raw = [x for x in re.findall(r"\d+\.\d+", plain) if len(x.replace(".", "").lstrip("0")) > 3]  # 0.0247: 3
    assert not raw and not re.search(r"\d{5,}", plain), (raw, printed)
    assert re.search(r"compiled round +[\d.,]+ (s|ms|µs)/round", printed), printed
    assert "conv_impl" not in printed and "convolution" not in printed  # an MLP has none
    assert "{" not in printed and "server_share" not in printed


def _result(**over):
    res = {"backend": "cpu", "device": "TFRT_CPU_0", "algorithm": "fedavg", "model": "mlp", "dataset": "fmnist",
           "client_map": "map", "conv_impl": "im2col", "clients_per_round": 10, "steps_per_client": 12,
           "compile_s": 12.345678, "compiled_s_per_round": 0.123456789012345, "compiled_times": [0.12, 0.13],
           "rounds_per_s": 8.100000737, "client_steps_per_s": 972.0000884, "sequential_s_per_round": 0.2345678901,
           "sequential_times": [0.23], "speedup": 1.9000018, "server_s": 0.0045678901, "server_share": 0.0370000336,
           "peak_memory_mb": 1234.5678}
    return {**res, **over}


def test_bench_table_is_readable():
    """``fedalf bench``'s printed table (B.format_bench): 3 significant digits with units, the server share
    explained, the convolution only for a CNN."""
    text = B.format_bench(_result())
    _check_table(text)
    for s in ("123 ms/round", "235 ms/round", "1.90×", "4.57 ms/round", "server share 3.70% of the compiled round",
              "12.3 s", "1.21 GiB", "8.10 rounds/s", "972 client steps/s", "sequential loop / compiled round"):
        assert s in text, s
    cnn = B.format_bench(_result(model="cnn", compiled_s_per_round=2.6712, peak_memory_mb=812.0))
    assert "convolution im2col" in cnn and "2.67 s/round" in cnn and "812 MiB" in cnn
    assert "sequential" not in B.format_bench({k: v for k, v in _result().items()
                                               if k not in ("sequential_s_per_round", "speedup")})
    assert [B.sig(v) for v in (0.0123456, 81.349, 976.4, 1234.5, 9.996, 0)] == ["0.0123", "81.3", "976", "1,230",
                                                                            "10.0", "0"]


def test_bench_sweep_table_is_readable():
    w = {"sweep_s_per_call": 0.0123456789, "separate_s_per_call": 0.0130123, "speedup": 1.05401,
         "sweep_s_per_run_round": 0.00617283, "separate_s_per_run_round": 0.0065061, "compile_sweep_s": 3.2,
         "compile_single_s": 2.9, "sweep_times": [0.0123], "separate_times": [0.013]}
    text = B.format_bench_sweep({"backend": "cpu", "device": "cpu:0", "algorithm": "fedavg", "model": "mlp",
                                 "dataset": "synthetic", "rounds_per_call": 2, "run_map": "map",
                                 "widths": {"1": w, "8": w}, "peak_memory_mb": 812.3})
    assert not re.search(r"\d\.\d{4,}", text) and "12.3 ms" in text and "1.05×" in text and "812 MiB" in text
    assert "a call is 2 rounds and an evaluation" in text and "> 1: the sweep is faster" in text


# ---- fedalf bench --suite -------------------------------------------------------------------------------

import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from fedalf_jax import bench as B  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SESSION = ROOT / "experiments" / "gpu_session.sh"


def test_suite_smoke_end_to_end(tmp_path, capsys):
    """The suite on the CPU: one JSON per measurement with its figures, and the table's lines printed."""
    out = tmp_path / "bench"
    argv = ["bench", "--suite", "smoke", "--out", str(out), "--algorithm", "fedavg", "--no-sequential",
            "--sweep-width", "2"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    names = ["round_mlp_fedavg", "sweep_mlp_fedavg_w2"]
    assert sorted(p.name for p in out.glob("*.json")) == sorted(f"{n}.json" for n in names)
    assert lines[0] == B.SUITE_HEADER and [ln.split()[0] for ln in lines[1:3]] == names
    assert (out / "table.txt").read_text().splitlines() == lines[:3]
    rnd = json.loads((out / "round_mlp_fedavg.json").read_text())
    assert rnd["config"]["dataset"] == "synthetic" and rnd["result"]["compiled_s_per_round"] > 0
    assert rnd["wall_s"] > 0 and "sequential_s_per_round" not in rnd["result"]
    sw = json.loads((out / "sweep_mlp_fedavg_w2.json").read_text())
    assert sw["width"] == 2 and sw["result"]["widths"]["2"]["sweep_s_per_call"] > 0


def _fake_measures(monkeypatch, out, oom_at=None, seconds=0.0, fail_at=None):
    """bench/bench_sweep stand-ins that check the earlier measurements' JSON is on disk when they start."""
    calls = []

    def on_disk():
        return sorted(p.stem for p in Path(out).glob("*.json"))

    def fake_bench(cfg, *, repeats, sequential):
        calls.append(("round", cfg.model, cfg.algorithm, on_disk()))
        time.sleep(seconds)
        return {"backend": "cpu", "compiled_s_per_round": 0.5, "peak_memory_mb": 1.0}

    def fake_sweep(cfg, *, widths, repeats=3):
        (w,) = widths  # one width a call
        calls.append(("sweep", w, on_disk()))
        time.sleep(seconds * w)
        if w == fail_at:
            raise ValueError("a bug")
        if w == oom_at:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 123 bytes.")
        return {"backend": "cpu", "widths": {str(w): {"sweep_s_per_run_round": 0.1, "speedup": 1.5}}}

    monkeypatch.setattr(B.suite, "bench", fake_bench)  # what bench_suite calls
    monkeypatch.setattr(B.suite, "bench_sweep", fake_sweep)
    return calls


def test_gpu_suite_writes_each_result_before_the_next_and_stops_at_oom(tmp_path, monkeypatch):
    out = tmp_path / "gpu"
    calls = _fake_measures(monkeypatch, out, oom_at=32)
    printed = []
    recs = B.bench_suite("gpu", out, echo=printed.append)
    rounds = [f"round_{m}_{a}" for m in ("cnn", "mlp") for a in ("fedavg", "fedalf")]
    sweeps = [f"sweep_cnn_fedalf_w{w}" for w in (1, 8, 32, 64)]
    assert [r["name"] for r in recs] == rounds + sweeps
    # each measurement started with every earlier one's JSON already written
    done = sorted(rounds)
    assert [c[-1] for c in calls] == [sorted(rounds[:i]) for i in range(4)] + [done, sorted(done + sweeps[:1]),
                                                                               sorted(done + sweeps[:2])]
    assert [c[1] for c in calls if c[0] == "sweep"] == [1, 8, 32]  # 64 never started
    oom = json.loads((out / "sweep_cnn_fedalf_w32.json").read_text())
    assert oom["note"] == "out of memory" and oom["largest_width_that_fits"] == 8 and "RESOURCE_EXHAUSTED" in oom["error"]
    assert json.loads((out / "sweep_cnn_fedalf_w64.json").read_text())["note"].startswith("not run: width 32 ran out")
    assert json.loads((out / "sweep_cnn_fedalf_w8.json").read_text())["result"]["widths"]["8"]["speedup"] == 1.5
    assert printed[0] == B.SUITE_HEADER and len(printed) == 1 + 8
    assert "out of memory" in printed[-2] and printed[-1].split()[0] == "sweep_cnn_fedalf_w64"
    cfg = json.loads((out / "round_cnn_fedalf.json").read_text())["config"]
    assert (cfg["model"], cfg["algorithm"], cfg["dataset"]) == ("cnn", "fedalf", "fmnist")


def test_suite_budget_and_errors(tmp_path, monkeypatch):
    out = tmp_path / "b"
    calls = _fake_measures(monkeypatch, out, seconds=0.2)
    recs = B.bench_suite("gpu", out, parts=("sweep",), budget_s=1.0, echo=lambda line: None)
    # w1 took ~0.2 s, so w8 is predicted at ~1.6 s > what is left of 1 s: skipped, and the wider ones not run
    assert [c[1] for c in calls] == [1]
    assert [r.get("note", "")[:8] for r in recs] == ["", "skipped:", "not run:", "not run:"]
    # anything but running out of memory propagates, after the earlier JSONs are written
    out2 = tmp_path / "c"
    _fake_measures(monkeypatch, out2, fail_at=8)
    with pytest.raises(ValueError, match="a bug"):
        B.bench_suite("gpu", out2, parts=("sweep",), echo=lambda line: None)
    assert [p.name for p in out2.glob("*.json")] == ["sweep_cnn_fedalf_w1.json"]


def test_suite_plan_overrides_and_filters():
    plan = B.suite_plan("gpu", {"dataset": "synthetic", "rounds": 3, "model": "mlp", "out": "x"})
    assert [p["name"] for p in plan] == ["round_mlp_fedavg", "round_mlp_fedalf"]  # the sweep is CNN's
    assert all(p["config"].dataset == "synthetic" and p["config"].rounds == 3 for p in plan)
    sweep = B.suite_plan("gpu", {}, parts=("sweep",), widths=[2, 4])
    assert [(p["width"], p["config"].eval_every, p["repeats"]) for p in sweep] == [(2, 5, 2), (4, 5, 2)]


@pytest.mark.parametrize("argv, needle", [
    (["bench", "--suite", "gpu"], "--suite needs --out"),
    (["bench", "--suite", "gpu", "--out", "{tmp}", "--json", "x.json"], "--json writes one measurement"),
    (["bench", "--suite", "gpu", "--out", "{tmp}", "--rounds", "0"], "rounds must be a positive integer"),
    (["bench", "--suite", "gpu", "--out", "{tmp}", "--budget", "0"], "--budget must be a positive"),
    (["bench", "--suite", "gpu", "--out", "{tmp}", "--sweep-width", "0"], "--sweep-width values must be"),
    (["bench", "--part", "round"], "--part goes with --suite"),
    (["bench", "--suite", "tpu", "--out", "{tmp}"], "invalid choice"),
    # issue 36.9: a selection that measures nothing (a typo, a model outside the suite) exited 0
    (["bench", "--suite", "smoke", "--out", "{tmp}", "--model", "nosuch"], "--model nosuch selects none of suite"),
    (["bench", "--suite", "smoke", "--out", "{tmp}", "--model", "cnn"], "--model cnn selects none of suite smoke"),
    (["bench", "--suite", "smoke", "--out", "{tmp}", "--algorithm", "fedalf", "--part", "sweep"],
     "sweep mlp fedavg with --part sweep"),
])
def test_suite_bad_input_is_one_line(tmp_path, capsys, argv, needle):
    argv = [a.replace("{tmp}", str(tmp_path / "s")) for a in argv]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.glob("s/*.json"))  # validated before anything runs
    assert not (tmp_path / "s" / "table.txt").exists()


def test_gpu_session_steps_fit_the_device_limit():
    """experiments/gpu_session.sh: bash accepts it; every step's limit, and so every timeout in it, is at
    most 540 s (the device tool allows 600 s a command)."""
    assert subprocess.run(["bash", "-n", str(SESSION)], capture_output=True).returncode == 0
    text = SESSION.read_text()
    steps = dict(re.findall(r"^\s*(\d)\) LIMIT=\$\{2:-(\d+)\}", text, flags=re.M))
    assert sorted(steps) == ["0", "1", "2", "3"] and all(int(s) <= 540 for s in steps.values()), steps
    assert int(re.search(r"^MAX_STEP_S=(\d+)$", text, flags=re.M).group(1)) <= 540
    # every timed command gets what is left of its step's limit (less a margin), never a fixed number
    timed = re.findall(r"^\s*budget (\$\(\(.*?\)\)|\S+)", text, flags=re.M)
    assert len(timed) == 3 and all(re.fullmatch(r"\$\(\( \$\(left\) - \d+ \)\)", t) for t in timed), timed
    code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    assert code.count("timeout ") == 1 and 'timeout --foreground -s INT -k 10 "$1"' in code  # budget()'s
    for argv, msg in ((["9"], "usage"), (["2", "541"], "60..540")):
        r = subprocess.run(["bash", str(SESSION), *argv], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 2 and msg in r.stderr


# ---- fedalf bench --pytorch PYTHON (issue 29): FedAvg's CNN round against a lean PyTorch loop -------------

import os  # noqa: E402

TORCH_PY = os.environ.get("FEDALF_TORCH_PYTHON", str(ROOT / ".venv-torch" / "bin" / "python"))  # with torch: setup.sh torch


def _stub(path: Path, body: str) -> str:
    """A fake interpreter: a shell script that answers the torch check (``-c ...``) and ``torch_round.py``."""
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _serving(path: Path, rounds: str, before: str = "") -> str:
    """A fake interpreter with torch 9.9.9 whose ``torch_round.py --serve`` runs ``before``, says it is ready
    (7 threads, 2 steps per client), then runs ``rounds`` (shell code that reads the requests on stdin)."""
    ready = '{"ready": true, "torch": "9.9.9", "threads": 7, "steps_per_client": 2}'
    return _stub(path, f'if [ "$1" = "-c" ]; then echo 9.9.9; exit 0; fi\n{before}echo \'{ready}\'\n{rounds}')


# a small FedAvg CNN round for --pytorch (synthetic data of FMNIST's shape, 3 clients of 50 examples per round)
SMALL = ["--dataset", "synthetic", "--clients", "6", "--clients-per-round", "3", "--synthetic-train", "300",
         "--synthetic-test", "60", "--no-sequential"]


@pytest.mark.parametrize("kind", ["missing", "no torch"])
def test_pytorch_without_an_interpreter_with_torch_is_one_line(tmp_path, capsys, kind):
    python = (str(tmp_path / "nope" / "python") if kind == "missing" else
              _stub(tmp_path / "py", "echo \"ModuleNotFoundError: No module named 'torch'\" >&2; exit 1\n"))
    code = main(["bench", "--pytorch", python, "--dataset", "synthetic", "--json", str(tmp_path / "b.json")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "python -m venv X && X/bin/pip install torch" in err and python in err
    assert ("no such interpreter" if kind == "missing" else "cannot import torch (ModuleNotFoundError") in err
    assert "fedalf bench: loading" not in err and not (tmp_path / "b.json").exists()  # nothing was built


@pytest.mark.parametrize("argv, needle", [
    (["--algorithm", "fedalf"], "--pytorch compares FedAvg's CNN round"),
    (["--model", "mlp"], "--pytorch compares FedAvg's CNN round"),
    (["--synthetic-like", "cifar10"], "random data of its shape"),
    (["--sweep-width", "2"], "does not go with --sweep-width"),
])
def test_pytorch_other_rounds_are_refused(tmp_path, capsys, argv, needle):
    python = _stub(tmp_path / "py", "echo 9.9\n")
    assert main(["bench", "--pytorch", python, "--dataset", "synthetic", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1, err


def test_pytorch_ratio_is_the_compiled_round_over_the_loop(tmp_path, capsys, monkeypatch):
    """The wiring, with a fake interpreter serving PyTorch rounds of 0.3, 0.25, 0.2 s: the flags it gets match
    the round's settings, its rounds alternate with the compiled round's (one after each, seen in one log
    both write to), and the table's and the JSON's ratio is the compiled round's median / 0.25."""
    from fedalf_jax.bench import timing
    got, log = tmp_path / "argv.txt", tmp_path / "order.txt"
    python = _serving(tmp_path / "py", f'for s in 0.3 0.25 0.2; do read line || exit 0; echo torch >> {log}; '
                                        f'echo "{{\\"s\\": $s}}"; done\n', before=f'echo "$@" > {got}\necho progress\n')
    real = timing._compiled_round

    def logged(*a):  # the compiled round writes to the same log as the fake interpreter
        compiled = real(*a)

        def call(*b):
            with open(log, "a") as f:
                f.write("fedalf\n")
            return compiled(*b)
        return call
    monkeypatch.setattr(timing, "_compiled_round", logged)
    out = tmp_path / "b.json"
    argv = ["bench", "--pytorch", python, *SMALL, "--repeats", "3", "--batch-size", "40", "--lr", "0.03",
            "--json", str(out)]
    assert main(argv) == 0
    assert log.read_text().split() == ["fedalf", "torch"] * 3  # interleaved, one of each per repeat
    res = json.loads(out.read_text())
    assert (res["algorithm"], res["model"]) == ("fedavg", "cnn")  # FedAvg unless given
    assert res["pytorch"]["python"] == python and res["pytorch"]["times"] == [0.3, 0.25, 0.2]
    assert res["pytorch_s_per_round"] == 0.25 and len(res["compiled_times"]) == 3
    assert res["fedalf_over_pytorch"] == res["compiled_s_per_round"] / 0.25
    flags = got.read_text().split()
    assert flags[0] == str(B.TORCH_SCRIPT) and flags[-2:] == ["--synthetic", "--serve"]
    given = dict(zip(flags[1:-2:2], flags[2:-2:2]))
    assert given == {"--clients": "6", "--clients-per-round": "3", "--examples-per-client": "62",  # 300 / 6 ≈ 50, padded
                     "--batch-size": "40", "--epochs": "1", "--lr": "0.03", "--warmup": "1", "--seed": "0"}
    assert res["steps_per_client"] == 2  # ceil(62 / 40), the loop's too
    printed = capsys.readouterr().out
    _check_table(printed.replace("convolution", "").replace("conv_impl", ""))
    assert re.search(r"PyTorch loop +250 ms/round +the same round as a lean PyTorch 9\.9\.9 loop, 7 threads", printed)
    assert re.search(rf"fedalf / PyTorch +{re.escape(B.sig(res['compiled_s_per_round'] / 0.25))}× ", printed)


def test_a_pytorch_loop_that_dies_is_one_line(tmp_path, capsys):
    """The script failing mid-way (here after its warm-up) is a one-line error with its last stderr line."""
    python = _serving(tmp_path / "py", 'read line; echo "RuntimeError: out of memory" >&2; exit 3\n')
    argv = ["bench", "--pytorch", python, *SMALL, "--repeats", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("stopped without a result (exit status 3): RuntimeError: out of memory"), err
    assert "Traceback" not in "\n".join(err)


def test_a_terminals_ctrl_c_that_ends_the_pytorch_loop_first_still_keeps_the_table(tmp_path):
    """In a terminal Ctrl-C reaches the PyTorch loop too, and it may die before fedalf's handler runs: the
    bench must still stop as for Ctrl-C (table, exit 130), not report a PyTorch loop that failed. A fake
    interpreter serves two rounds, then on the third exits as Ctrl-C kills it (130) and only 0.5 s later
    sends the bench its Ctrl-C (in a subprocess: the signal must not reach pytest)."""
    python = _serving(tmp_path / "py", 'n=0\nwhile read line; do n=$((n + 1))\n'
                      '  if [ $n -eq 3 ]; then (sleep 0.5; kill -INT $PPID) </dev/null >/dev/null 2>&1 & exit 130; fi\n'
                      '  echo \'{"s": 0.05}\'\ndone\n')
    out = tmp_path / "b.json"
    argv = [sys.executable, "-m", "fedalf_jax.cli", "bench", "--pytorch", python, *SMALL, "--repeats", "5",
            "--json", str(out)]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 130, (r.returncode, r.stderr)
    assert "stopped without a result" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "fedalf bench: interrupted: the table above holds what was measured" in r.stderr, r.stderr
    res = json.loads(out.read_text())
    assert res["interrupted"] is True and res["pytorch"]["times"] == [0.05, 0.05]
    assert len(res["compiled_times"]) == 2 and re.search(r"PyTorch loop +50\.0 ms/round", r.stdout), r.stdout


def test_bench_without_pytorch_has_no_pytorch_rows():
    assert "PyTorch" not in B.format_bench(_result())
    text = B.format_bench(_result(pytorch={"torch": "2.0", "threads": 2}, pytorch_s_per_round=0.2469,
                                  fedalf_over_pytorch=0.5000123))
    assert re.search(r"PyTorch loop +247 ms/round .*PyTorch 2\.0 loop, 2 threads", text), text
    assert re.search(r"fedalf / PyTorch +0\.500× +compiled round / PyTorch loop", text), text


@pytest.mark.skipif(not os.path.exists(TORCH_PY), reason=f"no interpreter with torch at {TORCH_PY} "
                                                          f"(set FEDALF_TORCH_PYTHON)")
def test_torch_round_runs_and_prints_its_json():
    r = subprocess.run([TORCH_PY, str(B.TORCH_SCRIPT), "--synthetic", "--rounds", "1", "--warmup", "0",
                        "--clients", "4", "--clients-per-round", "2", "--examples-per-client", "100"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["s_per_round"] > 0 and len(res["times"]) == 1 and res["steps_per_client"] == 2
    assert res["data"] == "synthetic" and res["threads"] >= 1 and res["torch"]
    # served (fedalf bench --pytorch): ready after the warm-up, then one answer per "round" line
    r = subprocess.run([TORCH_PY, str(B.TORCH_SCRIPT), "--synthetic", "--serve", "--warmup", "1",
                        "--clients", "4", "--clients-per-round", "2", "--examples-per-client", "100"],
                       input="round\nround\n", capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(ln) for ln in r.stdout.strip().splitlines()]
    assert lines[0]["ready"] is True and lines[0]["steps_per_client"] == 2 and len(lines) == 4
    assert lines[1]["s"] > 0 and lines[2]["s"] > 0 and lines[3]["times"] == [lines[1]["s"], lines[2]["s"]]


def test_against_times_the_other_algorithm_interleaved_and_prints_the_ratio(tmp_path, capsys, monkeypatch):
    """``fedalf bench --against fedavg``: FedAvg's round is built from the same config with only the algorithm
    changed, timed in the same repeats, and the ratio printed is the medians' quotient."""
    import statistics

    from fedalf_jax.bench import timing
    built = []
    real_build = timing.build
    monkeypatch.setattr(timing, "build", lambda cfg: built.append(cfg) or real_build(cfg))
    out = tmp_path / "b.json"
    argv = ["bench", "--dataset", "synthetic", "--model", "mlp", "--clients", "6", "--clients-per-round", "3",
            "--synthetic-train", "300", "--synthetic-test", "60", "--repeats", "3", "--algorithm", "fedalf",
            "--no-sequential", "--against", "fedavg", "--json", str(out)]
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert [c.algorithm for c in built] == ["fedalf", "fedavg"]
    assert built[1] == built[0].replace(algorithm="fedavg")
    assert len(res["against_times"]) == len(res["compiled_times"]) == 3
    want = statistics.median(res["compiled_times"]) / statistics.median(res["against_times"])
    assert res["against"] == "fedavg" and abs(res["over_against"] - want) < 1e-12
    printed = capsys.readouterr().out
    assert B.duration(res["against_s_per_round"]) + "/round" in printed
    assert any(line.split()[:4] == ["fedalf", "/", "fedavg", f"{B.sig(res['over_against'])}×"]
               for line in printed.splitlines()), printed


def test_against_a_bad_name_or_with_a_sweep_is_one_line(capsys):
    assert main(["bench", "--dataset", "synthetic", "--against", "fedsgd"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedalf bench: error:") and "fedsgd" in err and "\n" not in err
    assert main(["bench", "--dataset", "synthetic", "--against", "fedavg", "--sweep-width", "1"]) == 2
    assert "--against times one round; it does not go with --sweep-width" in capsys.readouterr().err
