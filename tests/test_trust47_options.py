"""Issue 47 item 15: an option given explicitly that the run never reads (``--alpha`` without ``--partition
dirichlet``, ``--mu`` with FedAvg, ``--epsilon`` with no privacy mechanism, ...) is said in one line on stderr,
in runs and sweeps alike; the defaults a config.json records are not "given", and a resume says nothing.

The runs themselves are stubbed (``loop.run``, ``sweep.sweep``): what is tested is the line said before them."""

import json
import warnings
from pathlib import Path

import pytest

from fedalf_jax.cli import main
from fedalf_jax.experiment import loop, sweep
from fedalf_jax.experiment.config import Config
from fedalf_jax.experiment.sweep_plan import unread_given

TINY = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
        "--synthetic-train", "200", "--synthetic-test", "80", "--rounds", "2", "--eval-every", "1", "--no-progress"]


@pytest.fixture
def stubbed(monkeypatch):
    """``fedalf run`` and ``fedalf sweep`` without their runs: the configs they were given, in order."""
    seen = []

    def run(cfg, **kw):
        seen.append(cfg)
        return [{"round": cfg.rounds, "mean_acc": 0.5, "angle": 0.1, "angle_deg": 5.73}]

    def sweep_(configs, out, **kw):
        seen.extend(configs)
        return []
    monkeypatch.setattr(loop, "run", run)
    monkeypatch.setattr(sweep, "sweep", sweep_)
    return seen


def _warnings(capsys, argv) -> list[str]:
    """The ``fedalf: warning:`` lines of ``main(argv)`` (which must succeed)."""
    capsys.readouterr()
    with warnings.catch_warnings():  # independent of the environment's filters (PYTHONWARNINGS=ignore)
        warnings.simplefilter("default")
        assert main(argv) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return [ln for ln in err.splitlines() if ln.startswith("fedalf: warning:")]


def test_unread_options_by_hand():
    """Which given options a config never reads, and what the line says of each (hand-listed)."""
    base = dict(dataset="synthetic", model="mlp", clients=4, clients_per_round=2)
    line = unread_given([Config(**base, algorithm="fedavg", alpha=0.1, mu=0.5, epsilon=3.0, clip=2.0)],
                        ["alpha", "mu", "epsilon", "clip", "lr", "rounds"])
    assert line == ("--alpha 0.1 has no effect with partition=pat1 (only --partition dirichlet reads it); "
                    "--mu 0.5 has no effect with algorithm=fedavg (only fedprox reads it); "
                    "--epsilon 3 has no effect with ldp=none, dp=none (only a privacy mechanism, --ldp or --dp, "
                    "reads it); --clip 2 has no effect with dp=none (only --dp gaussian or central reads it): "
                    "recorded in the run's config, never read")
    # read: alpha by dirichlet, mu by fedprox, epsilon by a mechanism; the defaults are not named (not given)
    assert unread_given([Config(**base, algorithm="fedprox", partition="dirichlet", alpha=0.1, mu=0.5,
                                ldp="adaptive", epsilon=3.0)], ["alpha", "mu", "epsilon"]) is None
    assert unread_given([Config(**base, algorithm="fedavg")], []) is None
    # a sweep: an option one of its algorithms reads is read; one that none reads is said once, with each reason
    assert unread_given([Config(**base, algorithm=a, mu=0.5) for a in ("fedavg", "fedprox")], ["mu"]) is None
    assert unread_given([Config(**base, algorithm=a, mu=0.5) for a in ("fedavg", "qfedavg")], ["mu"]) == (
        "--mu 0.5 has no effect with algorithm=fedavg, algorithm=qfedavg (only fedprox reads it): "
        "recorded in the run's config, never read")
    # several values of an unread option: distinct's notice says it (its combinations are one run)
    assert unread_given([Config(**base, algorithm="fedavg", alpha=a) for a in (0.1, 0.2)], ["alpha"]) is None


