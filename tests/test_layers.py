"""The package's floors, drawn from its own imports (``ast`` over fedalf_jax/**/*.py; nothing is imported).

Every ``import``/``from ... import`` counts as an edge, also one inside a function (a lazy import is still
a dependency: the module cannot run without the other one); one under ``if TYPE_CHECKING:`` does not (it
is never run: an annotation's name). An edge goes to the module named; ``from
package import name`` goes to ``package.name`` where that is a module of the package, else to the package.
A package's own ``__init__`` is left out of the drawing (it re-exports its modules; it is what ``import
fedalf_jax`` loads, not a floor).

Asserted: no import circles between modules (nor with the ``TYPE_CHECKING`` imports counted), and no module of the
floors ``runtime/``, ``sim/``, ``problem/`` and ``algorithms/`` (the plumbing, the simulation core, the problems it
simulates, the algorithms' types and built-ins) importing the floors above them (``config/``, ``plugins/``,
``runner/``, ``sweeps/``, the old paths' ``experiment/``, ``reporting/``, ``bench/``, ``api``, ``cli``, ``cli_options``,
``cli_declared``). ``python tests/test_layers.py [ROOT]`` prints the circles and
back-arrows of the package under ROOT (default: this checkout).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = "fedalf_jax"
LOW = ("runtime", "sim", "problem", "algorithms")  # the floors that import nothing above them
HIGH = ("experiment", "config", "plugins", "runner", "sweeps", "reporting", "bench", "api", "cli", "cli_options",
        "cli_declared")


def modules(root: Path) -> dict[str, Path]:
    """Dotted name → file, for every module under ``root/fedalf_jax`` (packages as their ``__init__``)."""
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` is or lies in (``a.b.c`` → ``a.b`` if only that is a module)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (imports for annotations, never run)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in _runtime_nodes_of(child))
            continue
        yield from _runtime_nodes_of(node)


def _runtime_nodes_of(node: ast.AST):
    yield node
    yield from _runtime_nodes(node)


def edges(root: Path, annotations: bool = False) -> dict[str, set[str]]:
    """Module → the package's modules it imports (at module level or inside a function; ``annotations``:
    under ``if TYPE_CHECKING:`` too)."""
    known = modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        targets: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in (ast.walk(tree) if annotations else _runtime_nodes(tree)):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets.add(source)
                targets.update(f"{source}.{a.name}" for a in node.names)  # `from pkg import module`
        resolved = {_resolve(t, known) for t in targets if t.split(".")[0] == PACKAGE}
        graph[name] = {t for t in resolved if t and t != name}
    return graph


def drawing(root: Path, annotations: bool = False) -> dict[str, set[str]]:
    """The graph between modules, without the packages' ``__init__`` re-exports (see the module docstring);
    ``annotations``: with the imports under ``if TYPE_CHECKING:`` (what an import-graph tool draws)."""
    known = modules(root)
    inits = {n for n, p in known.items() if p.name == "__init__.py"}
    return {m: {t for t in ts if t not in inits} for m, ts in edges(root, annotations).items() if m not in inits}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted; sorted by first name."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(groups)


def _floor(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def back_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(low, high): a module of ``sim``/``problem`` importing one of ``experiment``, ``reporting``, ``bench``,
    ``api``, ``cli``, ``cli_options``."""
    return sorted((m, t) for m, ts in graph.items() if _floor(m) in LOW for t in ts if _floor(t) in HIGH)


ROOT = Path(__file__).resolve().parents[1]


def test_the_drawing_sees_the_imports():
    """The drawing is not empty by mistake: it sees imports known to be there, also a lazy one."""
    graph = drawing(ROOT)
    assert "fedalf_jax.privacy.mechanisms" in graph["fedalf_jax.sim.program"]
    assert "fedalf_jax.config.config" in graph["fedalf_jax.cli"]
    assert "fedalf_jax.config.config" in graph["fedalf_jax.runner.loop"]
    assert "fedalf_jax.privacy.mechanisms" in graph["fedalf_jax.sim.privacy"]  # an old path: an alias of the new
    # circles() and back_arrows() find what they are made to find
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert back_arrows({"fedalf_jax.sim.x": {"fedalf_jax.experiment.y", "fedalf_jax.sim.z"}}) == [
        ("fedalf_jax.sim.x", "fedalf_jax.experiment.y")]


def test_no_import_circles():
    found = circles(drawing(ROOT))
    assert not found, "import circles: " + "; ".join(" <-> ".join(g) for g in found)


def test_the_annotation_drawing_sees_a_type_checking_import(tmp_path):
    """A pair importing each other, one side only under ``if TYPE_CHECKING:``, the other inside a function:
    a circle in the drawing with annotations, none in the runtime one."""
    pkg = tmp_path / PACKAGE
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n    return g\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n"
                              "def g(x: 'f'):\n    return x\n")
    assert circles(drawing(tmp_path, annotations=True)) == [[f"{PACKAGE}.a", f"{PACKAGE}.b"]]
    assert circles(drawing(tmp_path)) == []


def test_no_two_modules_import_each_other_even_for_annotations():
    """An import under ``if TYPE_CHECKING:`` is never run, but it is still an arrow of the package's drawing
    (any import-graph tool draws it): no two modules import each other that way either, nor any longer
    circle (issue 49 item 5: experiment.config <-> experiment.guarantee was the last)."""
    graph = drawing(ROOT, annotations=True)
    pairs = sorted((a, b) for a, ts in graph.items() for b in ts if a < b and a in graph.get(b, ()))
    assert not pairs, "modules importing each other: " + "; ".join(f"{a} <-> {b}" for a, b in pairs)
    found = circles(graph)
    assert not found, "import circles (annotations counted): " + "; ".join(" <-> ".join(g) for g in found)


def test_no_floor_imports_the_one_above():
    found = back_arrows(drawing(ROOT))
    assert not found, "back-arrows: " + "; ".join(f"{a} -> {b}" for a, b in found)


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    graph = drawing(root)
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} import edges ({root})")
    for group in circles(graph):
        print("circle:", " <-> ".join(m.removeprefix(PACKAGE + ".") for m in group))
    for group in circles(drawing(root, annotations=True)):
        if group not in circles(graph):
            print("circle (with TYPE_CHECKING imports):", " <-> ".join(m.removeprefix(PACKAGE + ".") for m in group))
    for a, b in back_arrows(graph):
        print("back-arrow:", a.removeprefix(PACKAGE + "."), "->", b.removeprefix(PACKAGE + "."))
