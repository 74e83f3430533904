#!/usr/bin/env bash
# The LunarLander-v3 benchmark of docs/es_basic.md: the default command (serial, one core) for
# the given seeds, one after the other, each stopped after 15 minutes at most, then the final
# policy evaluated on 100 fresh episodes. Two invocations can run side by side on 2 cores.
#   bash docs/bench/lunar_lander.sh [seconds per seed, default 900] [seeds, default "0 1 2"]
set -u
cd "$(dirname "$0")/../.."
limit=${1:-900}
seeds=${2:-"0 1 2"}
mkdir -p runs/bench
for seed in $seeds; do
  timeout -s TERM "$limit" python es_basic.py --env LunarLander-v3 --seed "$seed" --out-dir runs/bench \
    > "runs/bench/lunar_seed$seed.log" 2>&1
  run=$(grep -m1 '^run directory:' "runs/bench/lunar_seed$seed.log" | cut -d' ' -f3)
  python es_basic.py --play "$run" --episodes 100 --seed 1000 | tee -a "runs/bench/lunar_seed$seed.log"
done
