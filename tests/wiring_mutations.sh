#!/usr/bin/env bash
# The four glue bugs of issue #9 (tests/test_wiring.py), the slips of issue #13 item 10
# (tests/test_glue.py, tests/test_sweep.py) and the run-directory trust holes of items 1-8
# (tests/test_trust.py) and issue #14's server depth (labels "gpu"), each applied in turn to a copy of HEAD (never to the
# checkout), with the tests that pin it run against it: every slip must make at least one test fail.
#   bash tests/wiring_mutations.sh                  # all (about 15 minutes on 2 cores)
#   ONLY=glue bash tests/wiring_mutations.sh        # the slips whose label contains "glue"
#   SRC=/some/tree bash tests/wiring_mutations.sh   # a copy of that folder instead of HEAD
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD; COPY=$(mktemp -d); trap 'rm -rf "$COPY"' EXIT
if [ -n "${SRC:-}" ]; then cp -r "$SRC"/. "$COPY"; else git archive HEAD | tar -x -C "$COPY"; fi
PYTEST=${PYTEST:-$REPO/.venv/bin/pytest}  # may hold arguments: PYTEST="python -m pytest -n 0"
status=0
mutate() {  # file, old text, new text, label[, tests: pytest arguments, default tests/test_wiring.py]
  case "$4" in *"${ONLY:-}"*) ;; *) return ;; esac
  cp "$COPY/$1" "$COPY/.orig"
  python3 - "$COPY/$1" "$2" "$3" <<'PY'
import sys
p, old, new = sys.argv[1:]
s = open(p).read(); assert s.count(old) == 1, old; open(p, "w").write(s.replace(old, new))
PY
  echo "== $4"
  # shellcheck disable=SC2086  # $5: several pytest arguments
  out=$(cd "$COPY" && PYTHONPATH="$COPY" $PYTEST -q -p no:warnings -p no:cacheprovider ${5:-tests/test_wiring.py} 2>&1)
  echo "$out" | grep -E "^FAILED" || { echo "NOT CAUGHT"; status=1; }
  cp "$COPY/.orig" "$COPY/$1"
}
mutate fedalf_jax/sim/algorithms.py "(last >= t - tau)" "(last > t - tau)" "history window: last >= t - tau -> last > t - tau"
mutate fedalf_jax/sim/round.py "return k_sel, jax.random.split(k_clients, m)" \
  "return k_sel, jnp.broadcast_to(k_clients, (m,) + k_clients.shape)" "one PRNG key for every client of a round"
mutate fedalf_jax/sim/round.py "weights = n_sel.astype(jnp.float32) / jnp.sum(n_sel)" \
  "weights = jnp.full(n_sel.shape, 1.0 / n_sel.shape[0])" "uniform weights 1/m instead of n_i / sum n"
mutate fedalf_jax/sim/client.py "mask = jnp.arange(ci.shape[0]) < cn" "mask = jnp.ones(ci.shape[0], bool)" \
  "evaluation counts padded test samples"

# issue #13, item 10 (labels start with "glue")
G=tests/test_glue.py; S=tests/test_sweep.py
mutate fedalf_jax/sim/round.py "(spec.clients_per_round,), replace=False)" "(spec.clients_per_round,), replace=True)" \
  "glue: clients of a round drawn with replacement" "$G -k sampled_clients"
mutate fedalf_jax/sim/round.py "jax.random.split(jax.random.fold_in(state.key, state.round))" "jax.random.split(state.key)" \
  "glue: every round draws from the run key (the same clients every round)" "$G -k sampled_clients"
mutate fedalf_jax/sim/round.py "jax.random.choice(key, spec.num_clients, " "jax.random.choice(key, spec.num_clients - 1, " \
  "glue: the last client is never sampled" "$G -k sampled_clients"
mutate fedalf_jax/sim/algorithms.py "u = T.add(w_tilde, T.scale(step, 1.0 / hp.rho))" "u = T.add(w_tilde, step)" \
  "glue: ADMM increment upload without the 1/rho" "$G -k admm_increment"
mutate fedalf_jax/algorithms/fedadmm.py 'Algorithm("fedadmm", server=mean_server,' 'Algorithm("fedadmm", server=weighted_mean_server,' \
  "glue: FedADMM's server weighted by n_i" "$G -k fedadmm_server"
mutate fedalf_jax/privacy/mechanisms.py "scale = clip / jnp.maximum(norm, clip)" "scale = 1.0 / jnp.maximum(norm, 1.0)" \
  "glue: Gaussian clipping at 1 whatever the clip" "$G -k gaussian_clipping"
mutate fedalf_jax/sim/fairness.py "(gmin <= merge_tol * jnp.sqrt(dd) + slack)" "(gmin <= merge_tol * jnp.sqrt(dd))" \
  "glue: merge test without the float slack" "$G -k nearly_zero_layer"
mutate fedalf_jax/problem/partitions.py "n_tr = min(max(int(round(frac * n)), 1), n - 1)" "n_tr = min(max(int(frac * n), 1), n - 1)" \
  "glue: per-class local split truncates frac*n" "$G -k local_split"
mutate fedalf_jax/problem/partitions.py "n_test = n - min(max(int(round(frac * n)), 1), n - 1)" \
  "n_test = n - min(max(int(frac * n), 1), n - 1)" "glue: stratified local split truncates frac*n" "$G -k local_split"
mutate fedalf_jax/config/config.py "if self.clients_per_round > self.clients:" "if self.clients_per_round >= self.clients:" \
  "glue: full participation refused" "$G -k full_participation"
mutate fedalf_jax/runner/loop.py "st, out = program(at0, hp, data, 0)" \
  "st, out = program(state, hp, data, 0)" "glue: round 0 evaluates the model after the first chunk" "$G -k round_0"
mutate fedalf_jax/runner/loop.py "(t % self.cfg.eval_every == 0 or t == self.cfg.rounds or interrupted)" \
  "((t - self.start) % self.cfg.eval_every == 0 or t == self.cfg.rounds or interrupted)" "glue: an extended run's evaluations leave the evaluation grid" "$G -k off_the_eval_grid"
mutate fedalf_jax/runner/rundir.py "path = avail[max(avail) if round is None else round]" "path = avail[max(avail)]" \
  "glue: load_checkpoint(round=r) returns the last checkpoint" "$G -k load_checkpoint"
mutate fedalf_jax/reporting/runs.py "cell.eta = max(sorted(cell.scores), key" "cell.eta = max(sorted(cell.scores, reverse=True), key" \
  "glue: eta ties go to the larger eta" "$G -k eta_tie"
mutate fedalf_jax/reporting/tables.py "trained = values[run.rounds > 0]" "trained = values" \
  "glue: the last-K mean includes round 0" "$G -k last_k_mean"
mutate fedalf_jax/reporting/tables.py "return trained[-last:] if trained.size" "return trained[last:] if trained.size" \
  "glue: the last-K mean drops the first K evaluations instead" "$G -k last_k_mean"
mutate fedalf_jax/reporting/__init__.py "    messages += last_k_notes(chosen, last)" "    pass" \
  "glue: fewer than K evaluations, silently" "$G -k last_k_mean"
mutate fedalf_jax/sweeps/sweep.py "    calls = 0
    plans, total = [], 0
    for key, runs in members.items():
" "    plans, total = [], 0
    for key, runs in members.items():
        calls = 0
" "glue: --shard numbers the program calls per combination" "$S -k shard_slices"
mutate fedalf_jax/sweeps/sweep.py 's.get("status", "done") == "diverged" or s.get' 's.get' \
  "glue: sweep --resume reruns a diverged run" "$S -k diverged_run_untouched"
mutate fedalf_jax/runner/programs.py 'return "map" if (backend or jax.default_backend()) == "cpu" else "vmap"' 'return "map"' \
  "glue: auto maps a sweep's runs on the GPU too" "$S -k gpu_auto"
mutate fedalf_jax/sweeps/sweep.py 'self.run_map = default_run_map() if cfg0.run_map == "auto" else cfg0.run_map' \
  'self.run_map = default_run_map()' "glue: an explicit --run-map is ignored" "$S -k gpu_auto"

# issue #13, items 1-8 (labels start with "trust"): tests/test_trust.py
T=tests/test_trust.py
mutate fedalf_jax/config/identity.py 'return sorted(k for k in set(a) | set(b) if k not in BOOKKEEPING and k not in CONTENT and get(a, k) != get(b, k))' \
  'return []' "trust: a checkpoint's identity is not compared" "$T -k edited_since"
mutate fedalf_jax/runner/rundir.py "if not resume and self.holds_run():" "if False:" \
  "trust: a new run overwrites a finished one" "$T -k holds_one"
mutate fedalf_jax/cli_options.py 'base.pop("out", None)' 'pass' "trust: --config inherits out" "$T -k never_inherits"
mutate fedalf_jax/cli.py "cfg = cfg.replace(out=default_out(cfg))" "pass" "trust: a run without --out saves nothing" \
  "$T -k never_inherits"
mutate fedalf_jax/runner/dirlock.py "                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)" "                pass" \
  "trust: no lock: two writers share a folder" "$T -k second_writer"
mutate fedalf_jax/runner/rundir.py "            for k in f.files:  # reading each member checks its CRC
                f[k]" "            for k in f.files:  # reading each member checks its CRC
                pass" "trust: a checkpoint's data is not checked before use" "$T -k damaged_checkpoint"
mutate fedalf_jax/runner/writers.py "        if not (math.isfinite(step) and step >= 0 and step == int(step)):" \
  "        if not math.isfinite(step):
            continue
        if False:" "trust: a NaN metrics row is dropped silently" "$T -k damaged_metrics"
mutate fedalf_jax/runner/loop.py "            raise self._err" "            pass" \
  "trust: a failed checkpoint is never reported" "$T -k failed_checkpoint"
mutate fedalf_jax/runner/loop.py "            ckpt.wait()  # the previous one written" "            pass  # the previous one written" \
  "trust: a failed checkpoint is seen late (after more rounds)" "$T -k failed_checkpoint"
mutate fedalf_jax/runner/rundir.py "for name in TEMPORARIES:" "for name in [p.name for p in self.path.glob('*.tmp*')]:" \
  "trust: every *.tmp* file is removed" "$T -k temporary"
mutate fedalf_jax/sweeps/sweepdir.py 'if p.is_absolute() or not r["dir"] or top not in (top / p).resolve().parents:' 'if False:' \
  "trust: sweep.json may point outside its folder" "$T -k outside_its_folder"
mutate fedalf_jax/runner/loop.py "        if final or interrupted:" \
  "        if final:" "trust: Ctrl-C drops the rounds since the last timed checkpoint" "$T -k saves_the_last"
mutate fedalf_jax/runtime/interrupt.py "        if not self.requested:
            self.requested, self.signum = True, signum" "        if True:
            self.requested, self.signum = True, signum" "trust: a second Ctrl-C is ignored" "$T -k second_ctrl_c"
mutate fedalf_jax/runner/loop.py '                    bar.write(f"fedalf: nothing to resume in {rd.path} ({why}): starting from round 0")' \
  '                    pass' "trust: --resume of a new folder says nothing" "$T -k never_ran"

# issue #14 (labels start with "gpu"): the server's depth, its count, and what runs batched
Q=tests/test_qp.py; F=tests/test_fairness.py; B=tests/test_bench.py
mutate fedalf_jax/sim/qp.py 'return "active" if n <= AUTO_ACTIVE_MAX else "pgd"' 'return "osqp" if n <= AUTO_ACTIVE_MAX else "pgd"' \
  "gpu: auto takes the long-chain osqp solver again" "$Q -k active_is $B -k both_timings"
mutate fedalf_jax/sim/fairness.py "trips = trips + 1 + jnp.max(jnp.where(nonempty, iters, 0))" \
  "trips = 1 + jnp.max(jnp.where(nonempty, iters, 0))" "gpu: qp_iters counts only the last merge step" "$F -k sequential_trips"
mutate fedalf_jax/sim/fairness.py "trips = trips + 1 + jnp.max(jnp.where(nonempty, iters, 0))" \
  "trips = trips + jnp.max(jnp.where(nonempty, iters, 0))" "gpu: qp_iters leaves out the merge loop's own trips" "$F -k sequential_trips"
mutate fedalf_jax/bench/depth.py 'per_round = trips.max(0) if side_by_side else trips.sum(0)' 'per_round = trips.max(0)' \
  "gpu: runs one after another counted as side by side" "$B -k both_timings"
mutate fedalf_jax/sim/qp.py "    lam, it = jax.vmap(lambda q, k, x: _solve_active(q, k, x, maxiter, tol))(Qs, ms, uni)" \
  "    lam, it = jax.vmap(lambda q, k, x: _solve_active(q, k, x, maxiter, tol))(Qs, ms, uni); it = jnp.broadcast_to(jnp.max(it), it.shape)" \
  "gpu: a batch's problems share one step count" "$Q -k active_is"
mutate fedalf_jax/config/identity.py '        return d.get(k, defaults.get(k, "<missing>"))' '        return d.get(k, "<missing>")' \
  "gpu: a run from before a new option cannot resume" "$T -k new_option"
# issue #15: where the noise goes, the noise-aware server, the private defaults (labels "private")
PF=tests/test_private_fedalf.py
mutate fedalf_jax/sim/program.py 'src = T.sub(w, theta) if spec.ldp_on == "update" else w' 'src = w' \
  "private: --ldp-on update perturbs the weights" "$PF -k ldp_on_perturbs"
mutate fedalf_jax/sim/fairness.py 'jnp.sum(R[:, :m, :m]) - noise_sq' 'jnp.sum(R[:, :m, :m])' \
  "private: the denoised length keeps the noise" "$PF -k denoised_fair_norm"
mutate fedalf_jax/sim/program.py 'jnp.sum(jnp.square(a.astype(jnp.float32)) * v)' 'jnp.sum(jnp.abs(a.astype(jnp.float32)) * v)' \
  "private: the upload's coefficient not squared" "$PF -k coefficient_squared"
mutate fedalf_jax/privacy/mechanisms.py 'return (k * k - 1.0) * jnp.square((noisy - c) / k)' 'return (k * k - 1.0) * jnp.square(noisy - c)' \
  "private: adaptive variance from |w̃ − c| without 1/k" "$PF -k exact_variance"
mutate fedalf_jax/sim/program.py '            noise_var = upload_noise(out.upload, w_tilde, var)' '            pass' \
  "private: the clients' noise variance never reaches the server" "$PF -k round_carries"
mutate fedalf_jax/sim/algorithms.py 'noise = jnp.sum(s.noise_var) if fair_norm == "denoised"' 'noise = jnp.sum(s.noise_var) if fair_norm == "raw"' \
  "private: the fair server ignores --fair-norm denoised" "$PF -k round_carries"
mutate fedalf_jax/algorithms/declare.py '"ldp_on": Option("weights", private="update")}' '"ldp_on": Option("weights", private="weights")}' \
  "private: a private run's default puts the noise on the weights" "$PF -k guarantee_holding"
mutate fedalf_jax/config/identity.py '    d = {**LEGACY, **d}' '    d = dict(d)' \
  "private: a run from before --ldp-on resumes with today's defaults" "$PF -k before_these_options"
# issue #16: the extension points (labels start with "api"), tests/test_api.py
AP=tests/test_api.py
mutate fedalf_jax/sim/round.py '    states = T.put(state.client_states, sel, outs.state) if alg.has_client_state else state.client_states' \
  '    states = state.client_states' "api: a user algorithm's per-client state never stored" "$AP -k hand"
mutate fedalf_jax/sim/round.py '                    spec.num_clients, n_sel, outs.aux, server_key(state), model_apply(spec.model), spec.rounds,' '                    spec.clients_per_round, n_sel, outs.aux, server_key(state), model_apply(spec.model), spec.rounds,' \
  "api: ServerIn.num_clients is the round's m" "$AP -k fewer_clients_per_round"
mutate fedalf_jax/runner/build.py '    test = [np.asarray(t) + n_train for t in te]' '    test = [np.asarray(t) for t in te]' \
  "api: given client lists' test rows index the train examples" "$AP -k hand"
mutate fedalf_jax/config/config.py '            d["dataset_digest"] = registry.dataset(self.dataset).digest' '            pass' \
  "api: a registered data set's arrays not part of the run's identity" "$AP -k other_arrays"
mutate fedalf_jax/api.py '                  rd.path if rd else None, rd.summary() if rd else None, slot.variables, slot.average)' \
  '                  rd.path if rd else None, rd.summary() if rd else None, None, slot.average)' \
  "api: fj.run keeps no final model" "$AP -k bit_for_bit"
# issue #15 item 5: central DP (labels start with "central"), tests/test_central_dp.py
CD=tests/test_central_dp.py
mutate fedalf_jax/sim/round.py '        weights = jnp.full(n_sel.shape, 1.0 / n_sel.shape[0], jnp.float32)' '        pass' \
  "central: clients weighted by n_i under central DP" "$CD -k uniformly"
mutate fedalf_jax/sim/program.py '        delta = clip_global_norm(delta, hp.clip)' '        pass' \
  "central: uploads not clipped" "$CD -k uniformly"
mutate fedalf_jax/sim/round.py '    sigma = hp.noise_multiplier * spec.central_sensitivity * server_lr_t * hp.clip' \
  '    sigma = hp.noise_multiplier * spec.central_sensitivity * hp.clip' "central: the noise ignores η_g" "$CD -k calibrated_std"
mutate fedalf_jax/runner/build.py '    return 2.0 / cfg.clients_per_round if central_sensitivity_of(cfg.algorithm) == "2/m" else 2.0' \
  '    return 2.0 / cfg.clients_per_round' "central: the fair server's sensitivity taken as 2/m" "$CD -k calibrated_std"
mutate fedalf_jax/config/config.py '            d["central_rounds"] = self.rounds' '            pass' \
  "central: --resume may change the calibrated run length" "$CD -k refusals"
# issue #15 item 2: the history rows' window under noise (labels start with "tau"), tests/test_wiring.py
mutate fedalf_jax/sim/algorithms.py '    if tau is None:' '    if True:' "tau: --history-tau ignored by the window" \
  "tests/test_wiring.py -k history_tau"
mutate fedalf_jax/algorithms/fedalf.py '"qp_method", "fair_norm", "history_tau"),' \
  '"qp_method", "fair_norm"),' "tau: --history-tau never reaches the server" "tests/test_wiring.py -k history_tau"
