#!/usr/bin/env bash
# The Table 3 anchors of docs/es_openai.md: each preset's default command for seeds 0, 1, 2, one
# after the other on all cores, stopped when a 5-episode evaluation reaches the preset's target
# (TRPO's score after 5M steps) or after the given seconds; then the final policy on 20 episodes
# (kept in its play.txt), and the run appended to docs/results/es_openai_mujoco.csv, its variant the TAG.
#   bash docs/bench/es_openai_table3.sh "HalfCheetah-v5 Swimmer-v5" [seconds per run, default 1200]
# SEEDS picks the seeds (default "0 1 2") and TAG the folder under runs/ (default bench):
#   SEEDS="0 1 2 3 4 5 6 7 8" TAG=avx512 bash docs/bench/es_openai_table3.sh Swimmer-v5 600
set -u
cd "$(dirname "$0")/../.."
envs=${1:-"HalfCheetah-v5 Swimmer-v5"}
limit=${2:-1200}
out=runs/${TAG:-bench}
mkdir -p "$out"
for env in $envs; do
  for seed in ${SEEDS:-0 1 2}; do
    log="$out/es_openai_${env}_seed$seed.log"
    timeout -s TERM "$limit" python es_openai.py --env "$env" --seed "$seed" --out-dir "$out" > "$log" 2>&1
    run=$(grep -m1 '^run directory:' "$log" | cut -d' ' -f3)
    [ -n "$run" ] || { echo "$env seed $seed made no run directory: see $log"; continue; }
    python es_openai.py --play "$run" --episodes 20 --seed 1000 2>/dev/null | tee "$run/play.txt"
    python docs/bench/results_csv.py --append "$run" --variant "${TAG:-}"
  done
done
