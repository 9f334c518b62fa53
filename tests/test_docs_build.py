"""The user guide and API reference build strictly: ``sphinx-build -W --keep-going -b html docs OUT``.

A warning fails the build (a broken cross-reference, a page outside every toctree, a docstring autodoc
cannot read), so a renamed export, a moved page or a broken link in docs/ fails this test. It takes a few
seconds (myst-parser and autodoc over ``fedalf_jax.__all__``; no notebook, no network).
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_build_with_no_warning(tmp_path):
    pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("myst_parser", reason="the docs extra: pip install -e '.[docs]'")
    out = tmp_path / "html"
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "docs", str(out),
           "-d", str(tmp_path / "doctrees")]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    assert p.returncode == 0, f"sphinx-build failed ({took:.0f} s):\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    assert "WARNING" not in p.stderr, p.stderr[-4000:]
    # the guide's four parts and the lab are pages of it; the reference documents the public API
    for page in ("tutorial", "how-to", "explanation/index", "reference/api", "lab/index", "lab/costs"):
        assert (out / f"{page}.html").is_file(), page
    api = (out / "reference" / "api.html").read_text()
    import fedalf_jax as fj
    for name in ("run", "sweep", "load", "report", "Config", "Algorithm"):
        assert name in fj.__all__ and f'id="fedalf_jax.{name}"' in api, name


def test_every_page_of_docs_is_in_the_build_or_excluded_for_a_reason():
    """A Markdown file under docs/ is a page (sphinx then requires it in a toctree, which -W enforces) unless
    it lies in a kept run or report folder, which conf.py's exclude_patterns name."""
    conf = (ROOT / "docs" / "conf.py").read_text()
    for pattern in ("*-runs", "*-report", "report-example", "bench"):
        assert f'"{pattern}"' in conf, pattern
    index = (ROOT / "docs" / "index.md").read_text()
    for part in ("tutorial", "how-to", "explanation/index", "reference/api", "lab/index"):
        assert f"\n{part}\n" in index, part