# issue #27 items 2, 12, 17: signals, resume hints, notices (labels start with "signals"), tests/test_signals.py
SG=tests/test_signals.py
mutate fedalf_jax/runtime/interrupt.py '("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1")' '("SIGINT",)' \
  "signals: SIGTERM not handled (no checkpoint, no message)" "$SG -k sigterm_saves"
mutate fedalf_jax/runner/loop.py '        e = Interrupted(t, dirs, saved=saved and keeps, signum=INTERRUPT.signum)' \
  '        e = Interrupted(t, dirs, saved=saved and keeps)' "signals: a run stopped by SIGTERM exits 130" "$SG -k sigterm_saves"
mutate fedalf_jax/__init__.py '    _INTERRUPT.install_for_command()' '    pass' \
  "signals: the command's handlers installed only once JAX has loaded" "$SG -k while_the_command_loads"
mutate fedalf_jax/cli.py '    if getattr(main_spec, "name", None) == "fedalf_jax.cli":' '    if False:' \
  "signals: python -m fedalf_jax.cli hinted as a bare fedalf" "$SG -k sweep_saves"
mutate fedalf_jax/cli.py '        return shlex.quote(_shortest(argv0))' '        return "fedalf"' \
  "signals: .venv/bin/fedalf hinted as a bare fedalf" "$SG -k sigterm_saves"
mutate fedalf_jax/reporting/__init__.py '({resume_hint(rundirs, skipped)})' '(fedalf sweep --resume)' \
  "signals: report tells a single run to resume as a sweep" "$SG -k report_of_an_interrupted_run"
mutate fedalf_jax/cli.py '    with INTERRUPT.command(), shown_notices():' '    with INTERRUPT.command():' \
  "signals: integrity notices hidden by PYTHONWARNINGS=ignore" "$SG -k notice"
# issue #27 items 1, 7, 8, 10: run and sweep folders (labels start with "files"), tests/test_trust_files.py
TF=tests/test_trust_files.py
mutate fedalf_jax/runner/rundir.py '            raise ConfigError(f"the run directory {self.path} is not writable; pass another --out")
' '            raise ConfigError(f"the run directory {self.path} is not writable; pass another --out")
        for name in TEMPORARIES:
            discard(self.path / name)
' "files: the temporaries removed before the lock is held (item 1)" "$TF -k refused_by"
mutate fedalf_jax/runner/dirlock.py 'os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o644)' 'os.O_RDWR | os.O_CREAT, 0o644)' \
  "files: the lock opened through a link (item 7)" "$TF -k symlinked_lock"
mutate fedalf_jax/runner/writers.py '    discard(path)
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o666), mode, **kw)' \
  '    return open(path, mode, **kw)' "files: a temporary file opened through a link (item 7)" "$TF -k temporary_names"
mutate fedalf_jax/runner/rundir.py 'if cfg.log == "tensorboard" and (self.path / TB).is_symlink():' 'if False:' \
  "files: TensorBoard events written through a tb link (item 7)" "$TF -k tb_link"
mutate fedalf_jax/runner/rundir.py '                for p in tb.glob(TB_EVENTS):' '                for p in tb.iterdir():' \
  "files: --overwrite removes a user's files in tb/ (item 8)" "$TF -k only_the_event_files"
mutate fedalf_jax/runner/dirlock.py '{time.strftime('"'"'%Y-%m-%d %H:%M:%S'"'"')})\n").encode(errors="surrogateescape")' '{time.strftime('"'"'%Y-%m-%d %H:%M:%S'"'"')})\n").encode()' \
  "files: the lock's holder line of a non-UTF-8 --out (item 10)" "$TF -k utf8"
mutate fedalf_jax/cli.py '            stream.reconfigure(errors="backslashreplace")' '            pass' \
  "files: a non-UTF-8 --out printed on a strict stdout (item 10)" "$TF -k utf8"
mutate fedalf_jax/reporting/tables.py '        path.write_text("\n".join(lines), errors="surrogateescape")' '        path.write_text("\n".join(lines))' \
  "files: report.md naming a non-UTF-8 folder (item 10)" "$TF -k utf8"
# issue #29 items 4-6: fedalf bench a user can run, the GPU kit, the disk line, newer jax (labels start with "kit"),
# tests/test_gpu_kit.py
K=tests/test_gpu_kit.py
mutate fedalf_jax/bench/stop.py '            raise BenchStopped(worker=t)' '            pass' "kit: Ctrl-C waits for the measurement in flight" "$K -k ctrl_c"
mutate fedalf_jax/bench/timing.py '    return compile_s + (wall - compile_s) * width / w' '    return wall * width / w' \
  "kit: a sweep width predicted from the last width's whole wall time" "$K -k prediction"
mutate fedalf_jax/cli.py '        cfg = cfg.replace(model="mlp")  # CPU-sized' '        pass  # CPU-sized' \
  "kit: --sweep-width times the CNN by default" "$K -k defaults"
mutate fedalf_jax/cli.py '[1, 8] if jax.default_backend() != "cpu" else [0]' '[1, 8] if jax.default_backend() != "cpu" else [1]' \
  "kit: the CPU default counts the server depth" "$K -k defaults"
mutate experiments/gpu_session.sh '    exit "$rc"' '    true' "kit: gpu_session goes on after a failing command" "$K -k command_fails"
mutate experiments/gpu_session.sh 'PY=${PYTHON:-.venv/bin/python}' 'PY=python3' "kit: gpu_session runs the system python3" \
  "$K -k smoke_step"
mutate fedalf_jax/sweeps/sweep.py '        check_disk(configs, root, compressed=compress, announce=announce)' '        pass' \
  "kit: a sweep starts without saying its checkpoints exceed the disk" "$K -k disk"
mutate fedalf_jax/bench/timing.py 'cstate = jax.tree_util.tree_map(lambda a: a[c], state.client_states)' \
  'cstate = jax.tree_map(lambda a: a[c], state.client_states)' "kit: jax.tree_map (removed in jax 0.6) in the package" "$K -k jax_api"
# issue #27 items 13-16: privacy statements that are bounds (labels start with "privbound"), tests/test_privacy_bounds.py
PB=tests/test_privacy_bounds.py
mutate fedalf_jax/privacy/accounting.py '    k = dist["max"]  # the headline is a bound for every client: at the largest count reached' \
  '    k = expected_participations(m, n, t)' "privbound: item 13: headline epsilon at the expected count" "$PB -k headline"
mutate fedalf_jax/privacy/accounting.py '    k = max(_realised_counts(cfg, t, counts))' '    k = expected_participations(m, n, t)' \
  "privbound: item 13: progress line epsilon at the expected count" "$PB -k headline"
mutate fedalf_jax/privacy/mechanisms.py '    t = jnp.clip((w - c) / r, -1.0, 1.0)' '    t = (w - c) / r' \
  "privbound: item 14: ldp_fl's delta/r not clipped to [-1, 1]" "$PB -k ldp_fl"
mutate fedalf_jax/privacy/guarantee.py '    if cfg.ldp == "ldp_fl" and cfg.epsilon >= ADAPTIVE_EXACT_EPSILON:' '    if False:' \
  "privbound: item 14: ldp_fl's cut-off not in the guarantee" "$PB -k ldp_fl"
mutate fedalf_jax/privacy/accounting.py 'Q_MIN = 1e-5 ' 'Q_MIN = 0.0 ' \
  "privbound: item 15: central sampling rate unbounded" "$PB -k accountant"
mutate fedalf_jax/config/config.py '        _check_accountable(self)' '        pass' \
  "privbound: item 15: a central config the accountant cannot account" "$PB -k accountant"
mutate fedalf_jax/privacy/guarantee.py "    if cfg.algorithm not in ALGORITHMS and not user.hand_written:  # nothing checks a user's upload: the claim is its own" \
  '    if False:' "privbound: item 16: a declared private_upload stated as fact" "$PB -k declared"
# issue #27 items 15 and 14: privacy accounted as the simulator samples (labels start with "privsample"),
# tests/test_privacy_sampling.py
PS=tests/test_privacy_sampling.py
mutate fedalf_jax/privacy/accounting.py \
  '    return dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(n, m, dpa.GaussianDpEvent(z)), rounds)' \
  '    return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(m / n, dpa.GaussianDpEvent(z)), rounds)' \
  "privsample: item 15: central DP accounted as Poisson sampling" "$PS -k without_replacement"
mutate fedalf_jax/runner/build.py '    return 2.0 / cfg.clients_per_round if central_sensitivity_of(cfg.algorithm) == "2/m" else 2.0' \
  '    return 1.0 / cfg.clients_per_round if central_sensitivity_of(cfg.algorithm) == "2/m" else 2.0' \
  "privsample: item 15: the mean servers' noise at the add/remove sensitivity 1/m" "$PS -k replace_one_one"
mutate fedalf_jax/config/config.py '            d["central_accounting"] = "sampled without replacement, replace-one"' '            pass' \
  "privsample: item 15: a Poisson-accounted central checkpoint resumes" "$PS -k poisson_accounted"
mutate fedalf_jax/privacy/accounting.py '    if eps(Z_MAX) <= epsilon or eps(Z_MIN) <= epsilon:' '    if True:' \
  "privsample: item 15: an unreachable central budget reaches dp_accounting's bracket error" "$PS -k cannot_reach"
mutate fedalf_jax/privacy/accounting.py '    return (max(eps, eff) if math.isfinite(eff) else eps), eff' '    return float(epsilon), eff' \
  "privsample: item 14: ldp stated at the configured epsilon below its float32 one" "$PS -k adaptive_float32"
mutate fedalf_jax/privacy/accounting.py '    return (max(eps, eff) if math.isfinite(eff) else eps), eff' '    return float(epsilon), eff' \
  "privsample: item 14: ldp_fl stated at the configured epsilon below its float32 one" "$PB -k ldp_fl_float32"
# issue #27 item 0: a sweep's padded call (6 runs as 8 over 4 CPU devices) and a run's sharded clients
# (labels start with "devices"), tests/test_devices.py
DV=tests/test_devices.py
mutate fedalf_jax/sweeps/sweep.py "slots_idx = part + [part[0]] * (width - len(part))" \
  "slots_idx = [part[0]] * (width - len(part)) + part" \
  "devices: padding slots first (a run computed with another run's seed, data and lr)" "$DV -k four_cpu"
mutate fedalf_jax/sweeps/sweep.py "self._stack([hparams(self.members[i][0]) for i in idx])" \
  "self._stack([hparams(self.members[i][0]) for i in sorted(idx)])" \
  "devices: a padded call's hyper-parameters out of slot order (seeds right, lrs shifted)" "$DV -k four_cpu"
mutate fedalf_jax/sim/round.py "jax.lax.dynamic_slice_in_dim(x, i * k, k)" "jax.lax.dynamic_slice_in_dim(x, 0, k)" \
  "devices: every device trains the first m/D sampled clients" "$DV -k four_cpu"
# issue #27 items 3, 9 and 11: damaged or missing files of a run or sweep directory (labels start with "damaged"),
# tests/test_damaged_files.py
DF=tests/test_damaged_files.py
mutate fedalf_jax/runner/writers.py "    if want is not None and header != want:" "    if False:" \
  "damaged: metrics.csv's header not checked on resume" "$DF -k drop_a_column_everywhere"
mutate fedalf_jax/runner/writers.py "        if len(r) != width:" "        if False:" \
  "damaged: a row of the wrong width read" "$DF -k drop_a_value"
mutate fedalf_jax/runner/writers.py "        if step <= last_step:" "        if step < last_step:" \
  "damaged: a repeated round read twice" "$DF -k repeat_round"
mutate fedalf_jax/runner/writers.py "        bad = next((j for j, v in enumerate(r) if not _is_number(v)), None)" "        bad = None" \
  "damaged: a value that is not a number read" "$DF -k a_word_for_a_number"
mutate fedalf_jax/runner/writers.py "        cut = final and (not ends or len(r) < width)" "        cut = False" \
  "damaged: the last line cut short by a kill refused" "$DF -k cut_short"
mutate fedalf_jax/reporting/runs.py "        except DamagedFile:  # a damaged metrics.csv" "        except ZeroDivisionError:  #" \
  "damaged: fedalf report skips a damaged metrics.csv as unreadable" "$DF -k report_refuses"
mutate fedalf_jax/reporting/runs.py '        read_csv_rows(rd.path / METRICS, columns=columns_of_file(rd.path / METRICS, int(run.cfg["clients"])))' '        pass' \
  "damaged: fedalf report does not check metrics.csv's header" "$DF -k report_refuses"
mutate fedalf_jax/sweeps/sweep.py \
  "                read_csv_rows(rd.path / METRICS, columns=metric_columns(cfg.clients, extra_columns(self.spec.algorithm, cfg)))" \
  "                pass" \
  "damaged: sweep --resume checks metrics.csv after extending sweep.json" "$DF -k sweep_resume_refuses"
mutate fedalf_jax/runner/loop.py "                return _rebuild_summary(cfg, rd, state, writer)" "                pass" \
  "damaged: a finished run's lost summary.json not rebuilt" "$DF -k missing_summary"
mutate fedalf_jax/cli.py "    if not rows:  # an ended run whose" "    if False:  # an ended run whose" \
  "damaged: rows[-1] of an empty metrics.csv" "$DF -k without_evaluations"
mutate fedalf_jax/sweeps/sweep.py '        if was != rounds and from_run(e["config"]).get("dp") == "central"' '        if False and was != rounds' \
  "damaged: a central-DP sweep's extension refused after sweep.json is rewritten" "$DF -k central_dp_sweep"
mutate fedalf_jax/runner/rundir.py '            if diff == ["central_rounds"]:' '            if False:' \
  "damaged: a central-DP run's refused extension says restore config.json" "$DF -k central_dp_run"
# issue #27 items 4-6: a run's identity is its data's arrays, its user code and its options' resolved values
# (labels start with "identity"), tests/test_identity.py
ID=tests/test_identity.py
mutate fedalf_jax/runner/rundir.py '        ident["data_digest"] = loaded_data(cfg)[0]' '        pass' \
  "identity: the loaded data's digest not recorded (item 4)" "$ID -k refused"
mutate fedalf_jax/config/config.py '"log", "out", "data_dir")' '"log", "out")' \
  "identity: data_dir part of the identity (item 4)" "$ID -k same_arrays"
mutate fedalf_jax/config/config.py $'                d[f"{kind}_code"] = registry.code(kind, name, args)[0]\n                d[f"{kind}_code_files"] = registry.code_parts(kind, name, args)' '                pass' \
  "identity: user code's digest not recorded (item 5)" "$ID -k changed_user_code"
mutate fedalf_jax/config/identity.py '    elif "uncheckable" in (old, new):' '    elif False:' \
  "identity: uncheckable user code refused instead of said (item 5)" "$ID -k cannot_be_checked"
mutate fedalf_jax/cli_options.py '            changed = [k for k in identity_diff(old.identity(), want.identity()) if k in options]' \
  '            changed = [k for k in options if k not in C.BOOKKEEPING and want.to_dict()[k] != old.to_dict()[k]]' \
  "identity: run --resume compares raw options, not resolved values (item 6)" "$ID -k run_resume_accepts"
mutate fedalf_jax/cli.py '            if all(sorted(map(_resolved, cs)) != sorted(map(_resolved, there))' \
  '            if all(sorted(json.dumps(c.to_dict(), sort_keys=True) for c in cs) != sorted(json.dumps(c.to_dict(), sort_keys=True) for c in there)' \
  "identity: sweep --resume compares raw options, not resolved values (item 6)" "$ID -k sweep_resume_accepts"
# issue #28 items 10 and 11: what a researcher and a new user stumbled on in the API and the CLI (labels start
# with "api"), tests/test_api_stumbles.py
A=tests/test_api_stumbles.py
mutate fedalf_jax/plugins/registry.py '        if any(n is not None for n in flat):' '        if False:' \
  "api: clients=[a, b] reported as a shape () error (item 10)" "$A -k flat_index"
mutate fedalf_jax/config/config.py '        elif data.clients is not None:  # a scheme would split' '        elif False:  # a scheme would split' \
  "api: pat1 over a data set's own client lists ignores them (item 10)" "$A -k partition_scheme"
mutate docs/models-and-data.md 'are allowed but not kept' 'are refused' "api: the docs refuse the sown intermediates that run (item 10)" \
  "$A -k sown"
mutate fedalf_jax/api.py '**{k: opts.get(k) for k in varied}, "status": r.status,' '"status": r.status,' \
  "api: the sweep table without the varied options (item 10)" "$A -k sweep_table"
mutate fedalf_jax/runner/metrics.py '    return jnp.degrees(angle) if degrees else angle' '    return angle' \
  "api: fairness_angle(degrees=True) in radians (item 10)" "$A -k fairness_angle"
mutate fedalf_jax/reporting/runs.py '                r.eta_option, r.eta = "server_lr", float(r.cfg["server_lr"])' '                pass' \
  "api: the report's eta is lr where a user's algorithm sweeps server_lr (item 10)" "$A -k report_names_eta"
mutate docs/extending.md 'Write it with `jnp.vdot` to' 'Write it as you like to' \
  "api: the docs do not say the penalty needs jnp.vdot to be bit-equal (item 10)" "$A -k sum_of_squares"
mutate fedalf_jax/api.py '        S.resume(root, chunk=chunk, progress=progress)' '        S.sweep(configs, out, chunk=chunk, progress=progress)' \
  "api: fj.sweep(resume=True) refuses the finished sweep (item 11)" "$A -k sweep_runs_again"
mutate fedalf_jax/api.py '        S.remove_sweep(root)' '        pass' "api: fj.sweep(overwrite=True) keeps the old sweep (item 11)" \
  "$A -k sweep_runs_again"
mutate README.md 'print(sw.table)  ' 'sw.table  ' "api: the README's API block prints no table (item 11)" "$A -k readme"
mutate fedalf_jax/api.py 'Without ``out`` nothing is kept on disk' 'Without ``out`` the run is kept' \
  "api: fj.run's docstring silent on what it keeps (item 11)" "$A -k readme"
mutate fedalf_jax/cli_options.py '"(default: local)",' '"",' "api: --dual-from shows (default: none) (item 11)" "$A -k help_shows"
mutate fedalf_jax/cli.py '        return name.replace(":", "_").replace("/", "_")' '        return name.replace("/", "_")' \
  "api: the default --out of module:attribute holds a colon (item 11)" "$A -k default_out"
