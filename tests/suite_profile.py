"""Where the suite's time goes: a pytest plugin that records, per test, its wall time, its process's CPU time,
the CPU time of the subprocesses it waited for, the seconds JAX spent tracing and lowering its programs (the
outermost ``jit`` of each), and every program XLA compiled for it (the program's name, the seconds
``compile_or_get_cached`` took, a load from the compilation cache included, and for those over 0.2 s a hash of
the program's text, to count the same program compiled twice, and one of its text with every number blanked,
to count the programs that differ only in shapes, sizes or constants); and a report of those records.

    PYTHONPATH=tests .venv/bin/pytest -p suite_profile        # each worker writes its records
    .venv/bin/python tests/suite_profile.py                   # the report

Records go to ``$FEDALF_SUITE_PROFILE`` (default: ``fedalf-suite-profile`` in the system's temporary folder),
one JSON file per xdist worker, written at the session's end (a session starts by removing the last one's).
What a test's subprocesses compile counts in their CPU time, not among the programs; a notebook kernel (not
waited for as a child) in neither. The hook is JAX's private ``jax._src.compiler.compile_or_get_cached``:
where a JAX version lacks it, the programs go unrecorded and the rest still works.
docs/lab/suite_time.md has what it found.
"""

import collections
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import pytest

FOLDER = Path(os.environ.get("FEDALF_SUITE_PROFILE", Path(tempfile.gettempdir()) / "fedalf-suite-profile"))
HASHED_OVER_S = 0.2

_current = {"test": None}
_compiles = []  # (test, program, seconds, hash or None, number-blind hash or None)
_staged = collections.defaultdict(lambda: {"trace": 0.0, "lower": 0.0})  # test -> seconds tracing and lowering
_STAGES = {"/jax/core/compile/jaxpr_trace_duration": "trace",
           "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower"}
_tests = {}  # test -> {"wall", "cpu", "children"}


def digests(text: str) -> tuple[str, str]:
    """A program's hash, and the hash of its text with every number blanked (the same for two programs
    that differ only in shapes, sizes or constants)."""
    return (hashlib.sha1(text.encode()).hexdigest()[:12],
            hashlib.sha1(re.sub(r"\d+", "#", text).encode()).hexdigest()[:12])


def stage_listener(event, seconds, **_):
    """Adds the seconds JAX spent tracing a program to a jaxpr or lowering it to StableHLO to the running
    test's: paid again by a program the cache serves, since the cache's key is the lowered program."""
    if event in _STAGES:
        _staged[_current["test"]][_STAGES[event]] += seconds


def _record_stages():
    import jax
    jax.monitoring.register_event_duration_secs_listener(stage_listener)


def _record_compiles():
    try:
        from jax._src import compiler
        orig = compiler.compile_or_get_cached
    except (ImportError, AttributeError):
        return

    def compile_or_get_cached(backend, computation, *args, **kwargs):
        t0 = time.perf_counter()
        out = orig(backend, computation, *args, **kwargs)
        dt = time.perf_counter() - t0
        name = str(computation.operation.attributes["sym_name"]).strip('"')
        digest = blind = None
        if dt > HASHED_OVER_S:
            digest, blind = digests(str(computation))
        _compiles.append((_current["test"], name, round(dt, 4), digest, blind))
        return out

    compiler.compile_or_get_cached = compile_or_get_cached


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the session's first process: a last session's records go
        for old in FOLDER.glob("*.json"):
            old.unlink()
    _record_compiles()
    _record_stages()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current["test"] = item.nodeid
    t0, c0 = time.perf_counter(), os.times()
    yield
    c1 = os.times()
    _tests[item.nodeid] = {"wall": time.perf_counter() - t0,
                           "cpu": (c1.user - c0.user) + (c1.system - c0.system),
                           "children": (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)}
    _current["test"] = None



def pytest_sessionfinish(session):
    if not _tests:  # the xdist controller runs no test
        return
    FOLDER.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (FOLDER / f"{worker}.json").write_text(json.dumps({"tests": _tests, "compiles": _compiles,
                                                        "staged": {str(k): v for k, v in _staged.items()}}))


