"""Sphinx configuration of the user guide and API reference (``pip install -e ".[docs]"``).

Build, strict (a warning fails it; tests/test_docs_build.py runs the same):

    .venv/bin/sphinx-build -W --keep-going -b html docs build/docs

The pages are Markdown (myst-parser); the API reference (docs/reference/api.md) is autodoc over
``fedalf_jax.__all__``, the public API, expanded when the page is read, so an export added to
``fedalf_jax/__init__.py`` is documented without editing the page.
"""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

project = "fedalf_jax"
author = "fedalf_jax contributors"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.napoleon",
              "sphinx.ext.mathjax"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# the kept run folders and reports are data that tests read, not pages of the guide
exclude_patterns = ["_build", "*-runs", "*-report", "report-example", "bench", "Thumbs.db", ".DS_Store"]
# docs/extending.md writes its contracts as math in python blocks (θ − w, ‖v‖²): shown as written, not lexed
suppress_warnings = ["misc.highlighting_failure"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the signatures carry the types; jax's aliases do not resolve as references
autosummary_generate = False
html_theme = "alabaster"
html_static_path = []

API_PLACEHOLDER = "<!-- public-api -->"


def _public_api() -> str:
    """An autosummary table, then one autodoc entry per name of ``fedalf_jax.__all__`` (rST in a myst block)."""
    import inspect

    import fedalf_jax as fj

    rows, entries = [], []
    for name in fj.__all__:
        obj = getattr(fj, name)
        if inspect.ismodule(obj):
            continue  # fj.algorithms: the built-ins' pieces, listed by their own page
        kind = "autoclass" if inspect.isclass(obj) else "autofunction"
        rows.append(f"   fedalf_jax.{name}")
        opts = "   :members:\n" if kind == "autoclass" else ""
        entries.append(f".. {kind}:: fedalf_jax.{name}\n{opts}")
    table = ".. autosummary::\n   :nosignatures:\n\n" + "\n".join(rows) + "\n"
    return "```{eval-rst}\n" + table + "\n" + "\n".join(entries) + "```\n"


def _expand(app, docname, source):
    if API_PLACEHOLDER in source[0]:
        source[0] = source[0].replace(API_PLACEHOLDER, _public_api())


def setup(app):
    app.connect("source-read", _expand)