mutate fedalf_jax/cli_options.py '    p.add_argument("--version", action=_Version,' '    p.add_argument("--vers", action=_Version,' \
  "api: no fedalf --version (item 11)" "$A -k version"
mutate notebooks/fedalf_round.ipynb "project's active-set solver (Wolfe's" "jaxopt's BoxOSQP solver (Wolfe's" \
  "api: the round notebook names another QP solver than it runs (item 11)" "$A -k notebook_describes"
# issue #29 item 7: a sweep runs each distinct configuration once and shows its stage from its start
# (labels start with "dedupe"), tests/test_sweep_dedupe.py
D=tests/test_sweep_dedupe.py
mutate fedalf_jax/sweeps/sweep_plan.py '        ident = {**c.identity(), **{k: "<ignored>" for k in ignored}}' \
  '        ident = c.identity()' "dedupe: ignored options not normalised (every combination a run)" "$D -k distinct"
mutate fedalf_jax/algorithms/fedlf.py \
  $'        return dict(lr="client_grad=full", lr_decay="client_grad=full", local_optimizer="client_grad=full",\n                    local_steps="client_grad=full")' '        pass' \
  "dedupe: FedLF client_grad=full said to read --lr" "$D -k distinct"
mutate fedalf_jax/sweeps/sweep.py '    configs, notice = distinct(configs)' '    notice = None' \
  "dedupe: the sweep runs every combination" "$D -k ignored_lr"
mutate fedalf_jax/config/identity.py '    if partition != "dirichlet":' '    if False:' \
  "dedupe: pat1 runs differing only in --alpha run twice" "$D -k partition_ignores"
mutate fedalf_jax/reporting/runs.py '    out |= set(partition_ignores(cfg.get("partition", "pat1")))' '    pass' \
  "dedupe: the report names a pat1 variant by its unread alpha" "tests/test_report.py -k variant_names"
mutate fedalf_jax/cli.py '                   for cs in (distinct(configs)[0], configs)):' '                   for cs in (configs,)):' \
  "dedupe: --resume with the options refuses a sweep.json of distinct runs" "$D -k ignored_lr"
mutate fedalf_jax/sweeps/sweep.py "            with bar.stage(f\"planning {len(configs)} run{'s' if len(configs) != 1 else ''}\"):" \
  '            with contextlib.nullcontext():' "dedupe: the sweep says nothing while it plans" "$D -k stage"
mutate fedalf_jax/sweeps/sweep_memory.py '        late.bar = self.bar  # the sweep' '        late.bar = None  # the sweep' \
  "dedupe: compiling while it plans memory not shown" "$D -k stage"
mutate fedalf_jax/api.py '               for cs in (distinct(configs)[0], configs)):' '               for cs in (configs,)):' \
  "dedupe: fj.sweep(resume=True) refuses a sweep.json of distinct runs" "$D -k fj_sweep"
# issue #28 items 1, 2, 3, 7, 8, 9: the algorithm contract and the SCAFFOLD / FedNova examples (labels start with "contract")
K=tests/test_contract.py
mutate fedalf_jax/sim/round.py 'bcast = (C.call(alg, "broadcast", alg.broadcast, (state.sstate,), {}, "server_state")' 'bcast = (C.call(alg, "broadcast", alg.broadcast, (jax.tree_util.tree_map(jnp.zeros_like, state.sstate),), {}, "server_state")' \
  "contract: the clients receive the initial server state's broadcast every round (item 1)" "$K -k broadcast"
mutate fedalf_jax/sim/program.py 'return ClientOut(delta, new_state, loss, stats, noise_var, aux)' \
  'return ClientOut(delta, new_state, loss, stats, noise_var, jax.tree_util.tree_map(jnp.zeros_like, aux))' \
  "contract: the auxiliary uploads reach the server as zeros (item 2)" "$K -k scaffold_example"
mutate fedalf_jax/privacy/guarantee.py '        if alg is not None and alg.public_aux is False:' '        if False:' \
  "contract: the privacy record is silent on a non-public aux (item 2)" "$K -k privacy_record"
mutate fedalf_jax/sim/client.py '(epochs * ((n + batch_size - 1) // batch_size))' '(epochs * (n // batch_size))' \
  "contract: the local step count misses a last partial batch (item 3)" "$K -k fednova_example"
mutate fedalf_jax/sim/round.py 'spec.num_clients, n_sel, outs.aux, server_key(state),' 'spec.num_clients, jnp.ones_like(n_sel), outs.aux, server_key(state),' \
  "contract: ServerIn.n is not the clients' sample counts (item 3)" "$K -k broadcast"
mutate fedalf_jax/runner/rundir.py 'metric_columns(cfg.clients, extra), keep_upto=keep_upto)' \
  'metric_columns(cfg.clients), keep_upto=keep_upto)' "contract: the algorithm's own metrics left out of metrics.csv (item 7)" \
  "$K -k broadcast"
mutate fedalf_jax/reporting/tables.py '    if own:  # the metrics a user' '    if False:  # the metrics a user' \
  "contract: the report leaves out the algorithm's own metrics (item 7)" "$K -k broadcast"
mutate fedalf_jax/sim/contract.py $'    fn = f"algorithm {alg.name!r}: upload"\n    check_like(fn, "Δ_i", delta, theta, expected="shaped like the params θ")' \
  $'    fn = f"algorithm {alg.name!r}: upload"\n    pass' \
  "contract: a Δ_i of the wrong shape is not named (item 8)" "$K -k contract_mistake"
mutate fedalf_jax/sim/contract.py '        if dtypes and jnp.result_type(a) != jnp.result_type(b):' '        if False:' \
  "contract: a client state in another dtype is cast, not refused (item 8)" "$K -k contract_mistake"
mutate examples/scaffold.py 'dc = _map(lambda c, d: -c + d / (k * lr_t), broadcast, delta)' \
  'dc = _map(lambda c, d: -c + d / lr_t, broadcast, delta)' "contract: SCAFFOLD's c_i+ without the step count K (item 9)" \
  "$K -k scaffold_example"
mutate examples/fednova.py '    tau_eff = jnp.sum(p * tau)' '    tau_eff = jnp.mean(tau)' \
  "contract: FedNova's tau_eff unweighted (item 9)" "$K -k fednova_example"
R=tests/test_reexpressed.py  # the built-ins re-expressed through the public API (examples/builtins.py)
mutate examples/builtins.py '    return _step(s.theta, s.deltas, jnp.full((m,), 1.0 / m), s.server_lr_t), s.sstate, {}' \
  '    return _step(s.theta, s.deltas, s.weights, s.server_lr_t), s.sstate, {}' \
  "contract: the re-expressed FedADMM's server weighs by n_i (item 9)" "$R -k fedadmm-none"
mutate examples/builtins.py '    new_dual = _map(lambda l, x, t: l + (x - t) * hp.rho, dual, w, theta)' \
  '    new_dual = _map(lambda l, x, t: l + (x - t) * hp.rho, dual, w_tilde, theta)' \
  "contract: the re-expressed FedADMM's dual from the perturbed model (item 9)" "$R -k fedadmm-adaptive"
# issue #29 items 2 and 3: evaluation vmapped over runs on the GPU path, one pivot permutation per QP step
# (labels start with "gpushape")
GS=tests/test_gpu_shape.py
mutate fedalf_jax/sim/train.py '    return f if spec.client_map == "vmap" else per_run(f)' '    return per_run(f)' \
  "gpushape: a sweep's evaluation mapped over its runs on the GPU path" "$GS -k evaluation"
mutate fedalf_jax/sim/qp.py '  x = x + solve(Sf - jnp.matmul(M, x, precision=_HI))' \
  '  x = x + jnp.linalg.solve(M, Sf - jnp.matmul(M, x, precision=_HI))' \
  "gpushape: the QP step's refinement solves again (a second pivot permutation)" "$GS -k pivots"
# issue #29 item 1: the clients' losses and FedLF's full gradient in batch-sized chunks (labels start with "speed")
K=tests/test_speed.py
mutate fedalf_jax/sim/client.py '    return jnp.sum(jnp.where(mask, ce, 0.0))' '    return jnp.sum(ce)' \
  "speed: the chunk mask dropped, padded rows counted in f_i" "$K"
mutate fedalf_jax/sim/client.py '    mask = (jnp.arange(padded) < n).reshape(steps, chunk)' \
  '    mask = (jnp.arange(padded) < length).reshape(steps, chunk)' \
  "speed: the chunk mask counts the row's padding up to its length" "$K"
mutate fedalf_jax/sim/client.py '    return total / jnp.maximum(jnp.asarray(n, jnp.float32), 1.0)' \
  '    return total / jnp.asarray(rows.size, jnp.float32)' "speed: f_i divided by the padded length, not n" "$K"
# issue #28 item 6: an algorithm's own hyper-parameters, traced (labels start with "ownhp"), tests/test_own_hparams.py
OH=tests/test_own_hparams.py
mutate fedalf_jax/config/config.py '        d = {k: v for k, v in self.to_dict().items() if k not in BOOKKEEPING}' \
  '        d = {k: v for k, v in self.to_dict().items() if k not in BOOKKEEPING and k != "hp"}' \
  "ownhp: the own hyper-parameters left out of the run's identity" "$OH -k resume_refuses"
mutate fedalf_jax/config/config.py '        hp = self.resolved_hp
        if hp:' '        hp = self.hp
        if hp:' "ownhp: config.json records the values given, not the resolved ones" "$OH -k config_json"
mutate fedalf_jax/runner/build.py 'A.OwnHParams({k: f(v) for k, v in cfg.resolved_hp.items()})' \
  'A.OwnHParams({k: f(v) for k, v in cfg.declared_hp.items()})' \
  "ownhp: the declared defaults reach the round, not the values set" "$OH -k by_hand"
mutate fedalf_jax/sweeps/sweep_plan.py '    d.pop("hp", None)  # the algorithm' '    pass  # the algorithm' \
  "ownhp: a sweep over an own hyper-parameter compiles one program per value" "$OH -k one_program"
mutate fedalf_jax/sweeps/sweep_plan.py '                parts.append(f"{k[3:]}-{v:g}")' '                pass' \
  "ownhp: the run names leave out the varied own hyper-parameter" "$OH -k one_program"
mutate fedalf_jax/api.py '            opts = flat_options(r.config.to_dict())' '            opts = r.config.to_dict()' \
  "ownhp: the sweep table's own hyper-parameter columns empty" "$OH -k one_program"
mutate fedalf_jax/reporting/runs.py "[f\"{k.partition('.')[2] if k.startswith(('hp.', 'arg.')) else k}={_fmt_value(v)}\"" \
  '[f"{k}={_fmt_value(v)}"' "ownhp: the report labels an own hyper-parameter hp.NAME" "$OH -k one_program"
mutate fedalf_jax/cli_options.py '            hp = {**saved.get("hp", {}), **base.get("hp", {}), **given.get("hp", {})}' \
  '            hp = {**base.get("hp", {}), **given.get("hp", {})}' \
  "ownhp: run --resume --hp a=1 resets the run's other own values to their defaults" "$OH -k cli_sets"
mutate examples/fedadam.py 'vv - (1.0 - b2) * dd * dd * jnp.sign(vv - dd * dd)' 'vv + (1.0 - b2) * dd * dd * jnp.sign(vv - dd * dd)' \
  "ownhp: FedYogi's second moment with the sign flipped" "$OH -k by_hand"
mutate examples/fedadam.py 'jnp.where(s.t == 0, jnp.square(tau).astype(x.dtype), x)' 'x' \
  "ownhp: FedAdam's v starts at 0, not tau^2" "$OH -k by_hand"
# issue #28 items 4, 5 and 9's Ditto: local training the algorithm controls, personalised evaluation, the clients'
# index lists (labels start with "personal")
PT=tests/test_personal.py
mutate fedalf_jax/sim/train.py '            return jax.tree_util.tree_map(lambda a, b: jnp.where(seen, a, b), mine, theta)' '            return theta' \
  "personal: the global model evaluated as every client's own" "$PT -k ditto_example"
mutate fedalf_jax/runner/loop.py $'    if rest0 is not None:\n        at0 = at0._replace(' $'    if False:\n        at0 = at0._replace(' \
  "personal: round 0 evaluates the client states after the first chunk" "$PT -k ditto_example"
mutate fedalf_jax/sim/default_client.py '    pen = piece("personal.penalty", p.penalty)' \
  '    pen = None' "personal: v_i trained without its penalty" "$PT -k ditto_example"
mutate fedalf_jax/sim/default_client.py '    v0 = piece("personal.start", p.start)' '    v0 = theta' \
  "personal: v_i trained from θ, not its start" \
  "$PT -k ditto_example"
mutate fedalf_jax/runner/columns.py '    return [*(PERSONAL_KEYS if alg.evaluates_own else ()), *alg.metrics, *avg]' \
  '    return [*alg.metrics, *avg]' "personal: metrics.csv without the personal columns" "$PT -k ditto_example"
mutate fedalf_jax/reporting/tables.py '    if mine:  # an algorithm with a personal_model' '    if False:  # an algorithm with a personal_model' \
  "personal: the report leaves out the personalised models" "$PT -k ditto_example"
mutate fedalf_jax/sim/default_client.py '        opt = C.check_optimizer(alg, opt)' '        opt = None' \
  "personal: the local optimiser ignored" "$PT -k local_optimizer"
mutate fedalf_jax/sim/client.py '        return jax.tree_util.tree_map(lambda a, c: jnp.where(live, c, a), carry, new)' '        return new' \
  "personal: a step past the client's examples moves the optimiser state" \
  "$PT -k local_optimizer"
mutate fedalf_jax/sim/default_client.py '        w0 = C.check_params(alg, "local_start", piece("local_start", training.local_start), theta)' \
  '        w0 = theta' "personal: local training from θ whatever local_start says" "$PT -k local_start"
mutate fedalf_jax/runner/build.py '    return _with_optimizer(alg, cfg.local_optimizer)' '    return alg' \
  "personal: --local-optimizer ignored" "$PT -k local_optimizer_option"
mutate fedalf_jax/config/config.py '        if self.local_optimizer is None:  # as before the option existed (identities, digests, config.json)' \
  '        if False:  # as before the option existed (identities, digests, config.json)' \
  "personal: local_optimizer=None recorded (old checkpoints' identity changes)" "$PT -k local_optimizer_option"
mutate fedalf_jax/api.py '    return [(np.asarray(tr, np.int64), np.asarray(te, np.int64)) for tr, te in' \
  '    return [(np.asarray(tr, np.int64), np.asarray(te, np.int64) - len(tr)) for tr, te in' \
  "personal: client_splits' test indices off" "$PT -k client_splits"

# issue 29 item 1: fedalf bench --pytorch, FedAvg's CNN round against a lean PyTorch loop (label "torchcmp")
TB=tests/test_bench.py
mutate fedalf_jax/bench/timing.py 'res["compiled_s_per_round"] / res["pytorch_s_per_round"]' \
  'res["pytorch_s_per_round"] / res["compiled_s_per_round"]' "torchcmp: the ratio printed is PyTorch / fedalf" "$TB -k pytorch"
mutate fedalf_jax/bench/timing.py '"--batch-size", str(cfg.batch_size),' '"--batch-size", "50",' \
  "torchcmp: the PyTorch loop runs its default batch size, not the round's" "$TB -k pytorch"
# issue #28: checkpoints written before the contract grew still resume (label "oldckpt")
mutate fedalf_jax/config/config.py '        if hp:' '        if True:' \
  "oldckpt: a built-in's identity records an empty hp" "tests/test_old_checkpoints.py"
# the report split (t-report) item 3: table.csv's personalised columns (labels start with "reportcsv"),
# tests/test_personal.py
PR=tests/test_personal.py
mutate fedalf_jax/reporting/tables.py '    row["personal_acc_mean"], row["personal_acc_std"] = personal.get("personal_acc", (None, None))' \
  '    row["personal_acc_mean"], row["personal_acc_std"] = None, None' "reportcsv: table.csv leaves the personal accuracy blank" "$PR -k report_csv"
mutate fedalf_jax/reporting/tables.py 'row["personal_angle_std"] = personal.get("personal_angle_deg", (None, None))' \
  'row["personal_angle_std"] = personal.get("personal_acc", (None, None))' "reportcsv: the personal angle columns hold the accuracy" "$PR -k report_csv"
# issue 29 item 1: fedalf bench --against ALGORITHM, the round-cost ratio timed interleaved (label "against")
mutate fedalf_jax/bench/timing.py '        res["over_against"] = res["compiled_s_per_round"] / res["against_s_per_round"]' \
  '        res["over_against"] = res["against_s_per_round"] / res["compiled_s_per_round"]' \
  "against: the ratio inverted" "tests/test_bench.py -k against"
mutate fedalf_jax/bench/timing.py '        other = cfg.replace(algorithm=against)' '        other = cfg' \
  "against: the round timed against is this algorithm's own" "tests/test_bench.py -k against"
mutate fedalf_jax/bench/timing.py '        medians()
        if r == 0:' '        if r == repeats - 1:
            medians()
        if r == 0:' "against: a Ctrl-C among the timed rounds keeps none of them" "tests/test_gpu_kit.py -k ctrl_c_during"

# issue 29 item 1: the fair server writes the history in place; forward-only passes run the forward module
# (label "fwdpass")
mutate fedalf_jax/sim/algorithms.py $'            hist = T.put(hist, s.sel, s.deltas)\n            d, info = fair_direction(s.deltas, s.losses, history=hist, history_mask=mask, history_gram=gram, **kw)\n            sstate = (hist,' \
  $'            new = T.put(hist, s.sel, s.deltas)\n            d, info = fair_direction(s.deltas, s.losses, history=hist, history_mask=mask, history_gram=gram, **kw)\n            sstate = (new,' \
  "fwdpass: the history rows written after the QPs read them (copied)" "tests/test_speed.py -k in_place"
mutate fedalf_jax/sim/program.py 'forward_only=spec.client_map == "map")' 'forward_only=False)' \
  "fwdpass: the clients' losses with the training module" "tests/test_speed.py -k forward_module"
mutate fedalf_jax/sim/train.py 'chunk = spec.batch_size if spec.client_map == "map" else None' 'chunk = None' \
  "fwdpass: the CPU's evaluation ten clients' whole splits per pass" "tests/test_speed.py tests/test_gpu_shape.py"
