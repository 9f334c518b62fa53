"""The notebooks run as they are on a fresh checkout: executed headless with nbclient.

The kernel is this interpreter (``sys.executable``) through a kernelspec written for the test, so the
notebooks import the ``fedalf_jax`` installed here even where a user-level ``python3`` kernelspec points
elsewhere. ``FEDALF_RUNS`` is unset and the kernel starts in a folder beside an empty ``runs/``, so
``explore_runs.ipynb`` takes its fresh-checkout path (a tiny synthetic sweep into a temporary folder);
with ``FEDALF_RUNS`` naming a folder without runs it must stop with an error instead.
"""

import json
import sys
from pathlib import Path

import nbformat
import pytest
from ipykernel.kernelspec import write_kernel_spec
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CELL_TIMEOUT_S = 300  # each notebook takes well under a minute on a 2-core CPU


@pytest.fixture
def run_notebook(tmp_path, monkeypatch, compile_cache):
    """Executes a notebook of ``notebooks/`` in a fresh kernel; returns it with its outputs' text."""
    runs = tmp_path / "runs"
    runs.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # The kernel inherits this environment.
    monkeypatch.delenv("FEDALF_RUNS", raising=False)
    monkeypatch.delenv("FEDALF_CWD", raising=False)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TMPDIR", str(scratch))  # where the tiny sweep's tempfile.mkdtemp() goes
    # The kernel compiles into the suite's compilation cache, so a second run of the suite loads the
    # notebooks' programs: fj.run and fj.sweep follow the inherited FEDALF_COMPILE_CACHE themselves, and
    # JAX_COMPILATION_CACHE_DIR covers what a notebook jits directly (fedalf_round.ipynb's round phases).
    if compile_cache is not None:
        monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(compile_cache))
    kernels = tmp_path / "kernels"
    spec_dir = write_kernel_spec(kernels / "python3")
    assert json.loads(Path(spec_dir, "kernel.json").read_text())["argv"][0] == sys.executable

    kernel_cwd = tmp_path / "notebooks"  # like notebooks/ of a fresh checkout: ../runs is the empty runs/
    kernel_cwd.mkdir()

    def run(name: str):
        path = NOTEBOOKS / name
        nb = nbformat.read(path, as_version=4)
        km = KernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]),
                           connection_file=str(tmp_path / f"{path.stem}.kernel.json"))  # not left in /tmp
        client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, startup_timeout=120,
                                resources={"metadata": {"path": str(kernel_cwd)}})
        client.execute()  # raises CellExecutionError on the first failing cell
        return nb, _text(nb)

    return run


def _text(nb) -> str:
    """All text the code cells printed or returned."""
    parts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        # a cell's stdout and stderr each as one text: the kernel may flush one print in several stream
        # outputs (a loaded machine), which joined by newlines would cut a printed line in two
        streams = {}
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                streams[out.name] = streams.get(out.name, "") + out.text
        parts.extend(streams.values())
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                continue
            elif out.output_type in ("execute_result", "display_data"):
                parts.append(out.get("data", {}).get("text/plain", ""))
            elif out.output_type == "error":
                parts.append("\n".join(out.traceback))
    return "\n".join(parts)


@pytest.mark.parametrize("name", ["explore_runs.ipynb", "fedalf_round.ipynb", "custom_algorithm.ipynb"])
def test_notebook_is_committed_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: clear the outputs"


def test_explore_runs_makes_a_tiny_sweep_and_tabulates_it(run_notebook):
    nb, text = run_notebook("explore_runs.ipynb")
    assert "FEDALF_RUNS is not set and" in text and "making a tiny synthetic demo sweep" in text
    assert "tiny sweep: 6 runs" in text  # 8 combinations; FedLF (client_grad=full) ignores lr: run once
    # The runs table: a header and one row per run of the sweep, all finished.
    header = next(line for line in text.splitlines() if line.split()[:2] == ["name", "algorithm"])
    assert "mean_acc" in header and "angle_deg" in header
    rows = [line.split() for line in text.splitlines()]
    rows = [r for r in rows if len(r) == len(header.split()) and r[0].startswith(("fedavg_", "fedlf_"))]
    assert len(rows) == 6 and all(r[6] == "done" for r in rows), rows
    assert "4 evaluations x 8 clients" in text
    assert "no run here evaluates personalised models" in text  # FedAvg and FedLF have no personal_model


def test_fedalf_round_walkthrough_passes_its_checks(run_notebook):
    nb, text = run_notebook("fedalf_round.ipynb")
    assert "check passed: the fair direction conflicts with no client at model level" in text
    assert "fair direction d: 0 model-level" in text
    assert "-η_g d with η_g" in text


def test_custom_algorithm_notebook_runs(run_notebook, tmp_path, monkeypatch):
    """The user-written FedAvgM is registered, swept against FedAvg and FedALF, tabulated and plotted."""
    monkeypatch.delenv("FEDALF_NOTEBOOK_OUT", raising=False)  # the runs go to a temporary folder
    nb, text = run_notebook("custom_algorithm.ipynb")
    out = next(line for line in text.splitlines() if line.startswith("runs go to ")).split(" ", 3)[3]
    assert Path(out).parent == tmp_path / "scratch" and Path(out).name.startswith("fedalf-custom-")
    assert "SweepResult(9 runs in" in text
    # The table: one row per algorithm, mean ± std of the final mean_acc and angle_deg
    header = next(line for line in text.splitlines() if line.split() == ["mean_acc", "angle_deg"])
    rows = {line.split()[0]: line for line in text.splitlines() if line.count(" ± ") == 2}
    assert sorted(rows) == ["fedalf", "fedavg", "fedavgm"], (header, rows)
    # The figure: a PNG shown inline
    pngs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert len(pngs) == 1
    # The per-client state read back: 20 rounds x 5 clients participations
    counts = next(line for line in text.splitlines() if line.startswith("participations per client:"))
    assert sum(json.loads(counts.split(":", 1)[1])) == 100


