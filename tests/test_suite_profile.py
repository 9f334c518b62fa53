"""tests/suite_profile.py's report, on records written here by hand: its totals are the sums worked out
below, not another pass over the same records."""

import json

import suite_profile
from suite_profile import digests, report


def test_report_sums_the_workers_records_and_counts_a_program_seen_before(tmp_path):
    (tmp_path / "gw0.json").write_text(json.dumps({
        "tests": {"tests/test_a.py::one": {"wall": 10.0, "cpu": 8.0, "children": 0.0},
                  "tests/test_a.py::two": {"wall": 4.0, "cpu": 1.0, "children": 3.0}},
        "compiles": [["tests/test_a.py::one", "jit_round", 5.0, "h1"],
                     ["tests/test_a.py::one", "jit_chunk", 0.1, None],
                     ["tests/test_a.py::two", "jit_round", 1.0, "h1"]]}))  # h1 again: 1 s seen before
    (tmp_path / "gw1.json").write_text(json.dumps({
        "tests": {"tests/test_b.py::three": {"wall": 6.0, "cpu": 6.0, "children": 0.0}},
        "compiles": [["tests/test_b.py::three", "jit_mapped", 2.0, "h2"]]}))
    out = report(tmp_path, top=5)
    lines = out.splitlines()
    assert lines[0] == ("3 tests, 20 worker-seconds (wall, summed over the workers); their processes' CPU 15 s, "
                        "their subprocesses' 3 s")
    assert lines[1].startswith("programs compiled or loaded: 4, 8 s; over 0.2 s: 3 calls of 2 distinct programs, 8 s, "
                               "of which 1 s went to a program seen before"), lines[1]
    assert "the rest (1 calls) 0 s" in lines[1]
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines if ln.startswith("test_")}
    assert rows["test_a.py"] == ["2", "14", "9", "3", "6"] and rows["test_b.py"] == ["1", "6", "6", "0", "2"]
    assert lines.index("programs over 0.2 s by name: jit_round 6 s, jit_mapped 2 s") > 0
    longest = [ln for ln in lines if ln.endswith(("::one", "::two", "::three"))]
    assert [ln.split()[-1] for ln in longest] == ["tests/test_a.py::one", "tests/test_b.py::three",
                                                  "tests/test_a.py::two"]
    assert longest[0].split()[:3] == ["10.0", "5.1", "0.0"]


def test_report_without_records_says_how_to_make_them(tmp_path):
    assert "run PYTHONPATH=tests .venv/bin/pytest -p suite_profile first" in report(tmp_path)


def test_report_groups_the_programs_that_differ_only_in_their_numbers(tmp_path):
    (tmp_path / "gw0.json").write_text(json.dumps({
        "tests": {"tests/test_a.py::one": {"wall": 17.0, "cpu": 16.0, "children": 0.0}},
        "compiles": [["tests/test_a.py::one", "jit_round", 5.0, "h1", "b1"],
                     ["tests/test_a.py::one", "jit_round", 1.0, "h1", "b1"],    # h1 again: its longest, 5 s, counts
                     ["tests/test_a.py::one", "jit_round", 8.0, "h3", "b1"],    # h1 up to numbers, and longer:
                                                                                # h1's 5 s to spare
                     ["tests/test_a.py::one", "jit_mapped", 2.0, "h4", "b2"]]}))  # alone in its group
    line = [ln for ln in report(tmp_path).splitlines() if ln.startswith("programs that differ only")]
    assert line == ["programs that differ only in their numbers (shapes, sizes, constants): 3 distinct programs are "
                    "2 up to numbers; one program per group would spare 5 s more (an upper bound: a number may be "
                    "what a test is about)"]


def test_the_number_blind_hash_is_one_for_two_shapes_and_two_for_two_operations():
    import jax
    import jax.numpy as jnp

    def text(f, n):
        return str(jax.jit(f).lower(jnp.ones(n)).compiler_ir())

    sin3, sin4, cos3 = digests(text(jnp.sin, 3)), digests(text(jnp.sin, 4)), digests(text(jnp.cos, 3))
    assert sin3[0] != sin4[0] and sin3[1] == sin4[1]
    assert sin3[1] != cos3[1]


def test_report_sums_the_seconds_spent_tracing_and_lowering_over_the_workers(tmp_path):
    one = {"tests": {"tests/test_a.py::one": {"wall": 1.0, "cpu": 1.0, "children": 0.0}}, "compiles": []}
    (tmp_path / "gw0.json").write_text(json.dumps({**one, "staged": {
        "tests/test_a.py::one": {"trace": 2.0, "lower": 1.0}, "None": {"trace": 0.25, "lower": 0.25}}}))
    (tmp_path / "gw1.json").write_text(json.dumps({**one, "staged": {
        "tests/test_b.py::two": {"trace": 4.0, "lower": 3.0}}}))
    (tmp_path / "old.json").write_text(json.dumps(one))  # an older plugin's records: none
    lines = report(tmp_path).splitlines()
    assert lines[2] == "tracing to jaxprs 6 s, lowering to StableHLO 4 s (a program the cache serves pays both)"


def test_the_listener_adds_a_jits_tracing_and_lowering_to_the_running_test(monkeypatch):
    import jax
    import jax.numpy as jnp
    monkeypatch.setitem(suite_profile._current, "test", "tests/test_x.py::staged")
    listen = lambda *a, **k: suite_profile.stage_listener(*a, **k)  # noqa: E731 (its own: under -p suite_profile
    jax.monitoring.register_event_duration_secs_listener(listen)    # the plugin's stays registered)
    try:
        jax.jit(lambda x: jnp.tanh(x) * 7.0).lower(jnp.ones(11))
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    staged = suite_profile._staged.pop("tests/test_x.py::staged")
    assert staged["trace"] > 0 and staged["lower"] > 0, staged