mutate fedalf_jax/problem/models.py 'forward = make(FORWARD_CONV_IMPL) if auto and conv_impl != FORWARD_CONV_IMPL else None' \
  'forward = None' "fwdpass: no forward module" "tests/test_models.py -k forward"
mutate fedalf_jax/sim/client.py '        right = (jnp.argmax(logits, -1) == y_pool[r]) & m' \
  '        right = jnp.argmax(logits, -1) == y_pool[r]' "fwdpass: the chunked evaluation counts padded examples" \
  "tests/test_wiring.py -k real_examples"

# issue 29 item 4: bench under a scheduler's SIGTERM, and --pytorch's rounds interleaved (label "benchsig")
mutate fedalf_jax/bench/stop.py '                if s == signal.SIGINT or signal.getsignal(s) == INTERRUPT._handle:' \
  '                if s == signal.SIGINT:' "benchsig: SIGTERM stops a bench with the run loop's words" \
  "tests/test_gpu_kit.py -k ctrl_c_during"
mutate fedalf_jax/cli.py $'        os._exit(e.exit_status)\n    return e.exit_status' $'        os._exit(130)\n    return 130' \
  "benchsig: a bench stopped by SIGTERM exits 130" \
  "tests/test_gpu_kit.py -k ctrl_c_during"
mutate fedalf_jax/bench/timing.py '                times[name].append(loop.round())  # as the script timed it
                continue' '                if r == repeats - 1:
                    times[name][:] = [loop.round() for _ in range(repeats)]
                else:
                    times[name].append(1.0)
                continue' "benchsig: the PyTorch rounds all after the compiled ones" "tests/test_bench.py -k pytorch_ratio"
mutate fedalf_jax/bench/timing.py '            deadline = time.monotonic() + 2.0' '            deadline = time.monotonic()' \
  "benchsig: a PyTorch loop killed by the terminal's Ctrl-C first reported as failed" "tests/test_bench.py -k terminals"

# issue 29 item 1: the reshape pool's backward pass written out (label "pool")
mutate fedalf_jax/problem/models.py "    gw = jnp.where(hit, g[:, :, None, :, None, :] / count, jnp.zeros((), g.dtype))" \
  "    gw = jnp.where(hit, g[:, :, None, :, None, :], jnp.zeros((), g.dtype))" \
  "pool: every tied maximum gets the whole cotangent" "tests/test_models.py -k ties"
mutate fedalf_jax/problem/models.py "    return _max_pool_reshape(x)" "    return jnp.max(_windows_2x2(x), axis=(2, 4))" \
  "pool: JAX's own (slow) rule for the reshape pool's gradient" "tests/test_models.py -k ties"
mutate fedalf_jax/problem/models.py "    return (jnp.pad(dx, ((0, 0), (0, h - dx.shape[1]), (0, w - dx.shape[2]), (0, 0))),)" \
  "    return (jnp.pad(dx, ((0, 0), (h - dx.shape[1], 0), (w - dx.shape[2], 0), (0, 0))),)" \
  "pool: an odd size's dropped row padded on the wrong side" "tests/test_models.py -k ties"

mutate fedalf_jax/problem/models.py "    count = jnp.sum(hit, axis=(2, 4), keepdims=True).astype(g.dtype)" \
  "    count = jnp.sum(hit, axis=(2, 4), keepdims=True, dtype=g.dtype)" \
  "pool: the ties counted in floats (an ordered float sum: the step 25% slower)" "tests/test_models.py -k ties"

# issue 36 items 3-5: a signal answered after the round in flight, before the first round at once (label "sig36")
SG=tests/test_signals.py
mutate fedalf_jax/runner/loop.py "(t % self.cfg.eval_every == 0 or t == self.cfg.rounds or interrupted)" \
  "(t % self.cfg.eval_every == 0 or t == self.cfg.rounds)" "sig36: the chunk cut by a signal is not evaluated" "$SG -k mid_chunk"
mutate fedalf_jax/runner/loop.py "        if final or interrupted:" \
  "        if final:" "sig36: no checkpoint of the cut round" "$SG -k mid_chunk"
mutate fedalf_jax/runner/loop.py "(t % self.cfg.eval_every == 0 or t == self.cfg.rounds or interrupted)" \
  "((t - self.start) % self.cfg.eval_every == 0 or t == self.cfg.rounds or interrupted)" \
  "sig36: a resume from a cut round evaluates eval_every rounds after it" "$SG -k mid_chunk"
mutate fedalf_jax/runtime/interrupt.py "            if abandon:" "            if False:" \
  "sig36: a signal while compiling waits for the compile" "$SG -k while_compiling"
mutate fedalf_jax/runner/loop.py $'                with contextlib.suppress(WriteError):  # (the error in flight is the one to report)\n                    rd.remove_run_files()' \
  $'                pass' "sig36: a run stopped before its first round leaves its files" "$SG -k while_compiling"
mutate fedalf_jax/runner/rundir.py "if not overwrite and not self.started():" "if False:" \
  "sig36: a folder a kill left before the first round blocks the same command" "$SG -k never_finished"
mutate fedalf_jax/runner/rundir.py "return sum(1 for line in lines if line.strip()) > 1" \
  "return sum(1 for line in lines if line.strip()) > 0" "sig36: metrics.csv's header alone counts as a started run" \
  "$SG -k never_finished"
mutate fedalf_jax/runner/progress.py "            self._bar.last_print_t = self._bar._time()" "            pass" \
  "sig36: the first rate counts the compile" "tests/test_startup.py -k first_rate"
mutate fedalf_jax/runner/progress.py '            self._note = f"stopping after round {round}"' '            self._note = ""' \
  "sig36: the bar does not say it is stopping" "tests/test_startup.py -k first_rate"

# issue 36 item 10: a throw-away run keeps no checkpoints (label "never36"), tests/test_throwaway.py
TW=tests/test_throwaway.py
mutate fedalf_jax/runner/loop.py $'        if self.kind == "never":  # a throw-away run: not at its end, nor after a signal\n            return False' \
  $'        if False:\n            return False' "never36: a throw-away run writes its final checkpoint" "$TW -k keeps_none_writes"
mutate fedalf_jax/runner/loop.py "and slot.checkpointed != slot.cfg.rounds and slot.cfg.keeps_checkpoints):" \
  "and slot.checkpointed != slot.cfg.rounds):" "never36: a throw-away run never writes its summary" "$TW -k keeps_none_writes"
mutate fedalf_jax/runner/loop.py "if resume and (ended := _ended(cfg, rd)) is not None:" \
  "if False:" "never36: a resume of an ended throw-away run runs it again" "$TW -k run_that_keeps_none"
mutate fedalf_jax/cli.py "        elif not e.checkpoints:" "        elif False:" \
  "never36: a signal's line promises a checkpoint it has not" "$TW -k signal_to_a_run"
mutate fedalf_jax/runner/loop.py '            INTERRUPT.checkpoints = keeps  # what the signal' \
  '            pass  # what the signal' "never36: the signal's first line promises a checkpoint" "$TW -k signal_to_a_run"
mutate fedalf_jax/runner/loop.py "        e.checkpoints = keeps  # the command's" "        pass  # the command's" \
  "never36: a sweep's signal line promises checkpoints" "$TW -k signal_to_a_sweep"

# issue 36 item 1: a mechanism the record states is applied or refused (label "priv36"), tests/test_privacy_declared.py
PD=tests/test_privacy_declared.py
mutate fedalf_jax/privacy/guarantee.py $'        if user is not None and not user.trains_locally:\n            raise ValueError' \
  $'        if False:\n            raise ValueError' "priv36: local_train=False with a mechanism accepted" "$PD -k cli_refuses"
mutate fedalf_jax/privacy/guarantee.py $'    if not alg.trains_locally:\n        raise ConfigError' $'    if False:\n        raise ConfigError' \
  "priv36: a factory needing layer_of with local_train=False accepted" "$PD -k layers"
mutate fedalf_jax/privacy/guarantee.py "        if user.public_aux:  # its" "        if False:  # its" \
  "priv36: public_aux's declaration not named" "$PD -k declarations"
mutate fedalf_jax/privacy/guarantee.py "    if cfg.model not in MODELS and spec.model.has_batch_stats:" "    if False:" \
  "priv36: a user's model with batch statistics accepted" "$PD -k batch"
mutate fedalf_jax/sim/program.py "out.upload(privatise(spec, k_priv, theta, out.w, hp))" "out.upload(out.w)" \
  "priv36: upload given w, not the mechanism's output" "$PD -k perturbed"
# issue 36 item 2: the user code's digest covers its folder and its globals (label "digest36"), tests/test_digest.py
DG=tests/test_digest.py; CD=fedalf_jax/plugins/code_digest.py
mutate $CD "        homes[home] = _walk(home)" "        homes[home] = ([], False)" \
  "digest36: the module's folder not walked" "$DG -k helper_module"
mutate $CD $'    for name, b in sorted(found.values):\n        h.update(name.encode() + b"\\0" + hashlib.sha256(b).digest())' $'    for name, b in sorted(found.values):\n        pass' \
  "digest36: globals' values not hashed" "$DG -k global"
mutate fedalf_jax/config/identity.py "    elif old == registry.legacy_code(kind, name):" "    elif False:" \
  "digest36: an old checkpoint's digest not compared the old way" "$DG -k old_way"
mutate fedalf_jax/runner/rundir.py "        say_code(cfg)" "        pass" "digest36: the coverage not said" "$DG -k helper_module"
mutate $CD '            if e.name.startswith("."):' "            if False:" "digest36: hidden folders walked" "$DG -k package"
mutate $CD ' or os.path.isfile(os.path.join(e.path, "pyvenv.cfg"))' "" "digest36: virtual environments walked" "$DG -k package"

# issue #37 item 8, the client-side examples (tests/test_examples_client.py; labels start with "client37"):
# each example's rule, the never-sampled rule and a resume's per-client collections
CX=tests/test_examples_client.py
mutate examples/propfair.py "-jnp.log(eps) + below + 0.5 * below ** 2" "-jnp.log(eps) + below + below ** 2" \
  "client37: propfair: the quadratic continuation's ½ dropped" "$CX -k propfair_matches"
mutate examples/fedper.py "jnp.zeros_like(t) if k in head else t - u" "t - u" \
  "client37: fedper: the head's Δ uploaded (averaged) instead of 0" "$CX -k fedper_and_fedrep"
mutate examples/fedrep.py '(count < hp.own["head_steps"])' '(count <= hp.own["head_steps"])' \
  "client37: fedrep: one head step too many" "$CX -k fedrep"
mutate examples/apfl.py 'jnp.clip(personal["alpha"], 0.0, 1.0)' 'personal["alpha"]' \
  "client37: apfl: α not clipped to [0, 1]" "$CX -k apfl_matches"
mutate examples/fedbn.py 'upload=upload,
                                 client_collections=("batch_stats",)),' 'upload=upload),' \
  "client37: fedbn: batch statistics averaged, not kept per client" "$CX -k fedbn_matches"
mutate examples/moon.py "con = jnp.logaddexp(pos, neg) - pos" "con = jnp.logaddexp(pos, neg) - neg" \
  "client37: moon: the previous model's z taken as the positive" "$CX -k moon_matches"
mutate fedalf_jax/sim/train.py "return jax.tree_util.tree_map(lambda a, b: jnp.where(seen, a, b), mine, theta)" \
  "return mine" "client37: never sampled: evaluated with its initial state, not θ" "$CX -k never_sampled"
mutate fedalf_jax/runner/loop.py "return None if found is None else rd.load_checkpoint(state, round=found[0])" \
  "return None if found is None else rd.load_checkpoint(state, round=found[0])._replace(clients=state.clients)" \
  "client37: resume: the per-client collections start afresh" "$CX -k survive_a_checkpoint"

# issue #37 items 1-6, the contract's additions (tests/test_contract_batch.py; labels start with "contract37"; the
# never-sampled rule is client37's above)
CB=tests/test_contract_batch.py
mutate fedalf_jax/sim/round.py "jax.random.fold_in(state.key, state.round), SERVER_KEY)" \
  "jax.random.fold_in(state.key, state.round + 1), SERVER_KEY)" "contract37: the server key of the next round" "$CB -k server_key"
mutate fedalf_jax/sim/client.py $'    if local_loss is not None:\n        from .algorithms import Batch' \
  $'    if False:\n        from .algorithms import Batch' "contract37: local_loss never called" "$CB -k propfair"
mutate fedalf_jax/problem/models.py "        return out[0], out[1]" "        return out[0], out[0]" \
  "contract37: the logits passed as the features" "$CB -k features"
mutate fedalf_jax/sim/default_client.py "alg.client_kwargs(alg.local_optimizer, ctx.broadcast, ctx.facts, hp=ctx.hp)" \
  "alg.client_kwargs(alg.local_optimizer, ctx.broadcast, ctx.facts)" "contract37: local_optimizer without hp" "$CB -k local_optimizer"
mutate fedalf_jax/sim/contract.py "        sig.bind(*args, **kw)" "        pass" \
  "contract37: a signature that does not fit goes unchecked" "$CB -k penalty_batch"
mutate fedalf_jax/runner/rundir.py "        if _without_seen(like, leaves, want):" "        if False:" \
  "contract37: a checkpoint from before the seen clients refused" "$CB -k before_the_seen"
mutate fedalf_jax/sim/client.py "jax.random.fold_in(dkey, j), e * per_epoch + j), None" "jax.random.fold_in(dkey, j), j), None" \
  "contract37: the step index restarts every epoch" "$CB -k step_index"

# issue 38: a process reuses the programs it compiled, and only for the same program (label "cache38")
PC=tests/test_program_cache.py
mutate fedalf_jax/runner/programs.py "found = _PROGRAMS.get(shared) if shared is not None else None" "found = None" \
  "cache38: a second run of the same spec compiles again" "$PC"
mutate fedalf_jax/runner/programs.py "        k = (fields, frozen(program.spec.layer_of)," "        k = (frozen(program.spec.layer_of)," \
  "cache38: the key leaves out the round spec" "$PC"
mutate fedalf_jax/runner/build.py $'    if key not in _BUILTINS:\n        alg = make()' $'    if True:\n        alg = make()' \
  "cache38: built-in algorithms built afresh (their specs never equal)" "$PC"
mutate fedalf_jax/runner/build.py "    return _REUSABLE.get(id(spec.algorithm)) is spec.algorithm and spec.model.name in MODELS" \
  "    return True" "cache38: a user's algorithm (which may read changed globals) reuses its programs" "$PC"
mutate fedalf_jax/runner/programs.py "tuple(_leaf_key(x) for x in leaves), _trace_options(), jax.default_backend())" \
  "tuple(_leaf_key(x) for x in leaves), jax.default_backend())" "cache38: the caller's matmul precision left out of the key" "$PC"

# issue 49 item 4: the suite's compilation cache is kept between sessions (label "cache49"), tests/test_startup.py
mutate tests/conftest.py "    if _kept is not None:" "    if False:" \
  "cache49: the suite's cache in a temporary folder again (every session cold)" "tests/test_startup.py -k second_session"
mutate tests/conftest.py '    os.environ[_WORKER_MIN_TIME] = "0.05"' '    os.environ[_WORKER_MIN_TIME] = "0.2"' \
  "cache49: the workers write only programs over 0.2 s again" "tests/test_startup.py -k subprocesses_cache_more"
mutate tests/conftest.py '    os.environ[MIN_TIME_ENV] = "0"' '    os.environ[MIN_TIME_ENV] = "0.1"' \
  "cache49: the subprocesses write only programs over 0.1 s again" "tests/test_startup.py -k subprocesses_cache_more"

# issue 49 item 7: the report's curves, one colour and style per method, the legend off the plots (label "fig49")
FG=tests/test_report_figures.py
mutate fedalf_jax/reporting/figures.py "        colour = dark(k) if lap % 2 == 0 else light(2 * k + 1)" "        colour = dark(k)" \
  "fig49: ten colours for fourteen methods" "$FG"
mutate fedalf_jax/reporting/figures.py '    _legend_beside(fig, ax_acc, "seed mean ± std")' \
  '    ax_acc.legend(fontsize=7, title="seed mean ± std", title_fontsize=7)' "fig49: the legend inside the accuracy plot" "$FG"

# issue 47 items 7 and 15 (label "trust47-opts"): fair_benchmark.sh keeps and reports only the sweeps whose runs
# all ended and exits 1 when one failed; an option given that no run reads is said in one line
TO=tests/test_trust47_options.py
mutate experiments/fair_benchmark.sh '  exit 1' '  exit 0' "trust47-opts: fair_benchmark exits 0 when a sweep failed" "$TO -k fair_benchmark"
mutate experiments/fair_benchmark.sh '  ${FEDALF:-.venv/bin/fedalf} report "${complete[@]}" --out "$REPORT"' \
  '  ${FEDALF:-.venv/bin/fedalf} report "$KEEP" --out "$REPORT"' \
  "trust47-opts: fair_benchmark reports every KEEP folder (a failed sweep's older grid too)" "$TO -k fair_benchmark"
mutate experiments/fair_benchmark.sh '  rm -rf "${KEEP:?}/.incoming/$name"' '  rm -rf "${KEEP:?}/.incoming/$name" "${KEEP:?}/$name"' \
  "trust47-opts: fair_benchmark removes the kept copy before knowing the sweep ended" "$TO -k fair_benchmark"
mutate fedalf_jax/sweeps/sweep_plan.py "    return f\"{'; '.join(parts)}: recorded in the run's config, never read\"" \
  "    return None" "trust47-opts: an unread option accepted without a word" "$TO -k by_hand"
mutate fedalf_jax/cli.py "        say_unread([cfg], _explicit(args))" "        pass" \
  "trust47-opts: fedalf run says nothing of an unread option" "$TO -k run_says"
mutate fedalf_jax/cli.py "        say_unread(configs, _explicit(args))" "        pass" \
  "trust47-opts: fedalf sweep says nothing of an unread option" "$TO -k sweep_says"
mutate fedalf_jax/api.py "        say_unread([cfg], set(options) | non_default(cfg.to_dict()), stacklevel=2)" "        pass" \
  "trust47-opts: fj.run says nothing of an unread keyword" "$TO -k api_run"
mutate fedalf_jax/sweeps/sweep_plan.py "    return {k for k, v in d.items() if k in defaults and v != defaults[k]}" \
  "    return {k for k in d if k in defaults}" "trust47-opts: a config.json's defaults count as given (re-running it spams)" \
  "$TO -k config_file"
