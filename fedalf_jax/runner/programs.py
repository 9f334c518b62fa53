"""The compiled programs of a run or a sweep (:class:`Program`): one round, the evaluation and the train loss of
one round spec, for one run or mapped over a sweep's runs (:func:`map_runs`, ``vmap`` or ``lax.map``; sharded over
devices), compiled on first use and kept for the process (:data:`_PROGRAMS`, keyed by everything that changes the
program: :func:`_program_key`). The run loop (:mod:`.loop`) calls them.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Optional

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..sim.round import device_mesh, run_rounds
from ..sim.train import make_chunk, train_losses
from .build import frozen, reusable
from .progress import Progress


class Program:
    """The compiled chunk programs of one round spec, for one run or a vmapped batch of runs.

    ``data_axes``: for a batch, the ``in_axes`` of the :class:`ClientData` (the pool shared, the index
    rows per run). Programs are compiled on first use: one per chunk length, and one for the train loss.
    """

    def __init__(self, spec, *, batched: bool = False, data_axes=None, progress: Optional[Progress] = None,
                 devices: int = 1, run_map: str = "vmap"):
        self.spec = spec
        self.batched = batched
        self.run_map = run_map  # a batch's runs: "vmap" (batched together) or "map" (one after another)
        self.devices = devices  # a batch's run axis is sharded over this many devices
        self.data_axes = data_axes
        self.progress = progress
        self.compile_s = 0.0
        self._compiled: dict = {}

    def _mesh_specs(self):
        """``(mesh, specs of (state, hp, data), spec of every output)``, or ``None`` on one device.

        A sweep on D devices shards its leading run axis (the pool is replicated); one run on D devices
        keeps everything replicated and shards its sampled clients inside the round.
        """
        if self.batched and self.devices > 1:
            runs = P("runs")
            data = type(self.data_axes)(*(P() if a is None else runs for a in self.data_axes))
            return device_mesh(self.devices, "runs"), (runs, runs, data), runs
        if not self.batched and self.spec.client_devices > 1:
            return device_mesh(self.spec.client_devices, "clients"), (P(), P(), P()), P()
        return None

    def _jit(self, fn, in_axes, donate: bool = False):
        """``fn`` (mapped over the runs of a batch) under ``jit``; ``donate``: the state argument's buffers
        are reused for the new state (no second copy of the duals and history rows in memory)."""
        f = (map_runs(fn, in_axes, self.run_map) if self.batched else fn)
        ms = self._mesh_specs()
        if ms is None:
            return jax.jit(f, donate_argnums=(0,) if donate else ())
        mesh, in_specs, out_spec = ms
        # A sweep: every device runs the vmapped chunk of its own runs (no communication). One run:
        # every device runs the whole replicated chunk, its share of the clients, and the gathered
        # server step (sim.round.client_phase).
        f = jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_spec, check_vma=False)
        return jax.jit(f, donate_argnums=(0,) if donate else (), in_shardings=_named(mesh, in_specs),
                       out_shardings=_named(mesh, out_spec))

    def place(self, *args):
        """``args`` on the devices the programs expect (a no-op on one device, or where they already are)."""
        ms = self._mesh_specs()
        if ms is None:
            return args
        mesh, in_specs, _ = ms
        if jax.process_count() > 1:  # every process holds the same host values: one global array of them
            put = lambda x, sh: x if getattr(x, "sharding", None) == sh else jax.make_array_from_process_local_data(  # noqa: E731
                sh, np.asarray(to_host(x)))
            return tuple(jax.tree_util.tree_map(lambda x, sh=sh: put(x, sh), a) if isinstance(sh, NamedSharding)
                         else jax.tree_util.tree_map(put, a, sh) for a, sh in zip(args, _named(mesh, in_specs)))
        return tuple(jax.device_put(a, sh) for a, sh in zip(args, _named(mesh, in_specs)))

    def _compile(self, key, make, args):
        if key not in self._compiled:
            shared = _program_key(self, key, args)
            found = _PROGRAMS.get(shared) if shared is not None else None
            if found is not None:
                self._compiled[key] = found
                return found
            if self.progress is not None:
                self.progress.compiling(True)
            t0 = time.perf_counter()
            try:
                self._compiled[key] = make().lower(*args).compile()
            finally:
                if self.progress is not None:
                    self.progress.compiling(False)
            self.compile_s += time.perf_counter() - t0
            if shared is not None:
                _PROGRAMS.put(shared, self._compiled[key])
        return self._compiled[key]

    def compiled(self, length: int, state, hp, data):
        """The chunk of ``length`` rounds (0: evaluation only) with its test evaluation.

        It calls nothing back (no progress tick per round), so the persistent compilation cache keeps
        it (:mod:`.cache`). The run loop calls ``length`` 0 (the evaluation) and :meth:`compiled_round`.
        """
        make = lambda: self._jit(make_chunk(self.spec, length), (0, 0, self.data_axes), donate=True)  # noqa: E731
        return self._compile(("chunk", length), make, (state, hp, data))

    def compiled_round(self, state, hp, data):
        """One round (a ``lax.scan`` of 1: its metrics have a leading round axis of 1), no evaluation. The
        loop dispatches rounds one at a time, so that a signal is answered after the round in flight."""
        def round(state, hp, data):  # its name names the program in the compilation cache: jit_round
            return run_rounds(self.spec, state, hp, data, 1)
        make = lambda: self._jit(round, (0, 0, self.data_axes), donate=True)  # noqa: E731
        return self._compile(("round",), make, (state, hp, data))

    def loop_programs(self, state, hp, data, evaluates: bool = True) -> list:
        """Every program the run loop calls, compiled (the arguments may be shapes alone): one round, the
        evaluation, the train loss; the round alone when the run ``evaluates`` nothing (``eval_every="never"``)."""
        if not evaluates:
            return [self.compiled_round(state, hp, data)]
        return [self.compiled_round(state, hp, data), self.compiled(0, state, hp, data),
                self.compiled_train_loss(state, hp, data)]

    def compiled_train_loss(self, state, hp, data):
        """The train-loss program (compiled on first use; the arguments may be shapes alone)."""
        make = lambda: self._jit(lambda s, h, d: train_losses(self.spec, s, h, d), (0, 0, self.data_axes))  # noqa: E731
        return self._compile(("train_loss",), make, (state, hp, data))

    def train_loss(self, state, hp, data):
        """``[N]`` (or ``[W, N]``) train losses of the current global model(s)."""
        state, hp, data = self.place(state, hp, data)
        return self.compiled_train_loss(state, hp, data)(state, hp, data)

    def __call__(self, state, hp, data, length: int):
        state, hp, data = self.place(state, hp, data)
        return self.compiled(length, state, hp, data)(state, hp, data)


class _ProgramCache:
    """The programs this process compiled, most recently used last (at most ``size``): a second run of the
    same round spec and shapes (another learning rate or seed, a resume, a sweep's single run) reuses the
    compiled program instead of tracing and compiling it again. JAX's persistent cache (:mod:`.cache`)
    spares the compile between processes; this spares the tracing and lowering, and the compile in a
    process without it. A key is only ever equal for the same program: the spec compares its algorithm's
    functions by identity (the built-in algorithms are built once per choice, :func:`.build.algorithm`), and
    only built-in algorithms and models are reused (:func:`.build.reusable`: a user's may read globals)."""

    def __init__(self, size: int = 32):
        self.size = size
        self._d: dict = {}
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            found = self._d.pop(key, None)
            if found is not None:
                self._d[key] = found
            return found

    def put(self, key, program) -> None:
        with self._lock:
            self._d.pop(key, None)
            self._d[key] = program
            while len(self._d) > self.size:
                self._d.pop(next(iter(self._d)))

    def clear(self) -> None:
        with self._lock:
            self._d.clear()


_PROGRAMS = _ProgramCache()


def _leaf_key(x):
    """What a compiled program's argument must match: shape, dtype, weak type and placement."""
    return (tuple(np.shape(x)), str(getattr(x, "dtype", type(x).__name__)), bool(getattr(x, "weak_type", False)),
            getattr(x, "sharding", None))


# The JAX options that change what a trace computes. The programs are traced on a worker thread (so that a
# signal is answered during a compile), which by itself sees only the global options (``jax.config.update``),
# not a caller's context manager: ``_interruptible`` sets the caller's values there again, and the key of
# ``_PROGRAMS`` reads them there.
_TRACE_OPTIONS = ("jax_default_matmul_precision", "jax_enable_x64", "jax_numpy_rank_promotion",
                  "jax_numpy_dtype_promotion", "jax_default_prng_impl", "jax_threefry_partitionable",
                  "jax_softmax_custom_jvp", "jax_enable_checks", "jax_debug_nans", "jax_debug_infs",
                  "jax_disable_jit")


def _trace_options() -> tuple:
    return tuple(str(getattr(jax.config, name, None)) for name in _TRACE_OPTIONS)


def _program_key(program: "Program", key, args):
    """The key of one of ``program``'s programs in :data:`_PROGRAMS`, or ``None`` when it is not to be reused
    (:func:`.build.reusable`) or cannot be made (an unhashable leaf): then the program is compiled as before."""
    if not reusable(program.spec):
        return None
    try:
        leaves, tree = jax.tree_util.tree_flatten(args)
        # layer_of: compared by identity, so its fields instead; rounds: only ServerIn.rounds reads it, and only a
        # user's server may (a user's algorithm is never reused: reusable)
        spec = dataclasses.replace(program.spec, layer_of=None, rounds=None)
        fields = tuple(getattr(spec, f.name) for f in dataclasses.fields(spec))
        k = (fields, frozen(program.spec.layer_of),
             program.batched, program.data_axes, program.run_map, program.devices, key,
             tree, tuple(_leaf_key(x) for x in leaves), _trace_options(), jax.default_backend())
        hash(k)
        return k
    except Exception:  # noqa: BLE001 - a key that cannot be made only costs the compile
        return None


def default_run_map(backend: Optional[str] = None) -> str:
    """``map`` on CPU, ``vmap`` elsewhere. Measured on the 2-core CPU after the allocator (FMNIST FedALF, ``fedalf
    bench --sweep-width 2 4 8``, a sweep's time against its runs one after another; docs/lab/benchmarks.md): no mode
    is faster at every width (MLP: ``map`` 1.07, 0.97, 0.91×, ``vmap`` 0.97, 0.99, 0.99×; CNN: ``map`` 0.94,
    0.98, 0.90×, ``vmap`` 0.96, 1.01, 0.98×), and ``vmap``'s best gain (8% at W = 8) does not pay for what
    ``map`` gives: every run bit for bit what its single run gives (``vmap`` equals it up to float32 summation
    order). ``vmap`` batches the runs' server steps (their QPs side by side: the server's sequential depth does
    not grow with the width); on a GPU its batched clients and servers are what fills the device."""
    return "map" if (backend or jax.default_backend()) == "cpu" else "vmap"


def map_runs(fn, in_axes, how: str):
    """``fn(state, hp, data)`` over the leading run axis of ``state``, ``hp`` and the fields of ``data``
    (a :class:`ClientData`) whose entry in ``in_axes[2]`` is 0 (``None``: shared by all runs):
    ``jax.vmap``, or ``lax.map`` (each run computed exactly as unbatched, one after another)."""
    if how == "vmap":
        return jax.vmap(fn, in_axes=in_axes)
    data_axes = in_axes[2]
    batched = [f for f, a in zip(data_axes._fields, data_axes) if a == 0]

    def mapped(state, hp, data):
        def one(args):
            s, h, rows = args
            return fn(s, h, data._replace(**dict(zip(batched, rows))))
        return jax.lax.map(one, (state, hp, tuple(getattr(data, f) for f in batched)))

    return mapped


def to_host(tree):
    """Host (NumPy) values of ``tree``; a value replicated over several processes is read from this
    process's own copy (``jax.device_get`` needs every shard addressable)."""
    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(x.addressable_shards[0].data)
        return np.asarray(jax.device_get(x))
    return jax.tree_util.tree_map(one, tree)


def _named(mesh, specs):
    """A pytree of ``PartitionSpec`` as ``NamedSharding`` on ``mesh`` (specs are leaves)."""
    return jax.tree_util.tree_map(lambda sp: NamedSharding(mesh, sp), specs, is_leaf=lambda x: isinstance(x, P))
