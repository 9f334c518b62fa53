"""The Python API: what ``import fedalf_jax as fj`` gives a notebook or a script (the CLI calls the same
functions).

``fj.run(fj.Config(...))`` runs one configuration and returns a :class:`Result` (metrics as a pandas
DataFrame, the final model, the run directory); ``fj.sweep(...)`` runs a grid of them as vmapped programs;
``fj.load(run_dir)`` reads a finished (or interrupted) run back; ``fj.report(...)`` tabulates run folders.
Your own algorithm, model and data plug into the same compiled round (:mod:`.experiment.registry`,
docs/extending.md).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from .config.config import Config, ConfigError


def _frame(rows: list[dict]):
    """One row per evaluation: the scalar metrics, then ``acc_0 .. acc_{N-1}`` (each client's accuracy)."""
    import pandas as pd
    if not rows:
        return pd.DataFrame()
    scalars = [{k: v for k, v in r.items() if k != "acc"} for r in rows]
    df = pd.DataFrame(scalars)
    acc = np.asarray([np.asarray(r["acc"], np.float64) for r in rows])
    per_client = pd.DataFrame(acc, columns=[f"acc_{i}" for i in range(acc.shape[1])], index=df.index)
    return pd.concat([df, per_client], axis=1)


@dataclasses.dataclass(eq=False)
class Result:
    """One run: ``config``, ``metrics`` (a DataFrame, one row per evaluation: ``round``, ``mean_acc``,
    ``angle_deg``, ... and ``acc_i`` per client; an empty DataFrame, and ``final`` ``{}``, for
    ``eval_every="never"``, which evaluates nothing: ``summary["evaluated"]`` is false, ``summary["final"]``
    ``None``), ``status`` (``done``, ``diverged``, ``interrupted``,
    ``running``), ``run_dir`` (``None`` for a run without ``out``), ``summary`` (``summary.json``) and
    ``model``: the final global model's variables ``{'params': ...}`` (read from the checkpoint on first
    use when the result was loaded); ``average_model``, the averaged iterate of an ``eval_average`` run, the same
    way; ``client_states`` and ``server_state`` from the checkpoint. A checkpoint
    older than the run's last round (a run killed between two checkpoints, a diverged run) is refused in one
    line, never handed back as the final model."""

    config: Config
    metrics: Any
    status: str
    run_dir: Optional[Path] = None
    summary: Optional[dict] = None
    _variables: Any = None
    _average: Any = None

    @property
    def model(self) -> dict:
        if self._variables is None:
            if self.run_dir is None:
                raise ConfigError("this run kept no model (it had nothing left to run and no run directory)")
            self._variables = dict(self._checkpoint.variables)
        return self._variables

    @property
    def average_model(self) -> dict:
        """The averaged iterate θ̄ that the ``avg_*`` columns score (``eval_average=True``, ``--eval-average``): the
        mean of the global variables after rounds 1..T, ``{'params': ...}`` like :attr:`model`, from the run
        itself or from its last checkpoint, which must be of the run's last round (the rule of :attr:`model`)."""
        if not self.config.eval_average:
            raise ConfigError("this run kept no averaged iterate: run it with eval_average=True (--eval-average)")
        if self._average is None:
            if self.run_dir is None:
                raise ConfigError("this run kept no averaged iterate (it had nothing left to run and no run "
                                  "directory)")
            self._average = dict(self._checkpoint.average)
        return self._average

    @property
    def sampled_clients(self) -> np.ndarray:
        """``[rounds, m]`` int32: row ``t`` is the clients round ``t`` (0, 1, ...) sampled, for every round the run
        trained (``summary.json``'s last round; the config's ``rounds`` for a run without one). Replayed on the
        host from the run's seed with the round's own keys and sampler (the sampling reads nothing else), the
        same ids the server received as ``ServerIn.sel``."""
        from .sim.round import sampled_clients
        rounds = (self.summary or {}).get("round")
        if not isinstance(rounds, int):
            rounds = int(self.metrics["round"].max()) if len(self.metrics) and "round" in self.metrics else \
                self.config.rounds
        cfg = self.config
        from .sim.round import straggler_replay
        late = straggler_replay(cfg)
        if cfg.availability != "always" or cfg.dropout > 0 or late is not None:  # -1 where no upload arrived
            from .sim.round import federated_sampled
            from .sim.round import client_facts
            clients = self._clients_json()
            tn, cl = client_facts(clients) if clients else (None, None)
            try:
                return federated_sampled(cfg.clients, cfg.clients_per_round, cfg.seed, rounds, cfg.availability,
                                         cfg.dropout, tn, cl, late)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        return sampled_clients(self.config.clients, self.config.clients_per_round, self.config.seed, rounds)

    def _clients_json(self):
        """The run folder's ``clients.json`` entries (each client's size and classes), or ``None``."""
        if self.run_dir is None:
            return None
        from .runner.rundir import RunDir
        try:
            return (RunDir(self.run_dir).clients() or {}).get("clients")
        except ConfigError:
            return None

    @property
    def participation(self) -> np.ndarray:
        """``[N]``: how many of the run's rounds each client took part in (:attr:`sampled_clients` counted; under
        availability or dropout, the rounds whose upload arrived)."""
        sel = self.sampled_clients.ravel()
        return np.bincount(sel[sel >= 0], minlength=self.config.clients).astype(np.int64)

    @property
    def client_states(self):
        """Every client's state (``Algorithm.init_client_state``'s pytree with a leading axis of N clients;
        the ADMM duals), from the run directory's last checkpoint."""
        return self._checkpoint.client_states

    @property
    def server_state(self):
        """The server's state (``Algorithm.init_server_state``'s pytree), from the last checkpoint."""
        return self._checkpoint.sstate

    @functools.cached_property
    def _checkpoint(self):
        """The run state of the last usable checkpoint, read once per result (model and states share it)."""
        if self.run_dir is None:
            raise ConfigError("this run has no run directory, so no checkpoint to read the states from; run it "
                              "with out=...")
        from .runner.build import load_pool, make_spec
        from .runner.rundir import RunDir
        from .sim.round import init_state
        like = init_state(make_spec(self.config, load_pool(self.config)), self.config.seed)
        state = RunDir(self.run_dir).load_checkpoint(like)
        _check_checkpoint_round(self, int(state.round))
        return state

    @property
    def final(self) -> dict:
        """The last evaluation's scalar metrics."""
        if len(self.metrics) == 0:
            return {}
        row = self.metrics.iloc[-1]
        return {k: row[k] for k in self.metrics.columns if not str(k).startswith("acc_")}

    def __repr__(self) -> str:
        where = f", run_dir={str(self.run_dir)!r}" if self.run_dir is not None else ""
        f = self.final
        got = (f", final mean_acc={f['mean_acc']:.4f}, angle={f['angle_deg']:.2f}°" if f else "")
        return f"Result({self.config.algorithm}, {self.status}, {len(self.metrics)} evaluations{got}{where})"


def _check_checkpoint_round(res: Result, checkpointed: int) -> None:
    """Refuse (one line) the checkpoint of round ``checkpointed`` as ``res``'s model and states when the run went
    on past it: its last round (``summary.json``'s, or metrics.csv's last row) is later, so the checkpoint holds
    another round's model, not the run's final one (a run continued with
    ``checkpoint_every="never"`` before that was refused, or killed between two checkpoints)."""
    rounds = [int(res.metrics["round"].max())] if len(res.metrics) and "round" in res.metrics else []
    if isinstance((res.summary or {}).get("round"), int):
        rounds.append(res.summary["round"])
    last = max(rounds, default=None)
    if last is None or checkpointed >= last:
        return
    fix = {"done": "run it again keeping checkpoints (overwrite=True, checkpoint_every not never) for its final model",
           "diverged": "a diverged run's final model is not finite and is not kept"}.get(
        res.status, f"continue it with resume=True (fedalf run --resume) to reach round {last} again and keep it")
    raise ConfigError(f"{res.run_dir}: its newest checkpoint is of round {checkpointed}, older than the run's last "
                      f"round {last} ({res.status}), so it does not hold the run's final model or states: {fix}")




def _config(cfg: Optional[Config], options: dict) -> Config:
    if cfg is None:
        return Config(**options).validated()
    if not isinstance(cfg, Config):
        raise ConfigError(f"expected a fedalf_jax.Config, got {type(cfg).__name__}; build one with "
                          f"fj.Config(algorithm=..., ...)")
    return cfg.replace(**options) if options else cfg.validated()


def run(cfg: Optional[Config] = None, /, *, progress: bool = True, resume: bool = False, overwrite: bool = False,
        **options) -> Result:
    """Run one configuration: ``fj.run(fj.Config(algorithm="fedavg", model="mlp"))`` or
    ``fj.run(algorithm="fedavg", model="mlp", rounds=20)`` (options override ``cfg``'s). With ``out`` set
    the run writes its directory (config.json, metrics.csv, checkpoints) and ``resume``/``overwrite`` act as
    the CLI's ``--resume``/``--overwrite``. Without ``out`` nothing is kept on disk: the result (metrics,
    final model) lives only in the returned :class:`Result` (``fedalf run`` without ``--out``, by contrast,
    writes ``runs/<algorithm>-<model>-<time>``). Raises ``FloatingPointError`` when the model diverges."""
    from .runner.cache import configure_for_api
    from .runner.loop import run as run_loop
    from .runner.rundir import RunDir
    cfg = _config(cfg, options)
    configure_for_api()  # the CLI's persistent compilation cache, unless this process chose its own
    if not (resume and cfg.out and RunDir(cfg.out).has_config()):  # a given option never read
        from .sweeps.sweep_plan import non_default, say_unread
        say_unread([cfg], set(options) | non_default(cfg.to_dict()), stacklevel=2)
    slot = run_loop(cfg, progress=progress, resume=resume, overwrite=overwrite, full=True)
    rd = RunDir(cfg.out) if cfg.out else None
    return Result(cfg, _frame(slot.rows), slot.status if slot.status != "running" else "done",
                  rd.path if rd else None, rd.summary() if rd else None, slot.variables, slot.average)


def load(run_dir: str | Path) -> Result:
    """A run directory read back: its config, metrics, status and summary; its final model on first use
    of ``.model`` (from the last usable checkpoint, which must be of the run's last round)."""
    from .runner.loop import rows_of
    from .runner.rundir import RunDir
    rd = RunDir(run_dir)
    if not rd.has_config():
        raise ConfigError(f"{rd.path} holds no run (no config.json); give a folder written by fj.run or fedalf run")
    return Result(rd.config(), _frame(rows_of(rd)), rd.status(), rd.path, rd.summary())


@dataclasses.dataclass(eq=False)
class SweepResult:
    """A sweep's runs (``runs``, each a :class:`Result`), its folder, and ``table``: one row per run with
    its name, algorithm and seed, a column for every other option whose value varies across the runs
    (e.g. ``server_lr``; ``hp.beta1`` for an algorithm's own hyper-parameter), its status and its final
    metrics."""

    out: Path
    runs: list
    names: list

    @property
    def varied(self) -> list:
        """The options (besides ``algorithm`` and ``seed``) whose values differ between the runs, in
        :class:`Config`'s order; an algorithm's own hyper-parameter as ``hp.NAME``."""
        from .config.identity import flat_options
        dicts = [flat_options(r.config.to_dict()) for r in self.runs]
        keys = [k for k in dict.fromkeys(k for d in dicts for k in d) if k not in ("algorithm", "seed", "out")]
        return [k for k in keys if len({repr(d.get(k)) for d in dicts}) > 1]

    @property
    def table(self):
        import pandas as pd
        from .config.identity import flat_options
        varied = self.varied
        final = ("mean_acc", "angle_deg", "worst10_acc")
        if any("personal_acc" in r.final for r in self.runs):  # each client's own model, beside the global one
            final += ("personal_acc", "personal_angle_deg")
        rows = []
        for name, r in zip(self.names, self.runs):
            opts = flat_options(r.config.to_dict())
            rows.append({"run": name, "algorithm": r.config.algorithm, "seed": r.config.seed,
                         **{k: opts.get(k) for k in varied}, "status": r.status,
                         **{k: r.final.get(k) for k in final}})
        return pd.DataFrame(rows)

    def __getitem__(self, i):
        return self.runs[i]

    def __len__(self) -> int:
        return len(self.runs)

    def __repr__(self) -> str:
        return f"SweepResult({len(self.runs)} runs in {str(self.out)!r})"


def sweep(cfg: Optional[Config] = None, /, *, out: str | Path, grid: Optional[dict] = None,
          seeds: Iterable[int] = (0,), progress: bool = True, chunk: Optional[int] = None, resume: bool = False,
          overwrite: bool = False, **options) -> SweepResult:
    """Run ``cfg`` (or ``Config(**options)``) for every combination of ``grid`` (option name → list of
    values) and every seed, as vmapped programs, into run directories under ``out`` (one per run). E.g.
    ``fj.sweep(cfg, out="runs/s", grid={"algorithm": ["fedavg", "fedalf"]}, seeds=[0, 1, 2])``. The key
    ``"hp.NAME"`` varies the algorithm's own hyper-parameter ``NAME`` (``grid={"hp.beta1": [0.9, 0.99]}``):
    traced like ``lr``, its values run in one program; ``"arg.NAME"`` varies a user's algorithm factory's argument
    ``NAME`` (``Config.alg_args``, ``grid={"arg.K": [1, 2]}``): static, one program per value.

    A folder that already holds a sweep is refused unless ``resume=True`` (the same call again: its
    unfinished runs are finished, its finished ones read back; the options must describe the same runs),
    or ``overwrite=True`` (the sweep's run files and ``sweep.json`` are removed first), as ``fj.run``'s."""
    from .sweeps import sweep as S
    from .runner.cache import configure_for_api
    from .sweeps.sweep_plan import distinct, expand
    if resume and overwrite:
        raise ConfigError("resume=True continues the sweep in out and overwrite=True replaces it; choose one")
    cfg = _config(cfg, options)
    configure_for_api()  # the CLI's persistent compilation cache, unless this process chose its own
    base = {k: v for k, v in cfg.to_dict().items() if k not in ("seed", "out")}
    base["hp"] = dict(cfg.hp)  # the values given, not the defaults: a grid over algorithms fills in each one's own
    grid = {k: list(v) if isinstance(v, (list, tuple)) else [v] for k, v in (grid or {}).items()}
    # Config's fields, not base's keys: to_dict leaves out an option at its "off" value (local_steps, eval_average)
    fields = {f.name for f in dataclasses.fields(Config)} - {"seed", "out"}
    unknown = sorted(k for k in set(grid) - fields if not (isinstance(k, str) and k.startswith(("hp.", "arg."))))
    if unknown:
        raise ConfigError(f"grid option(s) {unknown} are not config options (seeds go in seeds=, the folder in out=)")
    configs = expand(base, grid, list(seeds))
    root = Path(out)
    if not (resume and (root / "sweep.json").is_file()):  # a given option no run reads
        from .sweeps.sweep_plan import non_default, say_unread
        say_unread(configs, set(options) | set(grid) | non_default(cfg.to_dict()), stacklevel=2)
    if (root / "sweep.json").is_file() and not resume:
        if not overwrite:
            raise ConfigError(f"{root} already holds a sweep; continue it with fj.sweep(..., resume=True), replace "
                              f"it with overwrite=True, or choose another out")
        S.remove_sweep(root)
    if resume and (root / "sweep.json").is_file():
        there = sorted(json.dumps({**e["config"], "out": None}, sort_keys=True) for e in S.read_sweep(root)["runs"])
        # sweep.json lists the distinct runs (sweep_plan.distinct); one written before lists every combination
        if all(sorted(json.dumps(c.to_dict(), sort_keys=True) for c in cs) != there
               for cs in (distinct(configs)[0], configs)):
            raise ConfigError(f"resume=True: the options describe other runs than the sweep in {root}; give the "
                              f"sweep's own options, overwrite=True to replace it, or another out")
        S.resume(root, chunk=chunk, progress=progress)
    else:
        S.sweep(configs, out, chunk=chunk, progress=progress)
    from .sweeps.sweepdir import read_sweep
    entries = read_sweep(root)["runs"]
    return SweepResult(root, [load(root / e["dir"]) for e in entries], [e["name"] for e in entries])


def client_splits(cfg: Optional[Config] = None, /, **options) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each client's ``(train_idx, test_idx)``: int64 indices into the data set's pooled examples
    ``concat(train, test)`` (the pool the run trains and evaluates on: ``x_pool[train_idx]`` are client
    ``i``'s training examples), for ``cfg`` (or ``Config(**options)``; options override ``cfg``'s), exactly as
    its run partitions them (``--partition``, ``--seed``, ...; ``given``: a registered data set's own lists,
    the test lists offset by its number of train examples). Loads the data, builds no model."""
    from .runner.build import client_rows, load_pool
    cfg = _config(cfg, options)
    part = client_rows(cfg, load_pool(cfg)).partition
    return [(np.asarray(tr, np.int64), np.asarray(te, np.int64)) for tr, te in zip(part.train_idx, part.test_idx)]


def report(paths: str | Path | Sequence[str | Path], out: str | Path, *, last: int = 5) -> dict:
    """``fedalf report``: tables (mean ± std over seeds) and figures of the runs under ``paths``, written to
    ``out`` (report.md, table.csv, figures/); returns what was written (paths, notes) and ``table``, the
    table's rows as a DataFrame."""
    from .reporting import report as _report
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    import pandas as pd
    got = _report([str(p) for p in paths], str(out), last=last)
    return {**got, "table": pd.DataFrame(got["rows"])}
