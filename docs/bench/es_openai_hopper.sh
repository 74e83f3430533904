#!/usr/bin/env bash
# Hopper-v5's Table 3 anchor of docs/es_openai.md (3403.46 within 31.6 M env steps), one seed after
# the other on all cores: each run stops when a 5-episode evaluation reaches the target, or is sent
# SIGTERM (which leaves a checkpoint) once its progress.csv passes the paper's 31.6 M steps, or
# after LIMIT seconds; then the final policy plays 20 fresh episodes (kept in its play.txt), and the
# run is appended to docs/results/es_openai_mujoco.csv, its variant the TAG.
#   SEEDS="0 1 2" FLAGS="--sigma 0.02 --alpha 0.01" TAG=sigma0.02 bash docs/bench/es_openai_hopper.sh
set -u
cd "$(dirname "$0")/../.."
seeds=${SEEDS:-"0 1 2"}
flags=${FLAGS:-}
tag=${TAG:-preset}
limit=${LIMIT:-3600}
cap=${CAP:-31600000}
mkdir -p runs/bench
for seed in $seeds; do
  log="runs/bench/es_openai_Hopper-v5_seed${seed}_$tag.log"
  # shellcheck disable=SC2086
  timeout -s TERM "$limit" python es_openai.py --env Hopper-v5 --seed "$seed" $flags \
    --out-dir runs/bench > "$log" 2>&1 &
  pid=$!
  run=""
  while kill -0 "$pid" 2>/dev/null; do
    sleep 10
    [ -z "$run" ] && run=$(grep -m1 '^run directory:' "$log" | cut -d' ' -f3)
    if [ -n "$run" ] && [ -f "$run/progress.csv" ]; then
      steps=$(tail -n 1 "$run/progress.csv" | cut -d, -f3)
      if [[ "$steps" =~ ^[0-9]+$ ]] && [ "$steps" -ge "$cap" ]; then
        echo "stopped at $steps env steps (cap $cap)" >> "$log"
        kill -TERM "$pid"    # timeout passes the signal on to es_openai.py
        wait "$pid"
        break
      fi
    fi
  done
  wait "$pid" 2>/dev/null
  [ -z "$run" ] && run=$(grep -m1 '^run directory:' "$log" | cut -d' ' -f3)
  [ -n "$run" ] || { echo "seed $seed made no run directory: see $log"; continue; }
  python es_openai.py --play "$run" --episodes 20 --seed 1000 2>/dev/null | tee "$run/play.txt"
  python docs/bench/results_csv.py --append "$run" --variant "$tag"
done
