#!/usr/bin/env bash
# Issue #15: LDP-FedALF variants at epsilon = 2, FMNIST MLP, 200 rounds (docs/lab/results.md §5).
# Each variant is one sweep in runs/ldp-study/<name> (killed: run it again to resume); `fedalf report runs/ldp-study` tabulates them.
set -uo pipefail
cd "$(dirname "$0")/.."
. experiments/sweeps.sh  # sweep OUT NAME options: starts it, or resumes it if it exists
C="--algorithm fedalf --model mlp --ldp adaptive --epsilon 2 --rounds 200 --eval-every 10"
run() { name=$1; shift; sweep runs/ldp-study "$name" $C "$@"; }
if [ "${FIVE_SEEDS:-0}" != 1 ] && [ "${FRONTIER:-0}" != 1 ] && [ "${PAPER:-0}" != 1 ] && [ "${TAU:-0}" != 1 ]; then  # the 2-3 seed study (FIVE_SEEDS=1, FRONTIER=1, PAPER=1, TAU=1: only the runs below)
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
fi
# five seeds (issue 15's closing table): the default and the two runners-up, pat1 and pat2, at eta_g 1.
# A folder "<variant>.<suffix>" adds seeds to <variant> (ldp_study_table.py joins them).
if [ "${FIVE_SEEDS:-0}" = 1 ]; then
run B_update_denoised_model.s34 --partition pat1 pat2 --server-lr 1.0 --seeds 3 4
run D_update_denoised_perturbed.s234 --partition pat1 --server-lr 1.0 --seeds 2 3 4 --server-target increment --dual-from perturbed
run D_update_denoised_perturbed.pat2 --partition pat2 --server-lr 1.0 --seeds 0 1 2 3 4 --server-target increment --dual-from perturbed
run F_weights_denoised_model.s234 --partition pat1 --server-lr 1.0 --seeds 2 3 4 --ldp-on weights
run F_weights_denoised_model.pat2 --partition pat2 --server-lr 1.0 --seeds 0 1 2 3 4 --ldp-on weights
fi
# the frontier (issue 15 item 6): the default variant at other budgets, pat1, 3 seeds (epsilon 2: the runs above)
if [ "${FRONTIER:-0}" = 1 ]; then
run B_update_denoised_model.frontier --partition pat1 --server-lr 1.0 --seeds 0 1 2 --epsilon 0.5 1 4 8
fi
# the frontier's non-private levels (same settings, no mechanism), 3 seeds
if [ "${FRONTIER:-0}" = 1 ]; then
run nonprivate_fedalf_fedavg --partition pat1 --seeds 0 1 2 --algorithm fedalf fedavg --ldp none
fi
# the paper's reading (--ldp-on weights): other server steps (eta_g 1: the five seeds above), and its
# frontier at the default's eta_g 1 (epsilon 2: the five seeds above), pat1
if [ "${PAPER:-0}" = 1 ]; then
run F_weights_denoised_model.eta --partition pat1 --server-lr 0.25 0.5 --seeds 0 1 --ldp-on weights
run F_weights_denoised_model.eta2 --partition pat1 --server-lr 2.0 4.0 --seeds 0 1 --ldp-on weights
run F_weights_denoised_model.frontier --partition pat1 --server-lr 1.0 --seeds 0 1 2 --epsilon 0.5 1 4 8 --ldp-on weights
fi
# the history rows kept for fewer or more rounds under noise (--history-tau; the default's tau is M/m = 10
# once every client has been seen; history off is G above), the default variant, pat1, 2 seeds
if [ "${TAU:-0}" = 1 ]; then
run I_update_denoised_model_tau --partition pat1 --server-lr 1.0 --seeds 0 1 --history-tau 2 5
run I_update_denoised_model_tau.long --partition pat1 --server-lr 1.0 --seeds 0 1 --history-tau 20
fi
