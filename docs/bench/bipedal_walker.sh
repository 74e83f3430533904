#!/usr/bin/env bash
# The BipedalWalker-v3 benchmark of docs/results/README.md: the default command for seeds 0, 1, 2, one
# after the other on all cores, each stopped after 30 minutes at most (SIGTERM leaves a
# checkpoint), then the final policy evaluated on 100 episodes (kept in its play.txt) and the run
# appended to docs/results/ars_bipedalwalker.csv, its variant the TAG.
#   bash docs/bench/bipedal_walker.sh [seconds per seed, default 1800]   (SEEDS="0 1 2" by default)
# FLAGS adds flags to every training command and TAG names the folder under runs/ (default bench):
#   SEEDS="6 4" FLAGS="--nu 0.05" TAG=nu0.05 bash docs/bench/bipedal_walker.sh
set -u
cd "$(dirname "$0")/../.."
limit=${1:-1800}
out=runs/${TAG:-bench}
mkdir -p "$out"
for seed in ${SEEDS:-0 1 2}; do
  timeout -s TERM "$limit" python ars.py --env BipedalWalker-v3 --seed "$seed" ${FLAGS:-} --out-dir "$out" \
    > "$out/bipedal_seed$seed.log" 2>&1
  run=$(grep -m1 '^run directory:' "$out/bipedal_seed$seed.log" | cut -d' ' -f3)
  [ -n "$run" ] || { echo "seed $seed made no run directory: see $out/bipedal_seed$seed.log"; continue; }
  python ars.py --play "$run" --episodes 100 --seed 1000 | tee "$run/play.txt"
  python docs/bench/results_csv.py --append "$run" --variant "${TAG:-}"
done
