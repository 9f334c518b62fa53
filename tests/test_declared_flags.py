"""A user's algorithm's declared hyper-parameters get flags of their own (issue 56 item 1): ``--beta 0.25`` is
``--hp beta=0.25``, and ``fedalf sweep --beta 0.1 0.2`` sweeps it, as a built-in's ``--mu`` is its option.
Expectations: the config.json each run writes (its ``hp``), the runs a sweep plans, and the command's own flags
left as they are."""

import json
import textwrap

import pytest

from fedalf_jax.cli import main
from fedalf_jax.cli_declared import expand

# the smallest user algorithm with an option of its own: FedAvg whose server steps by beta (a declared hparam)
SMALLEST = textwrap.dedent('''
    import fedalf_jax as fj

    def server(s):
        return fj.algorithms.weighted_mean_server(s._replace(server_lr_t=s.hp.own["beta"]))

    def scaled():
        return fj.Algorithm("scaled", server=server, upload=fj.algorithms.model_upload, private_upload=True,
                            hparams={"beta": 0.5, "rounds": 1.0})
''')
TINY = ["--dataset", "synthetic", "--model", "mlp", "--clients", "4", "--clients-per-round", "2",
        "--synthetic-train", "120", "--synthetic-test", "40", "--batch-size", "20", "--rounds", "1",
        "--eval-every", "1", "--no-progress"]


@pytest.fixture
def smallest(tmp_path, monkeypatch):
    (tmp_path / "smallest56.py").write_text(SMALLEST)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return "smallest56:scaled"


def test_a_declared_hparam_is_a_flag_of_its_own(smallest, tmp_path):
    assert main(["run", "--algorithm", smallest, "--beta", "0.25", *TINY, "--out", str(tmp_path / "flag")]) == 0
    assert main(["run", "--algorithm", smallest, "--hp", "beta=0.25", *TINY, "--out", str(tmp_path / "hp")]) == 0
    flag = json.loads((tmp_path / "flag" / "config.json").read_text())
    hp = json.loads((tmp_path / "hp" / "config.json").read_text())
    assert flag["hp"] == {"beta": 0.25, "rounds": 1.0} and flag == {**hp, "out": flag["out"]}
    # a declared name that is one of the command's flags stays the command's (--rounds is the run's length)
    assert expand(["run", "--algorithm", smallest, "--rounds", "3"]) == ["run", "--algorithm", smallest, "--rounds",
                                                                         "3"]


def test_a_sweep_sweeps_a_declared_hparams_flag(smallest, tmp_path):
    out = tmp_path / "sw"
    assert main(["sweep", "--algorithm", smallest, "--beta", "0.1", "-0.2", *TINY, "--out", str(out)]) == 0
    betas = sorted(json.loads((out / r["dir"] / "config.json").read_text())["hp"]["beta"]
                   for r in json.loads((out / "sweep.json").read_text())["runs"])
    assert betas == [-0.2, 0.1]


def test_a_builtin_or_an_undeclared_name_gets_no_flag(smallest, capsys):
    assert expand(["run", "--algorithm", "fedavg", "--beta", "0.2"]) == ["run", "--algorithm", "fedavg", "--beta",
                                                                          "0.2"]
    with pytest.raises(SystemExit) as e:
        main(["run", "--algorithm", smallest, "--gamma", "0.2", *TINY])
    assert e.value.code == 2 and "--gamma" in capsys.readouterr().err