def test_user_algorithm_leaves_only_the_partitions_options_unread(monkeypatch):
    """A user's algorithm reads HParams as it likes (mu, q, rho, epsilon, ...): only the partition's unread."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))  # examples/ as from the checkout's root
    base = dict(dataset="synthetic", model="mlp", clients=4, clients_per_round=2, algorithm="examples.feddyn:feddyn")
    assert unread_given([Config(**base, mu=0.5, q=0.3, epsilon=3.0)], ["mu", "q", "epsilon"]) is None
    assert unread_given([Config(**base, alpha=0.1)], ["alpha"]) == (
        "--alpha 0.1 has no effect with partition=pat1 (only --partition dirichlet reads it): "
        "recorded in the run's config, never read")


def test_run_says_unread_flags_in_one_line(capsys, tmp_path, stubbed):
    said = _warnings(capsys, ["run", *TINY, "--algorithm", "fedavg", "--alpha", "0.1", "--mu", "0.5",
                              "--out", str(tmp_path / "a")])
    assert len(said) == 1 and "--alpha 0.1 has no effect with partition=pat1" in said[0], said
    assert "--mu 0.5 has no effect with algorithm=fedavg" in said[0], said
    # given explicitly at its default value is still given; read options are not named
    said = _warnings(capsys, ["run", *TINY, "--algorithm", "fedprox", "--mu", "0.01", "--epsilon", "2",
                              "--out", str(tmp_path / "b")])
    assert len(said) == 1 and said[0].startswith("fedalf: warning: --epsilon 2 has no effect") and "--mu" not in said[0]
    assert _warnings(capsys, ["run", *TINY, "--algorithm", "fedprox", "--mu", "0.5", "--partition", "dirichlet",
                              "--alpha", "0.1", "--out", str(tmp_path / "c")]) == []
    assert len(stubbed) == 3


def test_config_file_defaults_are_not_given(capsys, tmp_path, stubbed):
    """``fedalf run --config runs/x/config.json``: config.json records every option, defaults included; only a
    value other than the default counts as given (one line for it), and ``--resume`` of a run says nothing."""
    plain = tmp_path / "plain.json"  # a FedAvg pat1 run's config.json: alpha, mu, q, epsilon, ... at their defaults
    plain.write_text(json.dumps(Config(algorithm="fedavg", dataset="synthetic", model="mlp", clients=4,
                                       clients_per_round=2).to_dict()))
    assert _warnings(capsys, ["run", "--config", str(plain), "--no-progress", "--out", str(tmp_path / "p")]) == []
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({**json.loads(plain.read_text()), "alpha": 0.1}))
    said = _warnings(capsys, ["run", "--config", str(odd), "--no-progress", "--out", str(tmp_path / "o")])
    assert len(said) == 1 and "--alpha 0.1 has no effect with partition=pat1" in said[0], said
    run = tmp_path / "r"  # a run made with --alpha 0.1 (it said so then): its resume says nothing again, even
    run.mkdir()           # by the command that started it with --resume added
    (run / "config.json").write_text(json.dumps({**json.loads(odd.read_text()), "out": str(run)}))
    assert _warnings(capsys, ["run", "--resume", "--out", str(run), "--no-progress"]) == []
    assert _warnings(capsys, ["run", "--config", str(odd), "--alpha", "0.1", "--resume", "--out", str(run),
                              "--no-progress"]) == []
    assert len(stubbed) == 4


def test_sweep_says_unread_options_in_one_line(capsys, tmp_path, stubbed):
    said = _warnings(capsys, ["sweep", *TINY, "--algorithm", "fedavg", "qfedavg", "--mu", "0.5", "--epsilon", "3",
                              "--seeds", "0", "1", "--out", str(tmp_path / "s")])
    assert len(said) == 1, said
    assert ("--mu 0.5 has no effect with algorithm=fedavg, algorithm=qfedavg (only fedprox reads it); --epsilon 3 "
            "has no effect with ldp=none, dp=none") in said[0], said
    assert len(stubbed) == 4
    # mu read by fedprox's runs: nothing to say
    assert _warnings(capsys, ["sweep", *TINY, "--algorithm", "fedavg", "fedprox", "--mu", "0.5",
                              "--out", str(tmp_path / "t")]) == []


def test_api_run_says_unread_keyword():
    """``fj.run(cfg, q=0.3)`` with FedAvg: the keyword is given, and said (a Notice); a real tiny run."""
    import fedalf_jax as fj
    from fedalf_jax.notices import Notice
    cfg = fj.Config(algorithm="fedavg", dataset="synthetic", model="mlp", clients=4, clients_per_round=2,
                    synthetic_train=200, synthetic_test=80, rounds=1, eval_every=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fj.run(cfg, progress=False, q=0.3)
    said = [str(w.message) for w in caught if issubclass(w.category, Notice)]
    assert said == ["--q 0.3 has no effect with algorithm=fedavg (only qfedavg reads it): recorded in the run's "
                    "config, never read"], said


# ---- issue 47 item 7: experiments/fair_benchmark.sh keeps and reports only the sweeps whose runs all ended ----

ROOT = Path(__file__).resolve().parents[1]
NAMES = ["fedavg", "qfedavg", "fedalf", "fedlf", "ldp-fedalf", "afl", "fedmgda", "term", "propfair", "fedfv", "ditto",
         "fedper", "fedrep", "apfl"]  # the script's JOBLIST
# A stand-in for fedalf: `sweep ... --out DIR` writes DIR/sweep.json listing runs r0 and r1 and each run's files
# (config.json holding $FAKE_TAG), or fails before sweep.json (its name in $FAKE_EARLY), or after it, leaving r1
# without summary.json (in $FAKE_LATE); `report PATHS --out DIR` writes DIR/reported.txt: "NAME/RUN TAG" a line
# for each run (config.json) below PATHS.
FAKE = r'''#!/usr/bin/env bash
cmd=$1; shift; out=; paths=()
while [ $# -gt 0 ]; do
  case $1 in --out) out=$2; shift;; --*) ;; *) [ "$cmd" = report ] && paths+=("$1");; esac; shift
done
if [ "$cmd" = report ]; then
  mkdir -p "$out"
  find "${paths[@]}" -name config.json | while read -r c; do
    r=$(dirname "$c"); echo "$(basename "$(dirname "$r")")/$(basename "$r") $(cat "$c")"; done > "$out/reported.txt"
  exit 0
fi
name=$(basename "$out")
case " ${FAKE_EARLY:-} " in *" $name "*) echo "fake: $name fails before sweep.json"; exit 2;; esac
mkdir -p "$out"
[ -f "$out/sweep.json" ] || printf '{"runs": [{"name": "r0", "dir": "r0", "config": {"data_dir": null}}, {"name": "r1", "dir": "r1", "config": {"data_dir": null}}]}\n' > "$out/sweep.json"
for r in r0 r1; do
  [ -f "$out/$r/summary.json" ] && continue
  mkdir -p "$out/$r"; echo "$FAKE_TAG" > "$out/$r/config.json"; echo "round" > "$out/$r/metrics.csv"
  case " ${FAKE_LATE:-} " in *" $name "*) [ $r = r1 ] && { echo "fake: $name fails in $r"; exit 1; };; esac
  echo '{"status": "done"}' > "$out/$r/summary.json"
done
'''


def _benchmark(tmp_path, out, tag, early="", late=""):
    """experiments/fair_benchmark.sh OUT with the fake fedalf, KEEP and REPORT in ``tmp_path``: its exit status,
    stderr, the kept runs' tags ({"NAME/RUN": tag}) and the reported ones (the same, or None: no report written)."""
    import os
    import subprocess
    fake = tmp_path / "fake-fedalf"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    keep, report = tmp_path / "keep", tmp_path / "report"
    if (report / "reported.txt").exists():
        (report / "reported.txt").unlink()
    env = {**os.environ, "FEDALF": str(fake), "KEEP": str(keep), "REPORT": str(report), "JOBS": "2",
           "FAKE_TAG": tag, "FAKE_EARLY": early, "FAKE_LATE": late}
    p = subprocess.run(["bash", str(ROOT / "experiments" / "fair_benchmark.sh"), str(tmp_path / out)], env=env,
                       capture_output=True, text=True, timeout=300)
    kept = {f"{c.parent.parent.name}/{c.parent.name}": c.read_text().strip() for c in keep.glob("*/*/config.json")
            if (c.parent / "summary.json").is_file() and (c.parent / "metrics.csv").is_file()}
    said = report / "reported.txt"
    reported = dict(ln.split() for ln in said.read_text().splitlines()) if said.exists() else None
    return p.returncode, p.stderr, kept, reported