# ---- the report ----------------------------------------------------------------------------------------

def report(folder: Path = FOLDER, top: int = 25) -> str:
    tests, compiles, staged = {}, [], collections.Counter()
    for f in sorted(folder.glob("*.json")):
        d = json.loads(f.read_text())
        tests.update(d["tests"])
        compiles += [tuple(c) for c in d["compiles"]]
        for v in d.get("staged", {}).values():  # records of an older plugin have none
            staged.update(v)
    if not tests:
        return f"no records in {folder}: run PYTHONPATH=tests .venv/bin/pytest -p suite_profile first"
    wall, cpu, children = (sum(t[k] for t in tests.values()) for k in ("wall", "cpu", "children"))
    big = [c for c in compiles if c[3] is not None]
    per_hash = collections.defaultdict(list)
    for c in big:
        per_hash[c[3]].append(c[2])
    again = sum(sum(v) - max(v) for v in per_hash.values())
    out = [f"{len(tests)} tests, {wall:.0f} worker-seconds (wall, summed over the workers); their processes' CPU "
           f"{cpu:.0f} s, their subprocesses' {children:.0f} s",
           f"programs compiled or loaded: {len(compiles)}, {sum(c[2] for c in compiles):.0f} s; over {HASHED_OVER_S} s: "
           f"{len(big)} calls of {len(per_hash)} distinct programs, {sum(c[2] for c in big):.0f} s, of which "
           f"{again:.0f} s went to a program seen before (compiled again, or loaded from the cache); the rest "
           f"({len(compiles) - len(big)} calls) {sum(c[2] for c in compiles if c[3] is None):.0f} s"]
    if staged:
        out.append(f"tracing to jaxprs {staged['trace']:.0f} s, lowering to StableHLO {staged['lower']:.0f} s "
                   "(a program the cache serves pays both)")
    out.append("")
    per_test = collections.Counter()
    for c in compiles:
        if c[0] is not None:
            per_test[c[0]] += c[2]
    by_file = collections.defaultdict(collections.Counter)
    for name, t in tests.items():
        by_file[name.split("::")[0]].update({**t, "n": 1, "compile": per_test[name]})
    out.append(f"{'file':<40} {'tests':>5} {'wall':>6} {'cpu':>6} {'subproc':>7} {'compile':>7}")
    for f, c in sorted(by_file.items(), key=lambda kv: -kv[1]["wall"])[:top]:
        out.append(f"{Path(f).name:<40} {c['n']:>5} {c['wall']:>6.0f} {c['cpu']:>6.0f} {c['children']:>7.0f} "
                   f"{c['compile']:>7.0f}")
    out += ["", f"{'wall':>6} {'compile':>7} {'subproc':>7}  test (the {top} longest)"]
    for name, t in sorted(tests.items(), key=lambda kv: -kv[1]["wall"])[:top]:
        out.append(f"{t['wall']:>6.1f} {per_test[name]:>7.1f} {t['children']:>7.1f}  {name}")
    names = collections.Counter()
    for c in big:
        names[c[1]] += c[2]
    blind = collections.defaultdict(dict)  # number-blind digest -> {digest: its longest compile}
    for c in big:
        if len(c) > 4:
            blind[c[4]][c[3]] = max(blind[c[4]].get(c[3], 0.0), c[2])
    if blind:  # each group's programs but its longest, compiled once each
        shared = sum(sum(v.values()) - max(v.values()) for v in blind.values())
        out += ["", f"programs that differ only in their numbers (shapes, sizes, constants): {len(per_hash)} distinct "
                    f"programs are {len(blind)} up to numbers; one program per group would spare "
                    f"{shared:.0f} s more (an upper bound: a number may be what a test is about)"]
    out += ["", "programs over 0.2 s by name: " + ", ".join(f"{k} {v:.0f} s" for k, v in names.most_common(8))]
    return "\n".join(out)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER))
