"""The run loop: build an experiment from a :class:`Config`, scan rounds in compiled chunks, evaluate.

Python touches the device once per chunk of ``eval_every`` rounds: the chunk is one compiled
``lax.scan`` over :func:`fedalf_jax.round.round_step`; then every client is evaluated (vmapped).
Round ``t`` draws its randomness from ``fold_in(run_key, t)``, so a run is reproducible from its
``config.json`` and resumable from any checkpoint with identical metrics.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import metrics as M
from .algorithms import HParams, make_algorithm
from .client import evaluate_clients
from .config import Config, ConfigError
from .round import METRIC_KEYS, ClientData, RoundSpec, RunState, default_client_map, init_state, run_rounds


@dataclasses.dataclass
class Experiment:
    cfg: Config
    spec: RoundSpec
    hp: HParams
    data: ClientData
    partition: Any
    labels: np.ndarray
    source: str


def layer_ids(params, layers: str):
    from .fairness import module_layers, tensor_layers
    return module_layers(params) if layers == "module" else tensor_layers(params)


def build(cfg: Config) -> Experiment:
    """Load data, partition it, build the model and the round for ``cfg`` (host side, once)."""
    from .data import load_dataset
    from .models import make_model
    from .partitions import make_partition, pad_indices

    cfg.check_privacy()  # warns (once) where a guarantee is only nominal
    private = cfg.ldp != "none" or cfg.dp != "none"
    if private and cfg.algorithm in ("fedadmm", "fedalf") and cfg.dual_from == "local":
        warnings.warn("dual_from=local (the paper's protocol): the ADMM dual is updated from the un-noised "
                      "model and the upload reveals it, so the privacy guarantee does not cover this run; "
                      "--dual-from perturbed keeps it (docs/privacy.md)", UserWarning, stacklevel=2)
    ds = load_dataset(cfg.dataset, data_dir=cfg.data_dir, source=cfg.data_source,
                      synthetic_like=cfg.synthetic_like, synthetic_train=cfg.synthetic_train,
                      synthetic_test=cfg.synthetic_test, seed=cfg.seed)
    like = cfg.synthetic_like if cfg.dataset == "synthetic" else cfg.dataset
    part = make_partition(ds.y_train, ds.y_test, cfg.clients, cfg.partition, assign=cfg.assign,
                          alpha=cfg.alpha, seed=cfg.seed, dataset=like)
    x = np.concatenate([ds.x_train, ds.x_test])
    y = np.concatenate([ds.y_train, ds.y_test]).astype(np.int32)
    tr_idx, tr_n = pad_indices(part.train_idx)
    te_idx, te_n = pad_indices(part.test_idx)
    if tr_n.min() < 1 or te_n.min() < 1:
        raise ConfigError(f"some client has no local train or test data (min train {tr_n.min()}, "
                          f"min test {te_n.min()}); use fewer --clients or another --partition")
    data = ClientData(*(jnp.asarray(a) for a in (x, y, tr_idx, tr_n, te_idx, te_n)))
    model = make_model(cfg.model, num_classes=ds.num_classes, input_shape=x.shape[1:],
                       conv_impl=cfg.conv_impl)
    params_shape = jax.eval_shape(model.init, jax.random.PRNGKey(0))["params"]
    layer_of = layer_ids(params_shape, cfg.layers)
    spec = RoundSpec(model=model, algorithm=make_algorithm(cfg, layer_of), num_clients=cfg.clients,
                     clients_per_round=cfg.clients_per_round, epochs=cfg.local_epochs,
                     batch_size=cfg.batch_size, layer_of=layer_of, ldp=cfg.ldp, dp=cfg.dp,
                     client_map=default_client_map() if cfg.client_map == "auto" else cfg.client_map)
    return Experiment(cfg, spec, HParams.from_config(cfg), data, part, y, ds.source)


class Runner:
    """Compiled chunk and evaluation functions for one experiment (compiled once per chunk length)."""

    def __init__(self, exp: Experiment):
        self.exp = exp
        spec = exp.spec
        self._chunk = jax.jit(lambda s, hp, d, length: run_rounds(spec, s, hp, d, length),
                              static_argnums=3)
        self._eval = jax.jit(lambda v, d: (evaluate_clients(spec.model, v, d.x, d.y, d.test_idx, d.test_n),
                                           evaluate_clients(spec.model, v, d.x, d.y, d.train_idx, d.train_n)))
        self._compiled = {}
        self.compile_s = 0.0

    def chunk(self, state: RunState, length: int):
        if length not in self._compiled:
            t0 = time.perf_counter()
            self._compiled[length] = self._chunk.lower(state, self.exp.hp, self.exp.data, length).compile()
            self.compile_s += time.perf_counter() - t0
        return self._compiled[length](state, self.exp.hp, self.exp.data)

    def evaluate(self, variables) -> dict:
        (acc, test_loss), (_, train_loss) = jax.device_get(self._eval(variables, self.exp.data))
        row = M.summarize(acc)
        row["test_loss"] = float(np.mean(test_loss))
        row["train_loss"] = float(np.mean(train_loss))
        row["acc"] = np.asarray(acc)
        return row


# ---- checkpoints ------------------------------------------------------------------------------

def save_checkpoint(path: Path, state: RunState) -> None:
    leaves = jax.tree_util.tree_leaves(jax.device_get(state))
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, *[np.asarray(x) for x in leaves])
    tmp.replace(path)


def load_checkpoint(path: Path, like: RunState) -> RunState:
    treedef = jax.tree_util.tree_structure(like)
    with np.load(path) as f:
        leaves = [jnp.asarray(f[f"arr_{i}"]) for i in range(len(f.files))]
    if len(leaves) != treedef.num_leaves:
        raise ConfigError(f"checkpoint {path} does not match this config's model/algorithm; "
                          f"resume with the run directory's own config.json")
    return jax.tree_util.tree_unflatten(treedef, leaves)


# ---- the loop -----------------------------------------------------------------------------------

def _csv_header(n: int):
    return (["round", "mean_acc", "angle", "angle_deg", "std_acc", "worst10_acc", "best10_acc", "test_loss",
             "train_loss", "seconds_per_round"] + list(METRIC_KEYS) + [f"acc_{i}" for i in range(n)])


def _csv_row(rnd: int, ev: dict, sec: float, rm: dict) -> list:
    head = [rnd] + [ev[k] for k in ("mean_acc", "angle", "angle_deg", "std_acc", "worst10_acc", "best10_acc",
                                    "test_loss", "train_loss")] + [sec]
    return head + [rm.get(k, float("nan")) for k in METRIC_KEYS] + [float(a) for a in ev["acc"]]


def run(cfg: Config, *, progress: bool = True, resume: bool = False) -> list[dict]:
    """Run ``cfg`` (writing a run directory when ``cfg.out`` is set); returns one dict per evaluation."""
    out = Path(cfg.out) if cfg.out else None
    exp = build(cfg)
    runner = Runner(exp)
    state = init_state(exp.spec, cfg.seed)
    rows: list[dict] = []
    start = 0
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
        (out / "clients.json").write_text(json.dumps(
            {"source": exp.source, "clients": exp.partition.summary(exp.labels)}, indent=1, default=int) + "\n")
        ckpt = out / "checkpoint.npz"
        if resume:
            state = load_checkpoint(ckpt, state)
            start = int(state.round)
            kept = _read_metrics(out / "metrics.csv", upto=start)
            _write_metrics(out / "metrics.csv", cfg.clients, kept)
        else:
            _write_metrics(out / "metrics.csv", cfg.clients, [])
    if start > cfg.rounds:
        raise ConfigError(f"the checkpoint is at round {start}, past --rounds {cfg.rounds}")
    if start == 0:
        ev = runner.evaluate(state.variables)
        rows.append(_record(out, cfg, 0, ev, float("nan"), {}))
    bar = _progress(progress, cfg.rounds, start)
    t = start
    while t < cfg.rounds:
        length = min(cfg.eval_every - t % cfg.eval_every, cfg.rounds - t)
        t0 = time.perf_counter()
        state, rm = runner.chunk(state, length)
        state = jax.block_until_ready(state)
        sec = (time.perf_counter() - t0) / length
        t += length
        ev = runner.evaluate(state.variables)
        rm = {k: float(np.mean(v)) for k, v in jax.device_get(rm).items()}
        rows.append(_record(out, cfg, t, ev, sec, rm))
        if out is not None:
            save_checkpoint(out / "checkpoint.npz", state)
        if bar is not None:
            bar.update(length)
            bar.set_postfix(acc=f"{ev['mean_acc']:.4f}", angle=f"{ev['angle_deg']:.2f}°", s_round=f"{sec:.3f}")
        if not math.isfinite(ev["test_loss"]):
            raise FloatingPointError(f"the global model diverged at round {t} (test loss not finite); "
                                     f"lower --lr or --server-lr")
    if bar is not None:
        bar.close()
    if out is not None:
        (out / "summary.json").write_text(json.dumps({
            "rounds": cfg.rounds, "final": {k: v for k, v in rows[-1].items() if k != "acc"},
            "compile_s": runner.compile_s}, indent=2) + "\n")
    return rows


def _progress(on: bool, total: int, start: int):
    if not on:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=total, initial=start, unit="round", dynamic_ncols=True)


def _record(out: Optional[Path], cfg: Config, rnd: int, ev: dict, sec: float, rm: dict) -> dict:
    row = {"round": rnd, **ev, "seconds_per_round": sec, **rm}
    if out is not None:
        with open(out / "metrics.csv", "a", newline="") as f:
            csv.writer(f).writerow(_csv_row(rnd, ev, sec, rm))
    return row


def _write_metrics(path: Path, n: int, rows: list) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(_csv_header(n))
        w.writerows(rows)


def _read_metrics(path: Path, upto: int) -> list:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    return [row for row in r[1:] if row and int(row[0]) <= upto]
