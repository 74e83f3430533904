#!/usr/bin/env bash
# The BipedalWalker-v3 benchmark of docs/ars.md: the default command for seeds 0, 1, 2, one
# after the other on all cores, each stopped after 30 minutes at most (SIGTERM leaves a
# checkpoint), then the final policy evaluated on 100 episodes.
#   bash docs/bench/bipedal_walker.sh [seconds per seed, default 1800]   (SEEDS="0 1 2" by default)
set -u
cd "$(dirname "$0")/../.."
limit=${1:-1800}
mkdir -p runs/bench
for seed in ${SEEDS:-0 1 2}; do
  timeout -s TERM "$limit" python ars.py --env BipedalWalker-v3 --seed "$seed" --out-dir runs/bench \
    > "runs/bench/bipedal_seed$seed.log" 2>&1
  run=$(grep -m1 '^run directory:' "runs/bench/bipedal_seed$seed.log" | cut -d' ' -f3)
  python ars.py --play "$run" --episodes 100 --seed 1000 | tee -a "runs/bench/bipedal_seed$seed.log"
done
python docs/bench/summarize.py runs/bench/BipedalWalker-v3__ars__*