mutate fedalf_jax/cli.py "    if not (args.resume and args.out and RunDir(args.out).has_config()):" "    if True:" \
  "trust47-opts: --resume of a run says its unread options again" "$TO -k config_file"

# issue 47 items 3, 4 and 13: the report and a user's algorithm, personal model, modules (label "trust47-report")
TR=tests/test_trust47_report.py
mutate fedalf_jax/reporting/runs.py "    if algo not in ALGORITHMS:" "    if False:" \
  "trust47-report: a user algorithm's runs differing in mu counted once (built-ins' unread options)" "$TR -k differing_in_mu"
mutate fedalf_jax/runner/loop.py 'elif not math.isfinite(row.get("personal_test_loss", 0.0)):' "elif False:" \
  "trust47-report: a NaN personal test loss ends the run done" "$TR -k marks_the_run_diverged"
mutate fedalf_jax/reporting/runs.py 'elif status == "done" and (bad := _personal_diverged(run)) is not None:' "elif False:" \
  "trust47-report: the report shows a done run's NaN personal model as accuracies" "$TR -k counted_diverged"
mutate fedalf_jax/reporting/runs.py "            except Exception as e:  # noqa: BLE001 - a user's module" \
  "            except ImportError as e:  # a user's module" \
  "trust47-report: a user module's SyntaxError or NameError stops the report" "$TR -k fails_to_import"
mutate fedalf_jax/reporting/runs.py '_USER_KINDS = (("algorithm", ALGORITHMS), ("model", MODELS), ("dataset", DATASETS))' \
  '_USER_KINDS = (("algorithm", ALGORITHMS),)' \
  "trust47-report: runs of a model or data set registered elsewhere skipped as unreadable" "$TR -k another_process"

# issue 47 items 1, 2, 8, 9: what a notebook registers is what its runs use (labels "trust47-registry"), tests/test_trust47_registry.py
R47=tests/test_trust47_registry.py
mutate fedalf_jax/problem/models.py "        if _shared_init(self):" "        if True:" \
  "trust47-registry: a user's model's compiled init cached across runs (item 1)" "$R47 -k registered_models_init"
mutate fedalf_jax/plugins/registry.py "    if name in builtin:  # a config naming it runs the built-in" "    if False:  #" \
  "trust47-registry: a built-in name registered and then ignored (item 2)" "$R47 -k builtin_name"
mutate fedalf_jax/config/config.py "        _user_algorithm.cache_clear()" "        pass" \
  "trust47-registry: a user's algorithm's declaration cached per process (item 8)" "$R47 -k changed_"
mutate fedalf_jax/runner/build.py "        if k not in cfg.hp and float(v) != cfg.resolved_hp[k]:" "        if False:" \
  "trust47-registry: a round built from another default than the config's (item 8)" "$R47 -k another_default"
mutate fedalf_jax/plugins/registry.py "a.flags.writeable = False  # our own copies" "a.flags.writeable = True  # our own copies" \
  "trust47-registry: register_dataset's arrays writeable (item 9)" "$R47 -k read_only_copies"
mutate fedalf_jax/plugins/registry.py '        if kind == "dataset":' '        if kind == "dataset" and not isinstance(obj, ArrayData):' \
  "trust47-registry: a module:attribute ArrayData kept as given (item 9)" "$R47 -k module_attribute_arraydata"

# issue 48 item 1 (the client program) and item 8 (FedLC, pFedMe, FedProto) (labels start with "client48")
CP=tests/test_client_program.py
mutate fedalf_jax/sim/program.py $'        C.check_carry(alg, new, carry)\n        return new' \
  $'        C.check_carry(alg, new, carry)\n        return carry' "client48: the carry step returns is not threaded to the next step" "$CP -k bit_for_bit"
mutate fedalf_jax/sim/client.py '        return jax.tree_util.tree_map(lambda a, c: jnp.where(live, c, a), carry, new)' '        return new' \
  "client48: a compiled step past the client's examples changes the carry" "$CP -k context"
mutate fedalf_jax/sim/program.py ".at[y_pool[idx]].add(real)" ".at[y_pool[idx]].add(1)" \
  "client48: label counts count the padded rows" "$CP -k context"
mutate fedalf_jax/sim/round.py "    per_client = (states, idx, n, ckeys, own, sel, budget)" "    per_client = (states, idx, n, ckeys, own, jnp.arange(m), budget)" \
  "client48: a client's index is its position in the round, not its id" "$CP -k context"
mutate fedalf_jax/sim/program.py "    lr_t = hp.lr * hp.lr_decay ** t" "    lr_t = hp.lr" \
  "client48: ctx.lr ignores --lr-decay" "$CP -k fedlc"
mutate fedalf_jax/sim/program.py "(acc, Batch(self._x[r], self._y[r], m, s))" \
  "(acc, Batch(self._x[r], self._y[r], m | True, s))" \
  "client48: the data pass marks padded rows as real" "$CP -k data_pass"
mutate fedalf_jax/sim/program.py $'        C.check_carry(alg, new, carry)\n        return new' \
  $'        return new' \
  "client48: step's carry unchecked (a JAX traceback)" "$CP -k mistake"
mutate fedalf_jax/sim/contract.py $'    check_arrays(fn, "Δ_i", delta)\n    check_like(fn, "Δ_i", delta, theta, expected="shaped like the params θ")' \
  '    check_arrays(fn, "Δ_i", delta)' "client48: final's Δ_i unchecked (a JAX traceback)" "$CP -k mistake"
mutate fedalf_jax/sim/algorithms.py "    if given and alg.client.training is None:" "    if False:" \
  "client48: client= beside upload/penalty silently drops them" "$CP -k beside"
mutate examples/pfedme.py 'w, v = carry["w"], carry["personal"]' 'w, v = carry["w"], carry["w"]' \
  "client48: pFedMe's θ̃ restarts from w every step" "$CP -k pfedme"
mutate examples/fedproto.py "return sums + onehot.T @ h" "return sums + onehot.T @ (h * 0 + 1)" \
  "client48: FedProto's prototypes not from the data pass's features" "$CP -k fedproto"
mutate fedalf_jax/plugins/code_digest.py "        if obj.client is not None:  # a client program" "        if False:  # a client program" \
  "client48: a directly registered Algorithm's program left out of the code digest (a changed step resumes)" "$CP -k digest"
# end client48

# issue 47 items 6 and 16: an older checkpoint is never a run's model, never with a resume; an ended run is never
# re-opened; the bar's last rate and the final checkpoint's stage (labels "trust47-ckpt"), tests/test_trust47_checkpoints.py
T47C=tests/test_trust47_checkpoints.py
mutate fedalf_jax/api.py "        _check_checkpoint_round(self, int(state.round))" "        pass" \
  "trust47-ckpt: .model of a checkpoint older than the run's last round" "$T47C -k older_than_the_last_round"
mutate fedalf_jax/runner/loop.py "if found is not None and start < cfg.rounds and not cfg.keeps_checkpoints:" \
  "if False:" "trust47-ckpt: a resume with never leaves the older checkpoint behind" "$T47C -k never_on_the_resume"
mutate fedalf_jax/runner/loop.py "if resume and (ended := _ended(cfg, rd)) is not None:  # its checkpoint" \
  "if resume and found is None and (ended := _ended(cfg, rd)) is not None:  # its checkpoint" \
  "trust47-ckpt: a plain --resume re-opens an ended run whose checkpoint is older" "$T47C -k plain_resume"
mutate fedalf_jax/runner/progress.py 'if d.get("rate") is None and a is not None' 'if False and a is not None' \
  "trust47-ckpt: the last line's rate divides the command's time" "$T47C -k last_line_rate"
mutate fedalf_jax/runner/loop.py '"writing the checkpoint" if ckpt.busy() else None)' 'None)' \
  "trust47-ckpt: the final checkpoint write has no stage" "$T47C -k final_checkpoint_write"

# issue 47 items 10, 11 and issue 49 item 5 (labels start with "trust47-guar")
TG=tests/test_trust47_guarantee.py
mutate fedalf_jax/privacy/guarantee.py "        if beside:  # an un-noised per-client upload" "        if False:  # an un-noised per-client upload" \
  "trust47-guar: an un-noised auxiliary upload headlined holds (47.10)" "$TG -k non_public_aux"
mutate fedalf_jax/reporting/runs.py '            return recorded_guarantee(rec)  #' \
  '            return {"guarantee": rec["guarantee"], "why": str(rec.get("why", ""))}  #' \
  "trust47-guar: the report reads a recorded holds beside an un-noised aux as holds (47.10)" "$TG -k summary_and_report"
mutate fedalf_jax/runner/loop.py "                if manager is not None and getattr(jax.config, name) != value:" "                if False:" \
  "trust47-guar: the caller's matmul precision context not carried to the worker thread (47.11)" "$TG -k precision"
mutate fedalf_jax/privacy/guarantee.py $'from typing import Protocol\n' \
  $'from typing import TYPE_CHECKING, Protocol\nif TYPE_CHECKING:\n    from .config import Config\n' \
  "trust47-guar: config and guarantee import each other again (49.5)" "tests/test_layers.py -k annotations"
# end trust47-guar

# issue 49 item 1: the fedalf command runs with an allocator that keeps what XLA frees (label "malloc49")
mutate fedalf_jax/__init__.py "    _restart_with_settings()  # an allocator" "    pass  # an allocator" \
  "malloc49: the command keeps glibc's default malloc (a fresh mmap per round's temporaries)" "tests/test_allocator.py"
mutate fedalf_jax/runtime/allocator.py 'JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"' 'JEMALLOC_CONF = ""' \
  "malloc49: jemalloc returns its pages (its default decay: 130k faults a round)" "tests/test_allocator.py -k keep_its_pages"
mutate fedalf_jax/runtime/allocator.py '    if "malloc" in preload or env.get("MALLOC_CONF"):' '    if False:' \
  "malloc49: the caller's own allocator replaced" "tests/test_allocator.py -k callers"

# issue 49 item 7: the report states the Dirichlet alpha and the number of clients (label "setting49")
mutate fedalf_jax/reporting/tables.py "    return f\" ({', '.join(parts)})\" if parts else \"\"" "    return \"\"" \
  "setting49: the report says neither alpha nor the clients" "tests/test_report_figures.py -k dirichlet"
# end setting49

# issue 47 items 5 and 12 (labels "trust47-qp"): a QP's empty box gives NaN weights traced and one line concrete,
# FedMGDA+ refuses eps < 0; a local_loss/personal.local_loss/local_optimizer that breaks the contract is one line
TQ=tests/test_trust47_qp_contract.py
mutate fedalf_jax/sim/qp.py "lam = jnp.where(any_valid[:, None], jnp.where(feasible[:, None], lam, jnp.nan), 0.0)" \
  "lam = jnp.where(any_valid[:, None], lam, 0.0)" "trust47-qp: a traced empty box gives weights off the simplex" "$TQ -k empty"
mutate fedalf_jax/sim/qp.py "feasible = (slo <= 1.0 + slack) & (shi >= 1.0 - slack) & ~crossed" \
  "feasible = (slo <= 1.0 + slack) & (shi >= 1.0 - slack)" "trust47-qp: traced crossed bounds count as feasible" "$TQ -k crossed"
mutate fedalf_jax/sim/qp.py "    if bool(jnp.any(crossed)):" "    if False:" "trust47-qp: concrete crossed bounds accepted" \
  "$TQ -k concrete_empty_box"
mutate fedalf_jax/sim/qp.py 'raise ConfigError(f"solve_simplex_qp: the box is empty' 'raise ValueError(f"solve_simplex_qp: the box is empty' \
  "trust47-qp: a concrete empty box is a ValueError, not a ConfigError" "$TQ -k concrete_empty_box"
mutate fedalf_jax/sim/qp.py "1e-6 + lo.shape[-1] * float(jnp.finfo(lo.dtype).eps)" "1e-6" \
  "trust47-qp: the box's slack leaves out float32 rounding (eps = 0 with many clients is NaN)" "$TQ -k lower_equal_upper"
mutate examples/fedmgda.py 'eps = check_eps(s.hp.own["eps"])' 'eps = s.hp.own["eps"]' "trust47-qp: FedMGDA+ takes eps < 0" \
  "$TQ -k fedmgda"
mutate fedalf_jax/sim/contract.py "        if shape != () or not jnp.issubdtype(dtype, jnp.floating):" "        if False:" \
  "trust47-qp: a loss function's vector or integer result unchecked" "$TQ -k breaks_the_contract"
mutate fedalf_jax/sim/contract.py "        except Exception as e:  # noqa: BLE001 - what the user's function raised, named in one line" \
  "        except ZeroDivisionError as e:  # noqa: BLE001" "trust47-qp: a loss function that raises is a traceback" "$TQ -k breaks_the_contract"
mutate fedalf_jax/sim/contract.py '            elif "features" in read:' "            elif False:" \
  "trust47-qp: None batch.features not named" "$TQ -k breaks_the_contract"
mutate fedalf_jax/sim/default_client.py 'local_loss = C.checked_loss(alg, "local_loss", local_loss)' "local_loss = local_loss" \
  "trust47-qp: local_loss's function unchecked" "$TQ -k breaks_the_contract"
mutate fedalf_jax/sim/default_client.py 'ploss = C.checked_loss(alg, "personal.local_loss", ploss)' "ploss = ploss" \
  "trust47-qp: personal.local_loss's function unchecked" "$TQ -k breaks_the_contract"
mutate fedalf_jax/sim/default_client.py "opt = C.check_optimizer(alg, opt)" "opt = opt" "trust47-qp: local_optimizer's result unchecked" \
  "$TQ -k breaks_the_contract"

# issue 49 item 7: --help groups the options and says the server step's and epsilon's defaults (label "help49")
mutate fedalf_jax/cli_options.py "        p = group_of.get(f.name, group_of[None])" "        pass" \
  "help49: the options in one list again" "tests/test_help.py -k grouped"
# end help49

# issue 47 item 14: the code digest follows what the code reaches, per file (label "trust47-digest")
TD=tests/test_trust47_digest.py
mutate fedalf_jax/plugins/code_reach.py "                self.value(name, g[name], free)" "                pass" \
  "trust47-digest: the globals a lambda's code names are not followed (its factory's module undigested)" "$TD -k follows_the_code"
mutate fedalf_jax/plugins/code_reach.py "                self.value(name, cell.cell_contents, free)" "                pass" \
  "trust47-digest: closure cells are not followed" "$TD -k follows_the_code"
mutate fedalf_jax/plugins/registry.py "    return take(obj, module, built)" "    return take(obj, module, None)" \
  "trust47-digest: the functions of the Algorithm a factory builds are not followed" "$TD -k follows_the_code"
mutate fedalf_jax/plugins/code_reach.py '            if not (str(key).startswith("__") and str(key).endswith("__")):' \
  "            if False:" "trust47-digest: what a reached module imports is not followed" "$TD -k follows_the_code"
mutate fedalf_jax/plugins/code_digest.py '    return _hashed(b"code digest 3\0", r), statement(r)' \
  '    return _hashed(b"code digest 3\0" + previous(d).encode(), r), statement(r)' \
  "trust47-digest: any .py file of the code's folders blocks --resume again" "$TD -k resume_refuses"
mutate fedalf_jax/config/identity.py '        said = f"changed: {_listed(what, 6)}; " if what else ""' '        said = ""' \
  "trust47-digest: the refusal does not name the changed file" "$TD -k resume_refuses"
mutate fedalf_jax/config/identity.py "    elif old == registry.previous_code(kind, name):" "    elif False:" \
  "trust47-digest: an issue-36 checkpoint is not compared the way its digest was made" "$TD -k issue36"

# issue 48 item 6: the report and a sweep's best= rank a personalised method by what it deploys (label "deploy48")
TDP=tests/test_report_deployed.py
mutate fedalf_jax/reporting/runs.py "        score = float(np.mean([(r.deployed_acc if cell.personal else r.acc)[-1] for r in done]))" \
  "        score = float(np.mean([r.acc[-1] for r in done]))" "deploy48: a personalised cell's η chosen by its global model" \
  "$TDP -k personalised_cell"
mutate fedalf_jax/reporting/runs.py "    cell.personal = bool(done_runs) and all(r.deploys_personal for r in done_runs)" \
  "    cell.personal = False" "deploy48: no cell is personalised (global numbers, ranked_by mean_acc)" \
  "$TDP::test_a_personalised_cell_is_chosen_and_shown_by_its_personal_models $TDP::test_the_headline_tables_show_the_personal_model_marked"
mutate fedalf_jax/reporting/tables.py "        text = f\"{_headline(c, row, 'final')}<br>η=" "        text = f\"{format_cell(row, 'final')}<br>η=" \
  "deploy48: the final-evaluation cell shows the global model" "$TDP -k headline"
mutate fedalf_jax/reporting/tables.py "        if c.eta is not None and c.personal:" "        if False:" \
  "deploy48: the worst-10% cell shows the global model" "$TDP -k headline"
mutate fedalf_jax/reporting/tables.py 'body(lambda c: _headline(c, rows[id(c)], "lastK")' 'body(lambda c: format_cell(rows[id(c)], "lastK")' \
  "deploy48: the last-evaluations cell shows the global model" "$TDP -k headline"
mutate fedalf_jax/sweeps/sweep.py '    key = "personal_acc" if "personal_acc" in final else "mean_acc"' '    key = "mean_acc"' \
  "deploy48: best= by the global mean_acc whatever the algorithm" "$TDP::test_the_sweeps_best_says_what_it_is_by $TDP::test_deployed_score_names_its_metric"
mutate fedalf_jax/sweeps/sweep.py "                _record_best(state, row)" \
  '                state["best"], state["best_by"] = max(state["best"], row["mean_acc"]), "mean_acc"' \
  "deploy48: the progress line's best= by the global mean_acc" "$TDP -k sweeps_best"
mutate fedalf_jax/cli.py '    done = [(r, *S.deployed_score(r["final"])) for r in res' '    done = [(r, "mean_acc", r["final"]["mean_acc"]) for r in res' \
  "deploy48: the closing best: line by the global mean_acc" "$TDP -k sweeps_best"
mutate fedalf_jax/sweeps/sweep.py '    if key == "personal_acc" and not (isinstance(loss,' '    if False and not (isinstance(loss,' \
  "deploy48: a diverged personal model's accuracy counts as a best= score" "$TDP -k deployed_score"
