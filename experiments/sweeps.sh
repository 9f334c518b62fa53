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
# time and run again to go on where it stopped.
sweep() {
  local out=$1 name=$2 s rc prev= a rounds=()
  shift 2
  s=$(date +%s)
  mkdir -p "$out"
  if [ -f "$out/$name/sweep.json" ]; then
    for a in "$@"; do [ "$prev" = --rounds ] && rounds=(--rounds "$a"); prev=$a; done
    .venv/bin/fedalf sweep --resume --out "$out/$name" "${rounds[@]}" --no-progress >> "$out/$name.log" 2>&1
  else
    .venv/bin/fedalf sweep "$@" --out "$out/$name" --no-progress > "$out/$name.log" 2>&1
  fi
  rc=$?
  echo "$name rc=$rc $(( $(date +%s) - s )) s" >> "$out/times.txt"
  return $rc
}

#   keep OUT NAME DEST
#
# copies the small files of each run of the sweep OUT/NAME (config.json, metrics.csv, summary.json; no
# checkpoints) to DEST/NAME/<run>/, where `fedalf report DEST` regenerates its tables and figures.
keep() {
  local out=$1 name=$2 dest=$3 d to
  for d in "$out/$name"/*/; do
    to=$dest/$name/$(basename "$d")
    mkdir -p "$to" && cp "$d/config.json" "$d/metrics.csv" "$d/summary.json" "$to/"
  done
}
