#!/usr/bin/env bash
# Issue #15: LDP-FedALF variants at epsilon = 2, FMNIST MLP, 200 rounds (docs/results.md §5).
# Each variant is one sweep in runs/ldp-study/<name>; `fedalf report runs/ldp-study` tabulates them.
set -uo pipefail
cd "$(dirname "$0")/.."
C="--algorithm fedalf --model mlp --ldp adaptive --epsilon 2 --rounds 200 --eval-every 10 --no-progress"
run() { name=$1; shift; s=$(date +%s); .venv/bin/fedalf sweep $C "$@" --out "runs/ldp-study/$name" \
          > "runs/ldp-study/$name.log" 2>&1; echo "$name rc=$? $(( $(date +%s) - s )) s" >> runs/ldp-study/times.txt; }
mkdir -p runs/ldp-study
# the default: noise on the update, denoised length, model upload (dual on the client)
run B_update_denoised_model --partition pat1 pat2 --server-lr 0.5 1.0 --seeds 0 1 2
# one change at a time from the default, pat1, at the default's server step, 2 seeds
run C_update_raw_model --partition pat1 --server-lr 1.0 --seeds 0 1 --fair-norm raw
run F_weights_denoised_model --partition pat1 --server-lr 1.0 --seeds 0 1 --ldp-on weights
# a larger server step, and the history rows off (each keeps a noisy row for τ rounds)
run E_update_denoised_model_eta2 --partition pat1 --server-lr 2.0 --seeds 0 1
run G_update_denoised_model_nohistory --partition pat1 --server-lr 1.0 --seeds 0 1 --history off
run D_update_denoised_perturbed --partition pat1 --server-lr 1.0 --seeds 0 1 --server-target increment --dual-from perturbed
# the raw length at a larger step, and the raw length on pat2
run H_update_raw_model_eta2 --partition pat1 --server-lr 2.0 --seeds 0 1 --fair-norm raw
run C2_update_raw_model_pat2 --partition pat2 --server-lr 1.0 --seeds 0 1 --fair-norm raw
run E2_update_denoised_model_eta2_pat2 --partition pat2 --server-lr 2.0 --seeds 0 1