# end deploy48

# issue 49 item 3: --eval-every never, no evaluation at all (labels start with "eval49"), tests/test_eval_never.py
EN=tests/test_eval_never.py
mutate fedalf_jax/config/config.py '        return self.eval_every != "never"' '        return True' \
  "eval49: a never run evaluates anyway (Config.evaluates always true)" "$EN -k bits"
mutate fedalf_jax/runner/programs.py $'        if not evaluates:\n            return [self.compiled_round(state, hp, data)]\n' '' \
  "eval49: the evaluation programs are compiled for a run that never evaluates" "$EN -k bits"
mutate fedalf_jax/runner/loop.py $'        if schedule.due(t, t == cfg.rounds, INTERRUPT.requested):\n            if say_stopping' \
  $'        if t == cfg.rounds or INTERRUPT.requested:\n            if say_stopping' \
  "eval49: a never run checkpoints only at its end, not on --checkpoint-every's cadence" "$EN -k cadence"
mutate fedalf_jax/runner/loop.py $'        if schedule.due(t, t == cfg.rounds, INTERRUPT.requested):\n            if say_stopping' \
  $'        if schedule.due(t, t == cfg.rounds):\n            if say_stopping' \
  "eval49: a signal to a never run leaves no checkpoint of the round in flight" "$EN -k signal"
mutate fedalf_jax/runner/loop.py '    if evaluated and (not slot.rows or (slot.status' '    if (not slot.rows or (slot.status' \
  "eval49: a finished never run writes no summary (no rows)" "$EN -k bits"
mutate fedalf_jax/runner/loop.py '"round": last["round"], "evaluated": evaluated,' '"round": last["round"],' \
  "eval49: the summary does not say that nothing was evaluated" "$EN -k bits"
mutate fedalf_jax/runner/loop.py '    if cfg.evaluates and (not rows or rows[-1]["round"] != cfg.rounds):' \
  '    if (not rows or rows[-1]["round"] != cfg.rounds):' \
  "eval49: a never run's lost summary is not rebuilt (no rows)" "$EN -k cadence"
mutate fedalf_jax/runner/loop.py '                    if writer and (ended.rows or ended.reached):' '                    if writer and ended.rows:' \
  "eval49: a --resume of an ended never run does not say it ended" "$EN -k cadence"
mutate fedalf_jax/cli.py '    if not cfg.evaluates:  # --eval-every never: nothing evaluated to print' '    if False:' \
  "eval49: fedalf run --eval-every never ends refusing its empty metrics.csv" "$EN -k cadence"
mutate fedalf_jax/cli.py '    if not cfg.evaluates and args.sweep_width:' '    if False:' \
  "eval49: fedalf bench --sweep-width --eval-every never is not refused in one line" "$EN -k mistakes"
mutate fedalf_jax/cli.py '                if not cfg.evaluates and any(w > 0 for w in depth):' '                if False:' \
  "eval49: fedalf bench --depth-width --eval-every never is not refused in one line" "$EN -k mistakes"
mutate fedalf_jax/sweeps/sweep.py ' and s.get("final"):  # final null: eval_every=never' ':' \
  "eval49: a sweep's resume reads a never run's null final" "$EN -k sweep"
mutate fedalf_jax/reporting/runs.py '    if status == "done" and (rd.summary() or {}).get("evaluated") is False:' '    if False:' \
  "eval49: the report skips a never run as an empty one, not saying why" "$EN -k report"
mutate fedalf_jax/reporting/__init__.py '    if not any(c.done for c in cells) and set(skipped) == {"unevaluated"}:' '    if False:' \
  "eval49: a report of never runs alone says to finish them" "$EN -k report"
# end eval49

# issue 48 items 3 and 4 (labels start with "steps48"): --local-steps K and --eval-average
LS=tests/test_local_steps_and_average.py
mutate fedalf_jax/sim/client.py '    per = jnp.maximum(jnp.asarray(n, jnp.int32) // batch_size, 1)' \
  '    per = jnp.maximum((jnp.asarray(n, jnp.int32) + batch_size - 1) // batch_size, 1)' \
  "steps48: a pass's partial last batch is a step (not B examples a step)" "$LS -k hand_computation"
mutate fedalf_jax/sim/program.py '                      steps=spec.local_steps, budget=budget)' '                      steps=None, budget=budget)' \
  "steps48: the default client trains epochs whatever --local-steps" "$LS -k facts"
mutate fedalf_jax/sim/program.py '    steps = local_steps(n, spec.epochs, spec.batch_size, spec.local_steps)' '    steps = local_steps(n, spec.epochs, spec.batch_size)' \
  "steps48: the default client's facts.steps counts epochs' steps" "$LS -k facts"
mutate fedalf_jax/sim/program.py '    steps = local_steps(n, spec.epochs, spec.batch_size, spec.local_steps)' '    steps = local_steps(n, spec.epochs, spec.batch_size)' \
  "steps48: a client program's ctx.facts.steps counts epochs' steps" "$LS -k facts"
mutate fedalf_jax/sim/program.py '                      steps=spec.local_steps, budget=budget)' '                      steps=None, budget=budget)' \
  "steps48: a client program's step runs epochs whatever --local-steps" "$LS -k facts"
mutate fedalf_jax/runner/build.py 'local_steps=cfg.local_steps,' 'local_steps=None,' \
  "steps48: the run's spec ignores --local-steps" "$LS -k facts"
mutate fedalf_jax/config/config.py '            if self.local_epochs != 1:' '            if False:' \
  "steps48: local_steps with local_epochs 2 is not refused" "$LS -k exclusive"
mutate fedalf_jax/cli_options.py '    if "local_steps" in out and "local_epochs" in out:' '    if False:' \
  "steps48: --local-steps with an explicit --local-epochs is not refused" "$LS -k exclusive"
mutate fedalf_jax/config/config.py '            if d[name] is off:' '            if True:' \
  "steps48: --local-steps is not recorded in config.json nor the identity" "$LS -k recorded"
mutate fedalf_jax/sim/round.py '    if spec.eval_average:  # θ̄_t' '    if False:  # θ̄_t' \
  "steps48: the average is never updated (θ_0 evaluated)" "$LS -k averaged"
mutate fedalf_jax/sim/round.py 'lambda a, v: (a + (v - a) / jnp.asarray(t, a.dtype))' 'lambda a, v: (v + 0 * a / jnp.asarray(t, a.dtype))' \
  "steps48: the 'average' is the last iterate" "$LS -k averaged"
mutate fedalf_jax/sim/train.py '_eval(spec)(state.average,' '_eval(spec)(state.variables,' \
  "steps48: the avg_* columns evaluate the last iterate" "$LS -k averaged"
mutate fedalf_jax/algorithms/fedlf.py $'local_optimizer="client_grad=full",\n                    local_steps="client_grad=full")' \
  'local_optimizer="client_grad=full")' \
  "steps48: --local-steps with FedLF's full gradient is not said to be unread" "$LS -k said"
# end steps48

# issue 48 item 5 (labels start with "args48"): --alg-arg / Config.alg_args, a factory's arguments; examples/fedgkd.py
AA=tests/test_alg_args.py
mutate fedalf_jax/plugins/registry.py 'factory(layer_of=layer_of, **args) if _accepts(factory, "layer_of") else factory(**args)' \
  'factory(layer_of=layer_of) if _accepts(factory, "layer_of") else factory()' \
  "args48: the factory is called without its arguments (K its default)" "$AA -k by_hand"
mutate fedalf_jax/config/config.py '        _check_alg_args(self)' '        pass' \
  "args48: Config accepts a built-in's or an unknown argument" "$AA -k does_not_take"
mutate fedalf_jax/config/config.py '    alg = _user_algorithm(name, registry.version(), registry.arg_items(args))' \
  '    alg = _user_algorithm(name, registry.version())' \
  "args48: the declarations cache is keyed by the name alone" "$AA -k declarations"
mutate fedalf_jax/config/config.py '        if not self.alg_args:  # likewise' '        if True:  # likewise' \
  "args48: alg_args left out of config.json and the identity" "$AA -k resume"
mutate fedalf_jax/plugins/registry.py '    if missing:' '    if False:' \
  "args48: a missing required argument is a raw TypeError" "$AA -k needing"
mutate fedalf_jax/sweeps/sweep_plan.py 'combo["alg_args"] = {} if _builtin_beside_user(alg, algorithms) else' \
  'combo["alg_args"] = {} if True else' "args48: the sweep drops the arg.K axis" "$AA -k sweep"
mutate fedalf_jax/cli.py '    given.update({f"arg.{k}": v for k, v in given.pop("alg_args", {}).items()})' '    pass' \
  "args48: fedalf sweep --alg-arg K=1,2 is not a grid axis" "$AA -k sweep"
mutate fedalf_jax/reporting/runs.py "k.partition('.')[2] if k.startswith(('hp.', 'arg.')) else k" "k[3:] if k.startswith('hp.') else k" \
  "args48: the report's variant reads arg.K=2, not K=2" "$AA -k sweep"
mutate fedalf_jax/cli_options.py '            x = json.loads(v)' '            x = v' \
  "args48: --alg-arg K=2 is the string '2'" "$AA -k json_scalars"
mutate fedalf_jax/cli_options.py '            if "alg_args" in changed:' '            if False:' \
  "args48: resume's refusal says alg_args, not --alg-arg K (2 there, 3 given)" "$AA -k resume"
mutate examples/fedgkd.py '    n = jnp.minimum(count, k).astype(jnp.float32)' '    n = jnp.asarray(k, jnp.float32)' \
  "args48: fedgkd's teacher divides by K before K models exist" "$AA -k by_hand"
mutate fedalf_jax/api.py 'k.startswith(("hp.", "arg.")))' 'k.startswith("hp."))' \
  "args48: fj.sweep refuses grid={'arg.K': ...}" "$AA -k fj_sweep"
mutate fedalf_jax/sweeps/sweep_plan.py '        if args or base.get("alg_args"):' '        if args:' \
  "args48: a built-in beside a user's algorithm gets its alg_args (refused)" "$AA -k fj_sweep"
mutate fedalf_jax/runner/explore.py '            **{f"arg.{k}": v for k, v in args.items()}, "seed"' '            "seed"' \
  "args48: the notebook's run table has no arg.K column" "$AA -k sweep_over"
# end args48

# issue 48 item 7 (labels start with "cdp48"): --dp central for a user's algorithm whose server is
# fj.algorithms.weighted_mean_server / mean_server itself; another server or an aux upload refused in one line
CU=tests/test_central_dp_user.py
mutate fedalf_jax/privacy/guarantee.py '    if dp == "central" and algorithm in ALGORITHMS and algorithm not in CENTRAL_SENSITIVITY:' \
  '    if dp == "central" and algorithm not in CENTRAL_SENSITIVITY:' \
  "cdp48: dp central refuses every user algorithm (FedAvg's server too)" "$CU -k fedprox"
mutate fedalf_jax/privacy/guarantee.py '    if not any(alg.server is f for f in CENTRAL_SERVERS):' '    if False:' \
  "cdp48: a user's own server runs under dp central, accounted as a mean" "$CU -k own_server"
mutate fedalf_jax/privacy/guarantee.py '    if refused:  # a factory that needs layer_of is first built here' '    if False:  # (mutated)' \
  "cdp48: a factory built only for the model runs its own server under dp central" "$CU -k own_server"
mutate fedalf_jax/privacy/guarantee.py '    if alg.public_aux is not None:' '    if False:' \
  "cdp48: an aux upload (unclipped, un-noised) runs under dp central" "$CU -k aux"
mutate fedalf_jax/privacy/guarantee.py '"sensitivity": f"{central_sensitivity_of(cfg.algorithm)} x server_lr x clip"' \
  '"sensitivity": f"{CENTRAL_SENSITIVITY.get(cfg.algorithm)} x server_lr x clip"' \
  "cdp48: the record's sensitivity of a user's algorithm reads None" "$CU -k fedprox"
mutate fedalf_jax/privacy/guarantee.py '            if alg is not None and alg.evaluates_own:' '            if False:' \
  "cdp48: the personal models are not listed as outside central DP" "$CU -k personal"
# end cdp48

# issue 48 item 8 (labels start with "ex48"): examples/fedsam.py, feddecorr.py, perfedavg.py against two rounds
# computed by hand in float64 (tests/test_examples_48.py)
E8=tests/test_examples_48.py
mutate examples/fedsam.py 'g_sam = jax.grad(f)(jax.tree_util.tree_map(lambda p, e: p + e, w, eps))' 'g_sam = g' \
  "ex48: fedsam descends with the gradient at w, not at w + eps (FedAvg)" "$E8 -k fedsam_matches"
mutate examples/fedsam.py 'x / (norm + 1e-12), g)' 'x / (jnp.linalg.norm(x) + 1e-12), g)' \
  "ex48: fedsam's eps normalised per tensor, not by the norm over every parameter" "$E8 -k fedsam_matches"
mutate examples/feddecorr.py '    return fj.cross_entropy(batch) + hp.own["beta"] * decorr(batch.features, batch.mask)' \
  '    return fj.cross_entropy(batch)' "ex48: feddecorr without its decorrelation term" "$E8 -k feddecorr_matches"
mutate examples/feddecorr.py 'jnp.sum(c * c * m, axis=0) / n' 'jnp.mean(c * c, axis=0)' \
  "ex48: feddecorr's variance counts the batch's padded rows" "$E8 -k feddecorr_matches"
mutate examples/perfedavg.py 'lambda w, a: jnp.where(first, w, a)' 'lambda w, a: w' \
  "ex48: perfedavg's beta-step takes the gradient at w, not at the adapted point" "$E8 -k perfedavg_matches"
mutate examples/perfedavg.py 'ctx.theta, c["w"]), personal' 'ctx.theta, c["w"]), ctx.theta' \
  "ex48: perfedavg's personal model is theta_t, not fine-tuned one alpha-step" "$E8 -k perfedavg_matches"
mutate examples/perfedavg.py 'server=fj.algorithms.mean_server,' 'server=fj.algorithms.weighted_mean_server,' \
  "ex48: perfedavg's server weighs by n_i, not the paper's plain mean" "$E8 -k perfedavg_matches"
# end ex48

# issue 48 item 2 (a client program under a privacy mechanism: fj.Reveal) and item 8 (SCAFFOLD option I) (labels "priv48")
CPP=tests/test_client_program_privacy.py
mutate fedalf_jax/sim/program.py "out.upload(privatise(spec, k_priv, theta, out.w, hp))" "out.upload(out.w)" \
  "priv48: a Reveal's w uploaded un-noised under --ldp/--dp" "$CPP -k bit_for_bit"
# (retired: "a Reveal noised with another key than the default client's": since the default client is a program
# too, one line of program_client draws both keys, so no one-line slip can give the two different keys)
mutate fedalf_jax/sim/program.py '            noise_var = upload_noise(out.upload, w_tilde, var)' '            pass' \
  "priv48: a Reveal gives the server no noise variance (needs_noise_var)" "$CPP -k noise_variance"
mutate fedalf_jax/sim/program.py "        if local_mech:  # a raw Δ_i would leave the client past the mechanism" "        if False:" \
  "priv48: a raw Δ_i runs un-noised under --ldp/--dp gaussian" "$CPP -k one_line"
# (retired: "a program's Δ_i unclipped under --dp central": one line of program_client clips every client's
# upload, the default's and a program's, so its test, which compares the two, cannot see it; "central: uploads
# not clipped" guards that line)
mutate fedalf_jax/privacy/guarantee.py "        if not user.private_upload and not user.hand_written:" "        if not user.private_upload:" \
  "priv48: a Reveal's record needs a private_upload declaration (does not hold)" "$CPP -k record"
mutate fedalf_jax/privacy/guarantee.py "    if cfg.algorithm not in ALGORITHMS and user.hand_written and user.public_aux:" \
  "    if False:" "priv48: a program's public aux headlined without naming its declaration" "$CPP -k record"
mutate fedalf_jax/sim/program.py "            out = Sent(w, lambda wt: (T.sub(theta, wt), new_state, aux), out.stats)  # model_upload's Δ_i" \
  "            out = Sent(w, lambda wt: (T.sub(theta, wt), new_state, aux), ctx.stats)  # model_upload's Δ_i" \
  "prog56: a program's trained batch statistics dropped for those it started from" "tests/test_client_program.py -k batch_statistics"
mutate fedalf_jax/sim/program.py "    elif not isinstance(out, Sent) and \"batch_stats\" in theta_vars:  # a raw Δ_i: no place" \
  "    elif False:  # a raw Δ_i: no place" \
  "prog56: a raw Δ_i on a batch-statistics model runs (its statistics lost)" "tests/test_client_program.py -k must_return"
mutate fedalf_jax/sim/program.py "            up = out.upload" "            up = lambda wt: (T.sub(theta, wt), state)" \
  "prog56: a Reveal's own upload ignored for θ − w̃" "tests/test_client_program.py -k noised"
mutate fedalf_jax/sim/algorithms.py "        cols = training.client_collections if training is not None else self.client.collections" \
  "        cols = training.client_collections if training is not None else ()" \
  "prog56: a program's collections not kept per client" "tests/test_client_program.py -k batch_statistics"
mutate fedalf_jax/sim/program.py "        return out, (new.get(\"batch_stats\", stats) if stats is not None else None)" \
  "        return out, stats" \
  "prog56: ctx.apply.with_stats does not update the running statistics" "tests/test_client_program.py -k batch_statistics"
mutate fedalf_jax/algorithms/fedavg.py 'weighted_by_n=True, frontier_line=":")' 'weighted_by_n=True, frontier_line=None)' \
  "rep56: FedAvg's declared frontier level not drawn" "tests/test_report_frontier.py -k differ_only"
mutate fedalf_jax/reporting/figures.py '    both = [c for c in cells if kinds[c.runs[0].cfg["algorithm"]] == {True, False}]' '    both = []' \
  "rep56: no privacy figure for an algorithm run with and without privacy" "tests/test_report.py -k figures"
mutate examples/scaffold1.py "    c_new = full_gradient(ctx, ctx.theta)" "    c_new = full_gradient(ctx, w)" \
  "priv48: SCAFFOLD option I's c_i⁺ at the trained w, not θ" "$CPP -k scaffold1_matches"
