#!/usr/bin/env bash
# The es_basic.py results of docs/es_basic.md: the default command (one core) on each environment and
# seed, one run after the other, each stopped after LIMIT seconds at most; then the final policy on
# 100 fresh episodes (--seed 1000), kept in the run's play.txt, and the run's row appended to
# docs/results/es_basic_solves.csv.
#   bash docs/bench/es_basic_solves.sh      # ENVS="CartPole-v1 LunarLander-v3" SEEDS="0 1 2" LIMIT=900
set -u
cd "$(dirname "$0")/../.."
out=runs/bench
mkdir -p "$out"
for env in ${ENVS:-CartPole-v1 LunarLander-v3}; do
  for seed in ${SEEDS:-0 1 2}; do
    log="$out/${env}_seed$seed.log"
    timeout -s TERM "${LIMIT:-900}" python es_basic.py --env "$env" --seed "$seed" --out-dir "$out" > "$log" 2>&1
    run=$(grep -m1 '^run directory:' "$log" | cut -d' ' -f3)
    [ -n "$run" ] || { echo "$env seed $seed made no run directory: see $log"; continue; }
    python es_basic.py --play "$run" --episodes 100 --seed 1000 | tee "$run/play.txt"
    python docs/bench/results_csv.py --append "$run"
  done
done
