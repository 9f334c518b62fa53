"""Counts read from a compiled program's HLO text (``jax.jit(f).lower(...).compile().as_text()``):
its loops with their trip counts, and the operations (≈ kernels) of a loop's body. Deterministic: the
same program gives the same counts on any machine load (``fedalf bench --depth-width``).

A loop is an HLO ``while``: XLA annotates the trip count of a loop it can prove
(``known_trip_count``: a ``lax.scan``/``lax.map``/``fori_loop``); the others (``lax.while_loop`` with a
data-dependent condition: the fair direction's merge loop and QP solvers) run as many trips as their
data asks, which the program's own counters report (the metric ``qp_iters``).
"""

from __future__ import annotations

import re
from typing import NamedTuple

# Instructions that launch no kernel: they name, bundle or reinterpret buffers.
FREE = frozenset({"parameter", "get-tuple-element", "tuple", "constant", "bitcast", "after-all",
                  "opt-barrier", "partition-id", "replica-id"})

_HEAD = re.compile(r"^(ENTRY )?(%[\w.\-]+) .*\{\s*$")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"')


class Instr(NamedTuple):
    opcode: str
    line: str


def _opcode(line: str) -> str:
    """The opcode of one instruction line ``[ROOT] %name = TYPE opcode(operands), attributes``."""
    rest = line.split(" = ", 1)[1]
    if rest.startswith("("):  # a tuple type: skip to its closing parenthesis
        depth = 0
        for i, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                rest = rest[i + 1:]
                break
    else:
        rest = rest.split(" ", 1)[1] if " " in rest else rest
    return rest.strip().split("(", 1)[0]


def computations(text: str) -> tuple[dict[str, list[Instr]], str]:
    """``({computation name: its instructions}, the entry computation's name)``."""
    comps: dict[str, list[Instr]] = {}
    cur = entry = None
    for line in text.splitlines():
        m = _HEAD.match(line)
        if m:
            cur = m.group(2)
            comps[cur] = []
            if m.group(1):
                entry = cur
            continue
        if line.startswith("}"):
            cur = None
            continue
        s = line.strip()
        if cur is not None and " = " in s and not s.startswith("//"):
            comps[cur].append(Instr(_opcode(s), s))
    return comps, entry


def _attr(line: str, key: str) -> list[str]:
    return re.findall(key + r"=(%[\w.\-]+)", line)


def _callees(ins: Instr) -> list[list[str]]:
    """Computations an instruction runs in its own thread of control (not fusions: one kernel each):
    a ``call``'s, and a ``conditional``'s branches (one list per alternative)."""
    if ins.opcode == "call":
        return [[c] for c in _attr(ins.line, "to_apply")]
    if ins.opcode == "conditional":
        m = re.search(r"branch_computations=\{([^}]*)\}", ins.line)
        names = [c.strip() for c in m.group(1).split(",")] if m else (
            _attr(ins.line, "true_computation") + _attr(ins.line, "false_computation"))
        return [[c for c in names]]
    return []


class Loop(NamedTuple):
    name: str          # the op_name of the while (its JAX source path, with named scopes)
    trips: int | None  # XLA's known trip count, None when data-dependent
    body: str
    cond: str


def loop_of(ins: Instr) -> Loop:
    n = _TRIPS.search(ins.line)
    op = re.search(r'op_name="([^"]*)"', ins.line)
    return Loop(op.group(1) if op else "", int(n.group(1)) if n else None, _attr(ins.line, "body")[0],
                _attr(ins.line, "condition")[0])


def static_trips(comps, name: str) -> int:
    """Loop trips of one run of computation ``name`` through its loops of known trip count (nested
    ones multiplied out; a conditional counts its longest branch). Loops of data-dependent trip count
    and everything inside them count 0 here (see :func:`dynamic_loops`)."""
    total = 0
    for ins in comps[name]:
        if ins.opcode == "while":
            lp = loop_of(ins)
            if lp.trips is not None:
                total += lp.trips * (1 + static_trips(comps, lp.body) + static_trips(comps, lp.cond))
        elif ins.opcode == "call":
            total += sum(static_trips(comps, c[0]) for c in _callees(ins))
        elif ins.opcode == "conditional":
            total += max((static_trips(comps, c) for c in _callees(ins)[0]), default=0)
    return total


def dynamic_loops(comps, name: str, mult: int = 1) -> list[tuple[Loop, int]]:
    """The outermost loops of data-dependent trip count reachable from ``name``, each with the number
    of times it runs per run of ``name`` (the product of the known trip counts around it)."""
    out = []
    for ins in comps[name]:
        if ins.opcode == "while":
            lp = loop_of(ins)
            if lp.trips is None:
                out.append((lp, mult))
            else:
                out += dynamic_loops(comps, lp.body, mult * lp.trips)
        else:
            for alt in _callees(ins):
                for c in alt:
                    out += dynamic_loops(comps, c, mult)
    return out


def inner_static_per_trip(comps, loop: Loop) -> int:
    """The most known-trip loop trips one trip of ``loop`` (or of a data-dependent loop nested in it)
    runs: a loop such as the LU factorisation's pivot permutation inside a QP step."""
    best = static_trips(comps, loop.body) + static_trips(comps, loop.cond)
    for inner, mult in dynamic_loops(comps, loop.body) + dynamic_loops(comps, loop.cond):
        best = max(best, mult * inner_static_per_trip(comps, inner))
    return best


def ops(comps, name: str, *, nested_dynamic: bool = False) -> int:
    """Operations (≈ kernel launches: a fusion, a custom call, an unfused op) of one run of computation
    ``name``: its instructions but the free ones (:data:`FREE`), a ``call``'s and a conditional's
    longest branch's instructions, and known-trip loops' per-trip operations (body and condition)
    times their trips. Loops of data-dependent trip count count their ``while`` instruction only,
    unless ``nested_dynamic`` (then one trip each)."""
    total = 0
    for ins in comps[name]:
        if ins.opcode in FREE:
            continue
        if ins.opcode == "while":
            lp = loop_of(ins)
            per_trip = ops(comps, lp.body, nested_dynamic=nested_dynamic) + ops(comps, lp.cond)
            if lp.trips is not None:
                total += lp.trips * per_trip
            elif nested_dynamic:
                total += per_trip
            total += 1
        elif ins.opcode == "call":
            total += sum(ops(comps, c[0], nested_dynamic=nested_dynamic) for c in _callees(ins))
        elif ins.opcode == "conditional":
            total += 1 + max((ops(comps, c, nested_dynamic=nested_dynamic) for c in _callees(ins)[0]), default=0)
        else:
            total += 1
    return total


def find_loops(comps, name: str, scope: str) -> list[Loop]:
    """Every loop reachable from ``name`` made directly under ``jax.named_scope(scope)`` (its op_name ends in
    ``scope/while``, or ``vmap(scope)/while`` when vmapped)."""
    found, seen = [], set()

    def walk(c):
        if c in seen:
            return
        seen.add(c)
        for ins in comps[c]:
            if ins.opcode == "while":
                lp = loop_of(ins)
                if re.search(rf"(^|[/(]){re.escape(scope)}\)?/while$", lp.name):
                    found.append(lp)
                walk(lp.body)
                walk(lp.cond)
            for alt in _callees(ins):
                for cc in alt:
                    walk(cc)

    walk(name)
    return found