mutate examples/scaffold1.py "p - ctx.lr * (gi - ci + c)" "p - ctx.lr * (gi + ci - c)" \
  "priv48: SCAFFOLD's correction with the wrong sign" "$CPP -k scaffold1_matches"
mutate examples/scaffold1.py "x / ctx.facts.n.astype(x.dtype)" "x / 5.0" \
  "priv48: SCAFFOLD option I's full gradient divided by the batch, not n_i" "$CPP -k scaffold1_matches"
# end priv48

# issue 48 item 10: docs/extending.md rewritten around the client program (labels start with "doc48"),
# tests/test_extending_doc.py
XD=tests/test_extending_doc.py
mutate docs/extending.md '`clip`, `noise_multiplier`, `own` and' '`clip`, `own` and' \
  "doc48: the reserved own hyper-parameter names omit noise_multiplier" "$XD -k reserved"
mutate docs/extending.md '- **`local_start(ctx) -> params`**:' '- local_start:' \
  "doc48: a piece of fj.local_training without its bullet" "$XD -k documented"
mutate docs/extending.md '    return optax.apply_updates(w, updates), s' '    return w, s' \
  "doc48: the optimiser-in-the-carry block does not step" "$XD -k local_optimizer_as_a_carry"
# end doc48

# the aux's client metrics checked for every client (contract.check_aux_metrics, shared by upload and client.final)
mutate fedalf_jax/sim/contract.py "        if k not in alg.metrics:" "        if False:" \
  "contract: an undeclared client metric in aux accepted" "tests/test_contract.py -k contract_mistake"

# issue 48 item 1's rest: the default client is a client program (fedalf_jax/sim/default_client.py), run by the
# same code as a user's; its functions' facts= has the label counts and index (labels start with "default48")
DP=tests/test_default_program.py
mutate fedalf_jax/sim/program.py '                        label_counts(y, idx, n, spec.model.num_classes),' '                        None,' \
  "default48: the default client's facts have no label counts" "$DP -k facts"
mutate fedalf_jax/sim/round.py "    per_client = (states, idx, n, ckeys, own, sel, budget)" "    per_client = (states, idx, n, ckeys, own, jnp.arange(m), budget)" \
  "default48: the default client's facts.index is its position in the round" "$DP -k facts"
mutate fedalf_jax/sim/default_client.py '    return ClientProgram(init, step, final)' '    return ClientProgram(init, None, final)' \
  "default48: the default client takes no step" "$DP -k is_a_client_program"
# issue 49 item 1: fedalf sweep --processes P, a sweep as P processes of --shard slices (label "procs49")
SP=tests/test_sweep_processes.py
mutate fedalf_jax/cli.py '    for i in range(1, p):' '    for i in range(1, 1):' \
  "procs49: --processes starts no other process (a slice's runs never run)" "$SP -k every_run_once"
mutate fedalf_jax/cli.py '    _say_sweep(S.results(args.out), args.out)' '    _say_sweep([], args.out)' \
  "procs49: the last lines count this process's runs only" "$SP -k every_run_once"
