# Sourced by the experiment scripts (seed_mlp500.sh, seed_cnn.sh, ablation.sh, ldp_study.sh, central_dp.sh):
# two functions, `sweep` and `keep`.
#
#   sweep OUT NAME [fedalf sweep options...]
#
# starts the sweep OUT/NAME with the given options, or, when OUT/NAME/sweep.json exists, resumes it from its
# last checkpoint (a finished sweep returns at once). On resume the options are those saved in sweep.json,
# except --rounds: a larger value than the sweep's extends its runs (`fedalf sweep --resume --rounds N`), a
# smaller one is refused (exit status 2, said in the log). Its output goes to OUT/NAME.log; a line
# "NAME rc=<exit status> <wall seconds> s" to OUT/times.txt. So a script of sweep calls can be killed at any
# time and run again to go on where it stopped. FEDALF is the command it runs (default .venv/bin/fedalf; it may
# hold arguments: FEDALF="python -m fedalf_jax.cli").
#
# Ctrl-C, SIGTERM or SIGHUP to the script (or to the shell running `sweep`) is passed on once, as SIGTERM, to
# the running `fedalf sweep`, which saves its runs after the round in flight and exits; the shell then
# exits too (status 143) instead of going on to the next sweep. (The sweep runs as a background job that
# the shell waits for, since a shell only runs its traps between commands, and in a session of its own
# (setsid, where there is one), so that a terminal's Ctrl-C reaches the shell alone and the sweep gets one
# signal, not two: a second one would make it leave at once.)
_SWEEP_OWN_SESSION=$(command -v setsid || true)
sweep() {
  local out=$1 name=$2 s rc prev= a rounds=() pid
  shift 2
  s=$(date +%s)
  mkdir -p "$out"
  if [ -f "$out/$name/sweep.json" ]; then
    for a in "$@"; do [ "$prev" = --rounds ] && rounds=(--rounds "$a"); prev=$a; done
    $_SWEEP_OWN_SESSION ${FEDALF:-.venv/bin/fedalf} sweep --resume --out "$out/$name" "${rounds[@]}" --no-progress >> "$out/$name.log" 2>&1 &
  else
    $_SWEEP_OWN_SESSION ${FEDALF:-.venv/bin/fedalf} sweep "$@" --out "$out/$name" --no-progress > "$out/$name.log" 2>&1 &
  fi
  pid=$!
  _SWEEP_STOPPING=
  trap 'kill -TERM '"$pid"' 2>/dev/null; _SWEEP_STOPPING=1' INT TERM HUP
  rc=0; wait "$pid" || rc=$?
  while kill -0 "$pid" 2>/dev/null; do rc=0; wait "$pid" || rc=$?; done  # a trap ended the wait: wait again
  trap - INT TERM HUP
  echo "$name rc=$rc $(( $(date +%s) - s )) s" >> "$out/times.txt"
  if [ -n "$_SWEEP_STOPPING" ]; then
    echo "$name: stopped by a signal (rc=$rc); run the same command again to resume" >> "$out/$name.log"
    exit 143
  fi
  return $rc
}

#   keep OUT NAME DEST
#
# copies the small files of each run of the sweep OUT/NAME (config.json, metrics.csv, summary.json; no
# checkpoints) to DEST/NAME/<run>/, where `fedalf report DEST` regenerates its tables and figures; a file it
# cannot copy (a run that has not ended has no summary.json) makes it return 1.
keep() {
  local out=$1 name=$2 dest=$3 d to
  for d in "$out/$name"/*/; do
    to=$dest/$name/$(basename "$d")
    mkdir -p "$to" && cp "$d/config.json" "$d/metrics.csv" "$d/summary.json" "$to/" || return 1
  done
}
