#!/usr/bin/env bash
# The training runs of docs/results/: SCRIPT on ENV for each seed, one run after the other on all
# cores, each stopped after SECONDS at most (a SIGTERM: the run keeps a checkpoint) or, with STEPS,
# once its progress.csv passes that many env steps; with PLAY=K the final policy then plays K fresh
# episodes (--seed 1000, kept in the run's play.txt); then the run's row goes to docs/results/ and
# its learning curve to docs/results/curves/ (results_csv.py --append, the TAG as its variant).
#   bash docs/bench/runs.sh SCRIPT ENV [SECONDS, default 1800] [FLAG ...]
#   SEEDS="0 1 2" TAG=avx512 PLAY=100 bash docs/bench/runs.sh ars.py BipedalWalker-v3
#   SEEDS="0 1" TAG=topb8 bash docs/bench/runs.sh ars.py BipedalWalker-v3 2400 --top-b 8
# The run directories and logs go to runs/TAG/ (default runs/bench/).
set -u
[ $# -ge 2 ] || { echo "usage: bash docs/bench/runs.sh SCRIPT ENV [SECONDS] [FLAG ...]" >&2; exit 2; }
cd "$(dirname "$0")/../.."
script=$1 env=$2 limit=${3:-1800}
shift $(($# < 3 ? $# : 3))
out=runs/${TAG:-bench}
mkdir -p "$out"
for seed in ${SEEDS:-0 1 2}; do
  log="$out/${env}__${script%.py}__$seed.log"
  timeout -s TERM "$limit" python "$script" --env "$env" --seed "$seed" "$@" --out-dir "$out" \
    > "$log" 2>&1 &
  pid=$!
  while [ -n "${STEPS:-}" ] && kill -0 "$pid" 2> /dev/null; do
    sleep 10
    run=$(grep -m1 '^run directory:' "$log" | cut -d' ' -f3)
    steps=$(tail -n 1 "$run/progress.csv" 2> /dev/null | cut -d, -f3)
    if [[ "$steps" =~ ^[0-9]+$ ]] && [ "$steps" -ge "$STEPS" ]; then
      kill -TERM "$pid" 2> /dev/null  # timeout passes it on to the script
      break
    fi
  done
  wait "$pid"
  tail -n 1 "$log"
  run=$(grep -m1 '^run directory:' "$log" | cut -d' ' -f3)
  [ -n "$run" ] || { echo "seed $seed made no run directory: see $log"; continue; }
  if [ "${PLAY:-0}" -gt 0 ]; then
    python "$script" --play "$run" --episodes "$PLAY" --seed 1000 2> /dev/null | tee "$run/play.txt"
  fi
  python docs/bench/results_csv.py --append "$run" --variant "${TAG:-}"
done