mutate fedalf_jax/cli.py '    if args.shard is not None:
        raise ConfigError("--processes starts' '    if False:
        raise ConfigError("--processes starts' \
  "procs49: --processes with --shard accepted" "$SP -k one_line"
# issue 49 item 4: fj.run and fj.sweep keep their programs in the CLI's compilation cache, so a notebook's kernel
# re-run loads them (label "apicache49"), tests/test_startup.py
AC="tests/test_startup.py -k api_cache"
mutate fedalf_jax/api.py "    cfg = _config(cfg, options)
    configure_for_api()  # the CLI's persistent compilation cache, unless this process chose its own
    if not (resume" "    cfg = _config(cfg, options)
    if not (resume" "apicache49: fj.run leaves the compilation cache off" "$AC"
mutate fedalf_jax/api.py "    cfg = _config(cfg, options)
    configure_for_api()  # the CLI's persistent compilation cache, unless this process chose its own
    base = " "    cfg = _config(cfg, options)
    base = " "apicache49: fj.sweep leaves the compilation cache off" "$AC"
mutate fedalf_jax/runner/cache.py "if env.get(ENV, \"\").strip() or not jax_dir:" "if not jax_dir:" \
  "apicache49: a folder JAX was given wins over FEDALF_COMPILE_CACHE" "$AC"
mutate fedalf_jax/runner/cache.py "    _API_CONFIGURED = True
    change" "    change" "apicache49: the API configures the cache on every call" "$AC"

# issue 49 item 1: the pool is 64-byte aligned and read-only, and the CPU's device data is its memory (no copy of
# the data set at every start: ~54,000 page faults for FMNIST) (label "pool49"), tests/test_data.py
PD="tests/test_data.py -k read_only"
mutate fedalf_jax/runner/build.py "jax.device_put(np.asarray(a)) for a in" "jnp.asarray(a) for a in" \
  "pool49: the device data copied from the pool" "$PD"
mutate fedalf_jax/problem/data.py "    start = -buf.ctypes.data % ALIGN" "    start = 0" "pool49: the pool not aligned" "$PD"
mutate fedalf_jax/runner/build.py "    out.flags.writeable = False
" "" "pool49: the pool writable" "$PD"
# issue 49 item 1 (follow-up): sweep --processes passes a signal on in both of the parent's phases, to children
# in a session of their own (label "sig49"), tests/test_sweep_processes.py
SP=tests/test_sweep_processes.py
mutate fedalf_jax/cli.py '    signum = _wait_children(children)' '    signum = [c.wait() for c in children] and None' \
  "sig49: a signal while the parent waits for its children is not passed on (a blocking c.wait())" "$SP -k waits_for_its_children"
mutate fedalf_jax/cli.py '        _stop_children(children, e.signum)' '        _stop_children([], e.signum)' \
  "sig49: a signal during the parent's own slice is not passed on to the children" "$SP -k computes_its_slice"
mutate fedalf_jax/cli.py '                                             start_new_session=True, env=env))' \
  '                                             start_new_session=False, env=env))' \
  "sig49: the children in the parent's process group (a terminal's Ctrl-C reaches them twice)" "$SP -k ctrl_c"

# issue 49 item 1: --processes pins each process to cores of its own (label "pin49"), tests/test_sweep_processes.py
PN=tests/test_sweep_processes.py
mutate fedalf_jax/cli.py "**({CPUS_ENV: \",\".join(map(str, groups[i]))}" "**({}" \
  "pin49: the children not given their cores" "$PN -k sigterm_while_the_parent"
mutate fedalf_jax/cli.py "def main(argv=None) -> int:
    _pin_from_env()" "def main(argv=None) -> int:" "pin49: a child does not pin itself" "$PN -k sigterm_while_the_parent"
mutate fedalf_jax/cli.py "    finally:
        os.sched_setaffinity(0, before)" "    finally:
        pass" "pin49: the parent's cores not given back after its slice" "$PN -k every_run_once"
mutate fedalf_jax/cli.py "        n = size + (i < extra)" "        n = size" "pin49: the cores left over go to no process" "$PN -k cpu_groups"
# issue 49 (found measuring item 1): --shard slices started together plan at once; the first plan is every slice's,
# through a temporary file of its own (label "plan49"), tests/test_sweep.py
mutate fedalf_jax/sweeps/sweep_plan.py "        if not same:
            write_sweep(root, runs, meta)" "        if True:
            write_sweep(root, runs, meta)" "plan49: a later slice's plan replaces the first" "tests/test_sweep.py -k plan_at_once"
mutate fedalf_jax/sweeps/sweepdir.py "            os.link(tmp, path)" "            os.replace(tmp, path)" \
  "plan49: sweep.json replaced, not linked only where absent" "tests/test_sweep.py -k plan_at_once"
mutate fedalf_jax/sweeps/sweepdir.py '    tmp = root / f"{SWEEP}.{os.getpid()}.tmp"' '    tmp = root / f"{SWEEP}.tmp"' \
  "plan49: sweep.json written through the one shared temporary name" "tests/test_sweep.py -k temporary_file_alone"
# issue 49 item 1 (single run's system time): the built-in loaders' images are the pool, not copied into it
# (label "poolcopy49"), tests/test_data.py
PC="tests/test_data.py -k not_a_copy"
mutate fedalf_jax/runner/build.py "    out = joined(train, test) if train.dtype == dtype else None" "    out = None" \
  "poolcopy49: the pool copied from the loaded images" "$PC"
mutate fedalf_jax/problem/data.py "    block = aligned_empty((len(train) + len(test), *shape), np.float32)
    x_train, x_test = block[:len(train)], block[len(train):]" "    x_train, x_test = (np.empty((len(a), *shape), np.float32) for a in (train, test))" \
  "poolcopy49: train and test images in blocks of their own" "$PC"
mutate fedalf_jax/problem/data.py "            or test.ctypes.data != train.ctypes.data + train.nbytes or train.ctypes.data % ALIGN" "            or train.ctypes.data % ALIGN" \
  "poolcopy49: any two arrays of one buffer joined" "$PC"
# issue 49: --devices N on XLA's host devices: every LAPACK call of a batch holds one problem (jaxlib's batched
# kernels waited in a pool thread for their parts: a deadlock) (label "hostlapack49"), tests/test_qp.py
HL="tests/test_qp.py -k host_devices"
mutate fedalf_jax/sim/qp.py '  return jax.default_backend() == "cpu" and jax.device_count() > 1' '  return False' \
  "hostlapack49: batched LAPACK calls on host devices" "$HL"
mutate fedalf_jax/sim/qp.py "_dense_solve = _per_problem(jnp.linalg.solve)" "_dense_solve = jnp.linalg.solve" \
  "hostlapack49: the bounded polish's solve batched on host devices" "$HL"
mutate fedalf_jax/sim/qp.py "  lu, _, perm = _lu(M)" "  lu, _, perm = jax.lax.linalg.lu(M)" \
  "hostlapack49: the active set's LU batched on host devices" "$HL"
# issue 49 item 1 (a single run's start): the decoded data set kept on disk and mapped (label "datacache49"),
# tests/test_data_cache.py
DC=tests/test_data_cache.py
mutate fedalf_jax/problem/data.py "        hit = data_cache.read(key, files, arrays_digest)" "        hit = None" \
  "datacache49: the entry never read" "$DC"
mutate fedalf_jax/problem/data_cache.py "    if digest_of(*arrays) != digest:" "    if False:" \
  "datacache49: an entry used without its digest checked" "$DC"
mutate fedalf_jax/problem/data_cache.py '            out.append([os.path.abspath(f), hashlib.file_digest(fh, "sha256").hexdigest()])' \
  '            out.append([os.path.abspath(f), str(os.fstat(fh.fileno()).st_size)])' \
  "datacache49: an entry named by the files' paths and sizes only" "$DC tests/test_trust55_data_cache.py"
mutate fedalf_jax/problem/data_cache.py "        del x, arrays
        _discard(folder)
        return None" "        del x, arrays
        return None" "datacache49: a damaged entry kept" "$DC"
mutate fedalf_jax/problem/data_cache.py "        _remove_replaced(root, name, [path for path, _ in made_from])" "" \
  "datacache49: the changed files' entry kept" "$DC"
mutate fedalf_jax/problem/data_cache.py "        _remove_stale(root)" "" "datacache49: a killed writer's folder kept" "$DC"
# issue 55 (trust round 5, label "trust55"): items 1-2, the data cache serves only the files it was made from,
# tests/test_trust55_data_cache.py
T55=tests/test_trust55_data_cache.py
mutate fedalf_jax/problem/data_cache.py '        if (meta.get("key"), meta.get("sources"), meta.get("version")) != (key, made_from, VERSION):' \
  '        if False:' "trust55: an entry copied in from another folder served" "$T55"
mutate fedalf_jax/problem/data_cache.py "    if folder.is_symlink():
        try:
            folder.unlink()" "    if False:
        try:
            folder.unlink()" "trust55: a symlinked entry never replaced" "$T55 -k symlinked"
mutate fedalf_jax/problem/data_cache.py "    if _is_link(folder):" "    if False:" \
  "trust55: a symlinked entry served" "$T55 -k symlinked"
# items 3 and 8 (a run's end): tests/test_trust55_runs.py
T55R=tests/test_trust55_runs.py
mutate fedalf_jax/runner/loop.py "                _check_finite(slot)  # no row to say it diverged: the final model itself" \
  "                pass" "trust55: a NaN model never evaluated ends done" "$T55R -k never_evaluated"
mutate fedalf_jax/runner/loop.py "                slot.average = to_host(_take(state.average, i) if batched else state.average)" \
  "                pass" "trust55: a run's averaged iterate not kept" "$T55R -k averaged_iterate"
mutate fedalf_jax/api.py "            self._average = dict(self._checkpoint.average)" \
  "            self._average = dict(self._checkpoint.variables)" "trust55: the loaded averaged iterate is the last model" \
  "$T55R -k averaged_iterate"
# item 5 (a user's function failing inside the round is one line): tests/test_trust55_user_errors.py
# issue 55 item 5 (labels start with "trust55:"): a user's function failing in a client program is one line
U=tests/test_trust55_user_errors.py
mutate fedalf_jax/sim/contract.py "        if told is None:
            raise
        raise told from e" "        raise" \
  "trust55: a user's function failing in a client program is the raw exception again" "$U -k data_pass"
mutate fedalf_jax/sim/contract.py "        raise told from e" "        raise told from None" \
  "trust55: fj.run's one-line error loses the original exception (__cause__)" "$U -k data_pass"
mutate fedalf_jax/sim/contract.py "                found = (real, tb.tb_lineno, code.co_name)" \
  "                found = found or (real, tb.tb_lineno, code.co_name)" \
  "trust55: the outermost user frame is named, not the line that failed" "$U -k fedproto_step"
mutate fedalf_jax/sim/program.py $'        out, _ = self.model.apply({"params": params}, x, train=train, rng=key, features=True)\n        self.gave_none = self.gave_none or out[1] is None' $'        out, _ = self.model.apply({"params": params}, x, train=train, rng=key, features=True)\n        self.gave_none = False' \
  "trust55: no likely cause (logits-only model's None features) in the one line" "$U -k data_pass"
mutate fedalf_jax/sim/program.py "(acc, Batch(self._x[r], self._y[r], m, s)), {}, \"acc, batch\", hint=self._hint)" \
  "(acc, Batch(self._x[r], self._y[r], m, s)), {}, \"acc, batch\")" \
  "trust55: a data pass's failure on None features is not told its likely cause" "$U -k data_pass"
mutate fedalf_jax/sim/contract.py "            at = f\" at {at}\" if at else \"\"" "            at = \"\"" \
  "trust55: local_loss's failure does not name the user's file and line" "$U -k local_loss_failure"
mutate fedalf_jax/runner/build.py "    check_features(cfg, spec)
" "" "trust55: an algorithm needing features runs (and fails late) on a logits-only model" "$U -k needing_features"
mutate fedalf_jax/runner/build.py "    return feats is not None" "    return True" \
  "trust55: a logits-only model is taken for one returning features" "$U -k features"
mutate examples/fedproto.py "        needs_features=True)" "        needs_features=False)" \
  "trust55: examples/fedproto.py does not declare needs_features" "$U -k needing_features"
# items 6, 7, 9-12 (options nothing reads, the sweep grid, config.json, notices, jemalloc): tests/test_trust55_options.py
# issue 55 items 6, 7, 9, 10, 11, 12 (labels start with "trust55:"), tests/test_trust55_options.py
T55O=tests/test_trust55_options.py
mutate fedalf_jax/config/identity.py '        if cfg.dp != "central" and not _reads_server_lr(cfg):' '        if False:' \
  "trust55: a user's server declaring reads_server_lr=False: --server-lr not said to have no effect" "$T55O -k server_lr"
mutate fedalf_jax/config/identity.py '    return alg is None or bool(getattr(alg, "reads_server_lr", True))' '    return True' \
  "trust55: Algorithm.reads_server_lr not read" "$T55O -k server_lr"
mutate fedalf_jax/config/identity.py '        out.update(eval_average="eval_every=never", train_loss_every="eval_every=never")' '        pass' \
  "trust55: --eval-average/--train-loss-every with --eval-every never not said" "$T55O -k eval_options"
mutate fedalf_jax/api.py 'set(grid) - fields if not' 'set(grid) - set(base) if not' \
  "trust55: fj.sweep's grid checked against to_dict's keys (local_steps, eval_average refused)" "$T55O -k grid"
mutate fedalf_jax/config/config.py '            kw.pop(k, None)' '            pass' \
  "trust55: fj.Config(**config.json) refuses its privacy record" "$T55O -k config_json"
mutate fedalf_jax/config/config.py 'a run'"'"'s saved config reads back with fj.Config.from_dict(d) or ' 'a run'"'"'s saved config: ' \
  "trust55: Config's unknown-keyword message names no reader of a saved config" "$T55O -k config_json"
mutate fedalf_jax/runtime/notices.py 'warnings.formatwarning = _one_line' 'pass' \
  "trust55: a notice printed with Python's source line after it" "$T55O -k notice_is_one_line"
mutate fedalf_jax/runtime/allocator.py '        if _shared_library(given):' '        if os.path.isfile(given):' \
  "trust55: FEDALF_JEMALLOC naming a text file preloaded, jemalloc recorded as applied" "$T55O -k jemalloc"
mutate fedalf_jax/runtime/allocator.py '        if given not in _SAID:' '        if True:' \
  "trust55: a FEDALF_JEMALLOC that is no library said at every look, not once" "$T55O -k not_preloaded"
mutate experiments/afl_setting.py 'lr_decay=1.0, eval_average=True, checkpoint_every="never")' \
  'lr_decay=1.0, server_lr=1.0, eval_average=True, checkpoint_every="never")' \
  "trust55: experiments/afl_setting.py gives qfedavg --server-lr 1 again" "$T55O -k afl"
# issue 56 item 1 (label "plugins56"): the built-ins are plug-ins that declare what the package knows of them,
# tests/test_builtin_plugins.py
PL=tests/test_builtin_plugins.py
mutate fedalf_jax/reporting/runs.py 'LABELS = {name: factory.declares.label for name, factory in BUILTINS.items()}' \
  'LABELS = {"fedavg": "FedAvg", "fedprox": "FedProx", "qfedavg": "qFedAvg", "fedadmm": "FedADMM", "fedlf": "FedLF", "fedalf": "FedALF"}' \
  "plugins56: a table of the built-ins' names is back" "$PL -k by_its_name"
mutate fedalf_jax/algorithms/fedalf.py 'defaults={"server_lr": Option(0.5, private=1.0),' 'defaults={"server_lr": Option(0.5),' \
  "plugins56: FedALF's private step default lost" "$PL -k declared_defaults"
mutate fedalf_jax/algorithms/declare.py '        opt = self.options.get(name) or self.defaults.get(name) or GENERIC.get(name)' \
  '        opt = self.options.get(name) or GENERIC.get(name)' "plugins56: an algorithm's own defaults of every algorithm's options ignored" \
  "$PL -k declared_defaults"
mutate fedalf_jax/cli.py '    args = build_parser().parse_args(expand_declared(given))' '    args = build_parser().parse_args(given)' \
  "plugins56: a user algorithm's declared hparam gets no flag" "tests/test_declared_flags.py"
mutate fedalf_jax/cli_declared.py '        if name in declared and flag not in known:' '        if name in declared:' \
  "plugins56: a declared hparam named like a command flag takes the flag over" "tests/test_declared_flags.py"
# issue 56 item 3 (label "resolved56"): a configuration's algorithm resolved once, tests/test_resolved_once.py
RO=tests/test_resolved_once.py
mutate fedalf_jax/privacy/guarantee.py '        user = (plugin if plugin is not None else resolve_plugin(algorithm)).algorithm' \
  '        user = resolve_plugin(algorithm).algorithm' "resolved56: the privacy check builds the algorithm again, without its arguments" "$RO"
mutate fedalf_jax/config/options.py '    return found if isinstance(found, Plugin) else resolve_plugin(cfg.algorithm, getattr(cfg, "alg_args", None))' \
  '    return resolve_plugin(cfg.algorithm, getattr(cfg, "alg_args", None))' "resolved56: every reader builds the algorithm again" "$RO"
# item 4 (a --processes parent killed by SIGKILL, its children, the status words): tests/test_trust55_processes.py
PP=tests/test_trust55_processes.py
mutate fedalf_jax/__init__.py "    _watch_parent()  # a" "    pass  # a" "trust55: a child goes on computing when its parent is killed" "$PP -k sigkill_leaves"
mutate fedalf_jax/runtime/interrupt.py "        if _set_pdeathsig(signal.SIGTERM):" "        if False:" \
  "trust55: the parent's end watched by polling only (a parent gone at start is missed)" "$PP -k already_gone"
mutate fedalf_jax/runner/dirlock.py "    slices = [h for h in alive if h[3] is not None]" "    slices = []" \
  "trust55: a resume refused by a running slice names the dead parent" "$PP -k names_the_slice"
mutate fedalf_jax/cli.py "    if code < 0:
        try:" "    if False:
        try:" "trust55: a child killed by SIGKILL reads exited -9" "$PP -k exit_descriptions"
mutate fedalf_jax/cli.py '    return "stopped (resume with --resume)" if status == "running" and writer_ended(folder) else status' \
  '    return status' "trust55: a run whose lock's pid is dead reads running" "$PP -k ended_process"
mutate fedalf_jax/api.py "        return sampled_clients(self.config.clients, self.config.clients_per_round, self.config.seed, rounds)" \
  "        return sampled_clients(self.config.clients, self.config.clients_per_round, self.config.seed + 1, rounds)" \
  "client56: Result.sampled_clients replays another seed's sampling" "tests/test_sampled_public.py"
mutate fedalf_jax/sim/client.py "    u = jax.vmap(lambda p: jax.random.uniform(jax.random.fold_in(key, p)))(pos)" \
  "    u = jax.vmap(lambda p: jax.random.uniform(jax.random.fold_in(key, p + 1)))(pos)" \
  "client56: the epoch's order is not the documented one" "tests/test_minibatch_order.py"
mutate examples/fedmdfg.py "    active = (angle > theta_fair) | force" "    active = force" \
  "fedmdfg59: fair guidance never turned on by the loss angle" "tests/test_fedmdfg.py -k matches"
mutate fedalf_jax/sim/train.py "        t = jnp.asarray(run.round, jnp.int32)" "        t = jnp.asarray(run.round + 1, jnp.int32)" \
  "eval56: client.evaluate's ctx.t is not the rounds done" "tests/test_eval_hook.py -k evaluated_with"
mutate fedalf_jax/runner/loop.py "sstate=rest0[2], round=rest0[3])" "sstate=rest0[2])" \
  "eval56: round 0's evaluation hook sees the round after it" "tests/test_eval_hook.py -k evaluated_with"
mutate fedalf_jax/runner/build.py "eval_average=cfg.eval_average, rounds=cfg.rounds," "eval_average=cfg.eval_average, rounds=cfg.rounds + 1," \
  "server56: ServerIn.rounds is not the run's (no last round)" "tests/test_server_in.py"
mutate fedalf_jax/sim/round.py '        kw["key"] = jax.random.fold_in(init_key, SERVER_INIT_KEY)' '        kw["key"] = init_key' \
  "server56: init_server_state's key is the model's own init key" "tests/test_server_in.py"
# issue 58's first slice (labels "fed58"): availability, dropped uploads, their records and refusals
F=tests/test_federations.py
mutate fedalf_jax/sim/federation.py "    return jax.random.uniform(key, (n,)) < p" "    return jax.random.uniform(key, (n,)) < 1.0" \
  "fed58: beta/size availability: every client always available" "$F -k beta"
mutate fedalf_jax/sim/federation.py "    score = jnp.where(avail, u, 1.0 + u)" "    score = u" \
  "fed58: the round samples among all clients, not the available ones" "$F -k beta"
mutate fedalf_jax/sim/federation.py "        return (t + phase) % period < (period + 1) // 2" "        return (t + phase) % period <= (period + 1) // 2" \
  "fed58: cyclic clients on one round too many" "$F -k cyclic"
mutate fedalf_jax/sim/federation.py "/ jnp.maximum(jnp.max(train_n), 1).astype(jnp.float32)" "/ jnp.maximum(jnp.sum(train_n), 1).astype(jnp.float32)" \
  "fed58: size availability p_i = n_i / sum n, not n_i / max n" "$F -k size"
mutate fedalf_jax/sim/federation.py "    return valid & (u >= p_drop)" "    return valid" \
  "fed58: dropout loses no upload" "$F -k dropout"
mutate fedalf_jax/sim/round.py "        w_raw = jnp.where(arrived, n_sel.astype(jnp.float32), 0.0)" "        w_raw = n_sel.astype(jnp.float32)" \
  "fed58: masked and dropped slots weigh in the aggregate" "$F -k numpy"
mutate fedalf_jax/sim/round.py "        any_arrived = jnp.any(arrived)" "        any_arrived = True" \
  "fed58: a round where nothing arrives moves the server state" "$F -k nothing_arrives"
mutate fedalf_jax/sim/round.py '            outs = outs._replace(state=_masked(arrived, outs.state, T.take(state.client_states, sel)))' \
  '            pass' "fed58: a client whose upload was lost keeps its new state" "$F -k lost"
mutate fedalf_jax/sim/round.py 'arrived=n_arr.astype(jnp.float32))' 'arrived=jnp.sum(fed["valid"]).astype(jnp.float32))' \
  "fed58: the arrived metric counts the sampled, not the arrived" "$F -k dropout"
mutate fedalf_jax/api.py "return federated_sampled(cfg.clients, cfg.clients_per_round, cfg.seed, rounds, cfg.availability," \
  "return federated_sampled(cfg.clients, cfg.clients_per_round, cfg.seed, rounds, 'always'," \
  "fed58: Result.sampled_clients replays uniform sampling under availability" "$F -k replay"
mutate fedalf_jax/config/config.py '    if av[0] in ("size", "labels") and (cfg.ldp != "none" or cfg.dp != "none"):' \
  '    if False:' "fed58: data-drawn availability accepted under a privacy mechanism" "$F -k bad_input"
mutate fedalf_jax/plugins/registry.py "with warnings.catch_warnings(), unwarned():" "with warnings.catch_warnings():" \
  "client56: the digest's silent build uses up the old fields' one line" "tests/test_local_training.py -k cli_gives"
# issue 58's second slice (labels "fed58b"): markov, trace and labels availability; participation and the report
R=tests/test_report_fairness.py
mutate fedalf_jax/sim/federation.py "        fresh = w < jnp.where(first, pi_on, q)" "        fresh = w < q" \
  "fed58b: markov's round 0 drawn from the refresh law, not the stationary one" "$F -k markov"
mutate fedalf_jax/sim/federation.py "            fresh = fresh ^ ((t - s) % 2 == 1)" "            fresh = fresh" \
  "fed58b: an anticorrelated markov chain (P_ON + P_OFF > 1) never flips" "$F -k markov"
mutate fedalf_jax/sim/federation.py "        return markov_on(av[1], av[2], seed_key, t, n)" "        return markov_on(av[1], av[2], key, t, n)" \
  "fed58b: markov chains drawn from the round's key, not the seed's" "$F -k markov"
mutate fedalf_jax/sim/federation.py "        return jax.lax.dynamic_index_in_dim(arr, jnp.asarray(t, jnp.int32), axis=1, keepdims=False)" \
  "        return jax.lax.dynamic_index_in_dim(arr, jnp.asarray(t, jnp.int32) + 1, axis=1, keepdims=False)" \
  "fed58b: a trace replayed one round late" "$F -k trace"
mutate fedalf_jax/sim/federation.py "    if rounds is not None and arr.shape[1] < int(rounds):" "    if False:" \
  "fed58b: a trace shorter than the run accepted" "$F -k bad_trace"
mutate fedalf_jax/sim/federation.py "        arr[i, a:b] = True" "        arr[i, a:b + 1] = True" \
  "fed58b: a CSV trace's interval includes its end round" "$F -k csv"
mutate fedalf_jax/sim/federation.py "        if not 0 <= i < num_clients:" "        if not 0 <= i:" \
  "fed58b: a CSV trace naming an unknown client accepted" "$F -k bad_csv"
mutate fedalf_jax/config/config.py '                d["availability_digest"] = trace_digest(self.availability[len("trace:"):])' \
  '                d["availability_digest"] = "same"' "fed58b: a changed trace file resumes as the same run" "$F -k identity"
mutate fedalf_jax/sim/federation.py "        p = classes.astype(jnp.float32) / jnp.maximum(jnp.max(classes), 1).astype(jnp.float32)" \
  "        p = classes.astype(jnp.float32) / jnp.maximum(jnp.sum(classes), 1).astype(jnp.float32)" \
  "fed58b: labels availability p_i = k_i / sum k, not k_i / max k" "$F -k labels"
mutate fedalf_jax/sim/federation.py "        mask.astype(jnp.int32))" "        jnp.ones_like(mask, jnp.int32))" \
  "fed58b: a client's padded rows count as classes it holds" "$F -k classes_held"
mutate fedalf_jax/sim/round.py "        sel = federated_sampled(n, cfg.clients_per_round, cfg.seed, rounds, cfg.availability, cfg.dropout, tn, cl," \
  "        sel = federated_sampled(n, cfg.clients_per_round, cfg.seed, rounds, 'always', cfg.dropout, tn, cl," \
  "fed58b: summary.json's participation replays uniform availability" "$F -k trace_replay"
mutate fedalf_jax/api.py "            tn, cl = client_facts(clients) if clients else (None, None)" "            tn, cl = None, None" \
  "fed58b: Result's replay of size/labels ignores the run folder's clients.json" "$F -k run_folder"
mutate fedalf_jax/reporting/tables.py "        out[\"variance\"].append(float(a.var()))" "        out[\"variance\"].append(float(a.std()))" \
  "fed58b: the report's variance across clients is their std" "$R"
mutate fedalf_jax/reporting/tables.py "        out[\"best10\"].append(float(np.sort(a)[-k:].mean()))" \
  "        out[\"best10\"].append(float(np.sort(a)[:k].mean()))" "fed58b: the report's best 10% is the worst 10%" "$R"
mutate fedalf_jax/reporting/figures.py "        x = np.concatenate([r.participation for r in rs]).astype(np.float64)" \
  "        x = np.concatenate([np.sort(r.participation) for r in rs]).astype(np.float64)" \
  "fed58b: the participation figure pairs clients' accuracies with others' counts" "$R"
mutate fedalf_jax/reporting/runs.py "    return np.asarray(rec, np.int64)" "    return None" \
  "fed58b: the report never reads summary.json's participation" "$R"
# stragglers (docs/federations.md): tests/test_stragglers.py
ST=tests/test_stragglers.py
mutate fedalf_jax/sim/client.py "                mask = mask & (e * ((n + batch_size - 1) // batch_size) + j < budget)" \
  "                pass" "strag58: a late client's epochs run past the deadline" "$ST -k facts"
mutate fedalf_jax/sim/client.py "                mask = mask & (k < budget)" "                pass" \
  "strag58: a late client's --local-steps run past the deadline" "$ST -k fewer_steps"
mutate fedalf_jax/sim/program.py "steps if budget is None else jnp.minimum(steps, budget)," "steps," \
  "strag58: facts.steps counts the steps the client did not take" "$ST -k facts"
mutate fedalf_jax/sim/round.py '        return None, {**fed, "arrived": fed["arrived"] & ~missed}, late' '        return None, fed, late' \
  "strag58: a dropped straggler's upload arrives" "$ST -k dropped"
mutate fedalf_jax/sim/round.py '    late = {"late": jnp.sum(missed).astype(jnp.float32),' '    late = {"late": jnp.sum(valid).astype(jnp.float32),' \
  "strag58: late counts every sampled client" "$ST -k facts"
mutate fedalf_jax/sim/stragglers.py "    if st[2]:" "    if False:" \
  "strag58: the per-round jitter ignored" "$ST -k law"
mutate fedalf_jax/sim/round.py "        if late is not None:  # a client past the deadline sent nothing" "        if False:  # a client past the deadline sent nothing" \
  "strag58: the participation replay counts dropped stragglers" "$ST -k dropped"
mutate fedalf_jax/sim/round.py '_fed(hp).get("dropout"))' 'None)' \
  "strag58: a sweep's runs all drop uploads at the first run's P" "$ST -k sweep"
mutate fedalf_jax/sim/round.py '_fed(hp).get("deadline", spec.deadline))' 'spec.deadline)' \
  "strag58: a sweep's runs all keep the first run's deadline" "$ST -k sweep"
# issue 58 item 7 (labels "priv58"): privacy stays exact under availability and dropout
P=tests/test_privacy_federations.py
mutate fedalf_jax/privacy/accounting.py '        return "non-uniform"' '        return "uniform"' \
  "priv58: availability accounted as uniform sampling, amplified at m/N" "$P -k q_1"
mutate fedalf_jax/privacy/accounting.py '    return sampling(cfg) != "non-uniform"' '    return sampling(cfg) == "uniform"' \
  "priv58: dropout alone loses its amplification in the round's noise" "$P -k dropout_alone_keeps"
mutate fedalf_jax/runner/build.py '                                     amplified=amplified(cfg))' '                                     amplified=True)' \
  "priv58: the round's noise calibrated with amplification under availability" "$P -k q_1"
mutate fedalf_jax/sim/round.py '            weights = jnp.where(arrived, 1.0 / n_sel.shape[0], 0.0).astype(jnp.float32)' '            pass' \
  "priv58: central DP averages over the arrived only (sensitivity 2·clip/k, not 2·clip/m)" "$P -k divides_by_m"
mutate fedalf_jax/privacy/accounting.py '        counts = sent_counts(cfg, rounds_done)' '        pass' \
  "priv58: local counts replayed as uniform sampling under availability" "$P -k really_sent"
mutate fedalf_jax/privacy/accounting.py '                            cfg.availability, 0.0).ravel()' \
  '                            cfg.availability, float(cfg.dropout)).ravel()' \
  "priv58: uploads lost to dropout not counted as released" "$P -k really_sent"
mutate fedalf_jax/privacy/accounting.py '        hi = t' '        hi = participation_bound(q, t)' \
  "priv58: the Binomial(T, m/N) bound stated under non-uniform availability" "$P -k really_sent"
mutate fedalf_jax/privacy/accounting.py '        eps = central_epsilon(z, m, n, t, cfg.delta, amplified=amp)' \
  '        eps = central_epsilon(z, m, n, t, cfg.delta)' "priv58: the q = 1 noise recorded at the amplified epsilon" "$P -k q_1"
mutate fedalf_jax/privacy/accounting.py '    return dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), rounds)' '    return dpa.GaussianDpEvent(z)' \
  "priv58: the unamplified Gaussian composed once, not every round" "$P -k q_1"
mutate fedalf_jax/privacy/guarantee.py '    if how == "non-uniform":' '    if False:' \
  "priv58: the guarantee under availability says amplified by sampling" "$P -k says_no_amplification"
mutate fedalf_jax/config/config.py '    if av[0] in ("size", "labels") and (cfg.ldp != "none" or cfg.dp != "none"):' \
  '    if False:' "priv58: data-drawn availability accepted under a privacy mechanism" "$P -k data_drawn"

# issue 58: the built-in servers that do not weigh by ServerIn.weights count only the arrived clients
M58=tests/test_federations_servers.py
# (F^q masked as well: an equivalent mutant in the round, whose missing Δ_i are already zeros; not listed)
mutate fedalf_jax/sim/algorithms.py "        h = jnp.where(s.arrived, h, 0.0)" "        h = h" \
  "mask58: qFedAvg's h sum counts the missing clients" "$M58"
mutate fedalf_jax/sim/algorithms.py "jnp.maximum(jnp.sum(s.arrived), 1).astype(jnp.float32)" "m" \
  "mask58: FedADMM's mean divides by m, not the arrived count" "$M58"
mutate fedalf_jax/sim/round.py "                    None if fed is None else arrived)" "                    None)" \
  "mask58: ServerIn.arrived never set in a federated round" "$M58"
mutate fedalf_jax/sim/algorithms.py "1.0 / jnp.where(h_sum > 0, h_sum, 1.0)" "1.0 / h_sum" \
  "mask58: qFedAvg divides by a zero h sum when nothing arrived" "$M58"

# issue 56 item 3: validating a central-DP config checks the budget without calibrating (label suite56)
mutate fedalf_jax/privacy/guarantee.py "A.check_central_budget(eps," "A.central_noise_multiplier(eps," \
  "suite56: validation calibrates central DP's noise" "tests/test_privacy_sampling.py -k validating"
exit $status
