"""``--help`` says what every option does and its default; ``bench`` lists only what it uses; the README's
commands are real (issue 16: what a new user stumbled on)."""

import argparse
import dataclasses
import re
import shlex
from pathlib import Path

import pytest

from fedalf_jax import cli
from fedalf_jax.experiment.config import Config

README = Path(__file__).resolve().parents[1] / "README.md"
DOCS = README.parent / "docs"
# the front page and the guide pages whose commands a user copies (the lab keeps the figures: docs/lab/)
GUIDE = [README, DOCS / "tutorial.md", DOCS / "how-to.md", *sorted((DOCS / "explanation").glob("*.md"))]


def _guide_text() -> str:
    return "\n".join(p.read_text() for p in GUIDE)


def _subparser(command: str) -> argparse.ArgumentParser:
    p = cli.build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _options(command: str) -> list[argparse.Action]:
    return [a for a in _subparser(command)._actions if not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("command", ["run", "sweep", "bench", "report"])
def test_every_option_has_a_description_with_its_default(command):
    for a in _options(command):
        name = a.option_strings[0] if a.option_strings else a.dest
        text = (a.help or "").strip()
        assert text, f"fedalf {command} {name}: no description"
        # its own words, not the option's name spelled out (the fallback for a config field without _HELP)
        assert text.split(" (default")[0] != a.dest.replace("_", " "), f"fedalf {command} {name}: no description"
        if a.option_strings and a.nargs != 0 and not a.required:  # takes a value: say what it is without one
            assert "default" in text, f"fedalf {command} {name}: the help does not show its default"


def test_every_config_option_has_its_own_help_entry():
    missing = [f.name for f in dataclasses.fields(Config) if f.name not in cli._HELP]
    assert not missing, f"add these options to _HELP in fedalf_jax/cli_options.py: {missing}"


def test_help_shows_the_defaults_readably(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for snippet in ("--alpha ALPHA Dirichlet concentration", "(default: 0.5)", "--qp-method {auto,active,osqp,pgd}",
                    "--layers {module,tensor} the fair direction's blocks", "--ldp {", "--dp {none,gaussian,central} gaussian: local Gaussian DP",
                    "--client-grad {full,local} FedLF's client", "default: none, every option at its default"):
        assert snippet in out, snippet
    assert "(default: None)" not in out


def test_bench_lists_only_the_options_it_uses():
    bench = {s for a in _options("bench") for s in a.option_strings}
    run = {s for a in _options("run") for s in a.option_strings}
    unused = {"--train-loss-every", "--checkpoint-every", "--log"}
    assert unused <= run and not (unused & bench)
    # the ones it does use, described for bench
    helps = {a.option_strings[0]: a.help for a in _options("bench") if a.option_strings}
    assert "--sweep-width" in helps["--eval-every"] and "--suite" in helps["--out"]
    # without the flags bench still builds its config (they keep their defaults)
    args = cli.build_parser().parse_args(["bench", "--dataset", "synthetic"])
    assert not hasattr(args, "train_loss_every") and cli.config_from_args(args).train_loss_every == 50


def _readme_commands(tool: str) -> list[str]:
    """The README's and the guide's shell lines (code blocks, continuations joined) that run ``.venv/bin/<tool>``."""
    blocks = re.findall(r"```bash\n(.*?)```", _guide_text(), flags=re.S)
    lines = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = re.split(r"\s#", line)[0].strip()
            if f".venv/bin/{tool} " in f"{line} " and not line.startswith("#"):
                lines.append(line)
    return lines


def test_readme_commands_are_copy_pasteable():
    """Every fedalf command of the README runs from a fresh shell (.venv/bin/, no activation) and parses;
    the notebook command passes FEDALF_RUNS absolute and uses the .venv's Jupyter (the README and the guide)."""
    text = _guide_text()
    assert not re.search(r"^(fedalf|jupyter|pytest) ", text, flags=re.M), "a README command needs .venv/bin/"
    commands = _readme_commands("fedalf")
    assert len(commands) >= 12
    from helpers import assert_command_parses
    for line in commands:
        assert_command_parses(f"README: {line!r}", shlex.split(line.split(".venv/bin/fedalf", 1)[1]))
    (nb,) = _readme_commands("jupyter")
    assert nb.startswith('FEDALF_RUNS="$PWD/') and "notebooks/explore_runs.ipynb" in nb
    assert "bash experiments/setup.sh notebooks" in text
    flags = " ".join(commands)
    assert "--ldp adaptive" in flags and "--dp gaussian" in flags  # LDP-FedALF, DP-FedALF
    assert "`--partition pat1`: every client holds exactly 2 classes; `pat2`: exactly 1" in " ".join(text.split())


def test_readme_says_what_the_main_job_costs():
    """The README names the main job's cost in one line and links the lab page that holds the figures."""
    readme = " ".join(README.read_text().split())
    assert "docs/lab/costs.md" in readme and "200 rounds" in readme and "about 1 GB" in readme
    text = " ".join((DOCS / "lab" / "costs.md").read_text().split())
    assert "the whole run took 6 min 34 s" in text and "about 1.9 s each" in text and "2.8 GiB of peak memory" in text
    assert "about **940 MB**" in text and "`checkpoint.npz` is 468 MB" in text


def test_pyproject_license_is_an_spdx_string():
    """A ``project.license`` table is deprecated by setuptools (two screens of warnings at install)."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]
    assert isinstance(project["license"], str) and project["license"] == "Apache-2.0"
    assert "setuptools>=77" in (README.parent / "pyproject.toml").read_text()  # the first to read the string form


def test_the_smoke_suite_and_the_bench_json_are_described_truly():
    """Issue 36.10: `--suite smoke` was "seconds" in --help and "a few minutes" in the README (it takes minutes);
    the README's `fedalf bench --json bench.json` wrote into the checkout; its GPU section pinned no jax."""
    import re
    from pathlib import Path
    from fedalf_jax.cli import build_parser
    bench = build_parser()._subparsers._group_actions[0].choices["bench"]
    (suite,) = [a for a in bench._actions if a.dest == "suite"]
    assert "minutes on a CPU" in suite.help and "seconds" not in suite.help.split("smoke:")[1].split(".")[0]
    readme = " ".join(_guide_text().split())  # the GPU how-to, where the README's GPU section went
    assert "`--suite smoke` runs the same code on tiny synthetic data on a CPU in minutes, not seconds" in readme
    assert "ALLOW_CPU=1 SUITE=smoke" in readme  # the dry run of a GPU session
    assert not re.search(r"--json (?!runs/)\S+\.json", readme)  # into runs/ (git-ignored), never the checkout
    assert '"jax[cuda13]==0.10.2"' in readme and "jax 0.11.2 with CUDA 13" in readme


@pytest.mark.parametrize("command", ["run", "sweep", "bench"])
def test_the_options_are_grouped_by_what_they_set(command):
    """Issue 49 item 7: 62 options in one list; now each config option sits in a titled group."""
    parser = _subparser(command)
    grouped = {a.dest: g.title for g in parser._action_groups for a in g._group_actions}
    fields = {f.name for f in dataclasses.fields(Config)}
    own = {"out", "seed"} if command == "sweep" else set()  # sweep's own --out (a folder of runs) and --seeds
    flags = [a.dest for a in _options(command) if a.dest in fields - own]
    assert len(flags) > 40
    assert {grouped[n] for n in flags} <= set(cli.FLAG_GROUPS), {n: grouped[n] for n in flags}
    assert grouped["epsilon"] == "privacy" and grouped["lr"] == "federated training"
    assert grouped["alpha"] == "data and partition" and grouped["eval_every"].startswith("evaluation")


def test_the_server_step_and_epsilon_say_their_defaults_and_units():
    helps = {a.dest: a.help for a in _options("run")}
    assert all(s in helps["server_lr"] for s in ("fedlf 0.05", "fedalf 0.5", "1.0")), helps["server_lr"]
    assert "whole run for --dp central" in helps["epsilon"] and "per upload" in helps["epsilon"]
    assert "default: 2.0" in helps["epsilon"]
