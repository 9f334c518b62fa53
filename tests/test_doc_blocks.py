"""Every code block of the README and of the guide (docs/tutorial.md, docs/how-to.md, docs/explanation/)
is checked against the code: each ``fedalf`` command line is parsed by the real parser
(``fedalf_jax.cli_options.build_parser``, what ``fedalf`` runs), so a renamed flag or value fails here; a
``run``/``bench`` line's options are also validated as a config; the repository files a shell line names
exist; each Python block compiles and the ``fj.<name>`` it uses exist. The README's Python example is
executed on tiny synthetic data by tests/test_api_stumbles.py
(``test_readme_api_block_prints_what_it_computes_and_runs_twice``); a Python block of the guide that is
not that block is executed here the same way.
"""

import re
import shlex
from pathlib import Path

import pytest

import fedalf_jax as fj

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", DOCS / "tutorial.md", DOCS / "how-to.md", *sorted((DOCS / "explanation").glob("*.md"))]
# top-level folders of the checkout: a shell word that starts with one names a file that must exist
REPO_DIRS = ("experiments/", "notebooks/", "tests/", "examples/", "fedalf_jax/", "docs/", ".ci/")


def _blocks(lang: str):
    for page in PAGES:
        for m in re.finditer(rf"```{lang}\n(.*?)```", page.read_text(), flags=re.S):
            yield page, m.group(1)


def _shell_commands():
    """(page, command) for every command of every bash block: continuations joined, comments dropped,
    ``a && b`` split."""
    for page, block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.split(r"(?:^|\s)#", line)[0].strip()
            for cmd in filter(None, (c.strip() for c in line.split("&&"))):
                yield page, cmd


def _fedalf_argv(cmd: str):
    words = shlex.split(cmd)
    for i, w in enumerate(words):
        if w.endswith("bin/fedalf") or w == "fedalf":
            return words[i + 1:]
    return None


def test_the_pages_have_blocks_to_test():
    assert all(p.is_file() for p in PAGES), [str(p) for p in PAGES if not p.is_file()]
    fedalf = [c for _, c in _shell_commands() if _fedalf_argv(c) is not None]
    assert len(fedalf) >= 20 and {a[0] for a in map(_fedalf_argv, fedalf)} >= {"run", "sweep", "report", "bench"}
    assert len(list(_blocks("python"))) >= 2
    # the README's one Python block is the one test_api_stumbles executes
    (readme,) = [c for p, c in _blocks("python") if p.name == "README.md"]
    assert readme == _readme_example()


@pytest.mark.parametrize("page,cmd", [(p.relative_to(ROOT).as_posix(), c) for p, c in _shell_commands()
                                      if _fedalf_argv(c) is not None])
def test_every_fedalf_command_parses(page, cmd):
    from helpers import assert_command_parses
    assert_command_parses(f"{page}: {cmd!r}", _fedalf_argv(cmd))


@pytest.mark.parametrize("page,cmd", [(p.relative_to(ROOT).as_posix(), c) for p, c in _shell_commands()])
def test_the_files_a_shell_line_names_exist(page, cmd):
    words = shlex.split(cmd)
    named = [w.split("=", 1)[-1] for w in words if w.split("=", 1)[-1].startswith(REPO_DIRS)]
    if words and words[0] == "bash" and len(words) > 1:
        named.append(words[1])
    for w in _fedalf_argv(cmd) or []:
        m = re.fullmatch(r"(examples)\.(\w+):\w+", w)  # a plug-in named module:attribute
        if m:
            named.append(f"{m.group(1)}/{m.group(2)}.py")
    for path in named:
        if path.startswith("docs/_build"):
            continue  # what the docs build writes
        assert (ROOT / path).exists(), f"{page}: {cmd!r} names {path}, which is not in the checkout"


def _readme_example() -> str:
    from test_api_stumbles import _readme_api_block
    return _readme_api_block()


@pytest.mark.parametrize("n", range(len(list(_blocks("python")))))
def test_every_python_block_compiles_and_uses_the_api(n):
    page, code = list(_blocks("python"))[n]
    compile(code, str(page), "exec")
    for name in re.findall(r"\bfj\.(\w+)", code):
        assert hasattr(fj, name), f"{page.name}: fj.{name} is not in fedalf_jax"


def test_the_guides_python_blocks_are_executed_somewhere(tmp_path, monkeypatch, capsys, compile_cache):
    """The README's example runs in test_api_stumbles; any other block of the guide runs here, on the same
    tiny synthetic problem (fj.Config wrapped), in a folder of its own."""
    from test_api_stumbles import TINY
    readme = _readme_example()
    others = [(p, c) for p, c in _blocks("python") if c.strip() != readme.strip()]
    real = fj.Config
    monkeypatch.setattr(fj, "Config", lambda **kw: real(**{**kw, **TINY, "clients": 4, "clients_per_round": 2}))
    monkeypatch.chdir(tmp_path)
    for page, code in others:
        exec(compile(code, str(page), "exec"), {"__name__": "__main__"})
    capsys.readouterr()


def test_the_readme_links_pages_that_exist():
    text = (ROOT / "README.md").read_text()
    named = set(re.findall(r"`(docs/[\w./-]+)`", text)) | set(re.findall(r"\]\(((?:docs|notebooks|examples)/[^)#]+)", text))
    assert {"docs/tutorial.md", "docs/how-to.md", "docs/explanation/"} <= named
    for path in named:
        assert (ROOT / path).exists(), f"README names {path}, which does not exist"