def test_explore_runs_refuses_a_fedalf_runs_without_runs(run_notebook, tmp_path, monkeypatch):
    """FEDALF_RUNS set to a folder without runs: the first code cell fails, saying so, and no demo runs."""
    from nbclient.exceptions import CellExecutionError
    empty = tmp_path / "my_sweep"
    empty.mkdir()
    monkeypatch.setenv("FEDALF_RUNS", str(empty))
    with pytest.raises(CellExecutionError, match="holds no run directories") as e:
        run_notebook("explore_runs.ipynb")
    assert "NoRunsError" in str(e.value) and str(empty) in str(e.value)
    assert not list((tmp_path / "scratch").glob("fedalf-demo-*"))  # no demo sweep was made


def test_explore_runs_shows_personalised_models_beside_the_global_one(run_notebook, tmp_path, monkeypatch):
    """A Ditto run (examples/ditto.py): the notebook tabulates its personalised accuracy and angle beside
    the global model's, as metrics.csv has them, and plots both."""
    import fedalf_jax as fj
    sys.path.insert(0, str(NOTEBOOKS.parent / "tests"))
    from test_contract import _cfg
    out = tmp_path / "mine" / "ditto"
    fj.run(_cfg("examples.ditto:ditto", lr=0.5, server_lr=0.8, hp={"lam": 0.3}, out=str(out)), progress=False)
    monkeypatch.setenv("FEDALF_RUNS", str(tmp_path / "mine"))
    nb, text = run_notebook("explore_runs.ipynb")
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "personal_acc" in line and "global_acc" in line)
    header = lines[at].split()
    row = next(line for line in lines[at:] if line.startswith("ditto ")).split()
    got = dict(zip(header, row[1:]))
    m = fj.load(out).metrics.iloc[-1]
    assert got["algorithm"] == "examples.ditto:ditto" and int(got["round"]) == 2
    for k, col in (("global_acc", "mean_acc"), ("global_angle_deg", "angle_deg"), ("personal_acc", "personal_acc"),
                   ("personal_angle_deg", "personal_angle_deg")):
        assert float(got[k]) == pytest.approx(round(m[col], 4)), k
    assert float(got["personal_acc"]) == 1.0 and float(got["global_acc"]) == pytest.approx(0.3333)
    # issue 37.7: the run table has the algorithm's own hyper-parameter (Ditto's λ), as config.json has it
    at = next(i for i, line in enumerate(lines) if line.split()[:2] == ["name", "algorithm"])
    got = dict(zip(lines[at].split(), next(line for line in lines[at:] if line.startswith("ditto ")).split()))
    assert float(got["hp.lam"]) == 0.3 and got["status"] == "done", got


# ---- where FEDALF_RUNS points (fedalf_jax.experiment.explore), without a kernel -------------------------

def _fake_run(folder: Path) -> None:
    from fedalf_jax.experiment.config import Config
    from fedalf_jax.experiment.rundir import RunDir
    rd = RunDir(folder)
    rd.create()
    rd.write_config(Config(dataset="synthetic", model="mlp"))


def test_relative_fedalf_runs_counts_from_where_the_user_started(tmp_path, monkeypatch):
    from fedalf_jax.experiment.explore import NoRunsError, runs_to_explore
    start, kernel = tmp_path / "checkout", tmp_path / "checkout" / "notebooks"
    kernel.mkdir(parents=True)
    _fake_run(start / "runs" / "sweep" / "r0")
    monkeypatch.chdir(kernel)  # Jupyter's kernel runs in notebooks/; the shell was in the checkout
    monkeypatch.delenv("FEDALF_CWD", raising=False)
    folder, runs, why = runs_to_explore({"FEDALF_RUNS": "runs/sweep", "PWD": str(start)})
    assert folder == (start / "runs" / "sweep").resolve() and [r.name for r in runs] == ["r0"]
    assert "FEDALF_RUNS=runs/sweep" in why
    # FEDALF_CWD pins the folder; an absolute path is taken as it is
    assert runs_to_explore({"FEDALF_RUNS": "sweep", "FEDALF_CWD": str(start / "runs"), "PWD": "/"})[0] == folder
    assert runs_to_explore({"FEDALF_RUNS": str(start / "runs")})[0] == (start / "runs").resolve()
    # neither found nor holding runs: loud, naming what was looked at
    with pytest.raises(NoRunsError, match="does not exist") as e:
        runs_to_explore({"FEDALF_RUNS": "runs/other", "PWD": str(start)})
    assert str(start / "runs" / "other") in str(e.value) and str(kernel / "runs" / "other") in str(e.value)
    (start / "empty").mkdir()
    with pytest.raises(NoRunsError, match="holds no run directories"):
        runs_to_explore({"FEDALF_RUNS": "empty", "PWD": str(start)})
    # unset: ../runs from the kernel's folder (the checkout's runs/), else the demo (None)
    assert runs_to_explore({})[0] == (start / "runs").resolve()
    (tmp_path / "fresh" / "notebooks").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "fresh" / "notebooks")
    assert runs_to_explore({})[:2] == (None, [])