def test_fair_benchmark_keeps_and_reports_only_complete_sweeps(tmp_path):
    every = {f"{n}/{r}" for n in NAMES for r in ("r0", "r1")}
    code, err, kept, reported = _benchmark(tmp_path, "a", "A")
    assert code == 0 and kept == reported == dict.fromkeys(every, "A"), err
    # a sweep that fails before its sweep.json: status 1, named; its earlier copy (grid A) kept, not reported
    code, err, kept, reported = _benchmark(tmp_path, "b", "B", early="qfedavg")
    assert code == 1 and "qfedavg" in err.splitlines()[-1], err
    assert kept == {k: "A" if k.startswith("qfedavg/") else "B" for k in every}
    assert reported == {k: "B" for k in every if not k.startswith("qfedavg/")}
    # a sweep that fails after its sweep.json (r1 never ends): the complete copy in KEEP stays, the report is
    # written of the others, status 1
    code, err, kept, reported = _benchmark(tmp_path, "c", "C", late="fedavg")
    assert code == 1 and "fedavg" in err.splitlines()[-1], err
    assert kept == {k: "B" if k.startswith("fedavg/") else "C" for k in every}
    assert reported == {k: "C" for k in every if not k.startswith("fedavg/")}
    # run again: the failed sweep resumes and ends (and the ended ones return at once): all kept and reported
    code, err, kept, reported = _benchmark(tmp_path, "c", "C")
    assert code == 0 and kept == reported == dict.fromkeys(every, "C"), err
