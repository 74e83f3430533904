#!/usr/bin/env bash
# Episodes to the ARS paper's thresholds on the v5 MuJoCo tasks (docs/results/README.md):
# each preset with --target-return, seeds 0, 1, 2, on all cores, each run stopped after
# LIMIT seconds at most (SIGTERM leaves a checkpoint), then appended to docs/results/ars_mujoco.csv,
# its variant the TAG.
#   bash docs/bench/mujoco_thresholds.sh [LIMIT, default 600] [ENV ...]
# SEEDS picks the seeds (default "0 1 2"), FLAGS adds flags to every run and TAG names the folder
# under runs/ (default bench):
#   SEEDS="0 1 2 3" FLAGS="--actions raw" TAG=raw bash docs/bench/mujoco_thresholds.sh 600 Hopper-v5
# Evaluations average the presets' 10 episodes; the paper's average 100, which FLAGS="--eval-episodes 100"
# gives (docs/results/README.md, "Episodes to the paper's thresholds (MuJoCo v5)").
set -u
cd "$(dirname "$0")/../.."
limit=${1:-600}
shift || true
envs=${*:-Swimmer-v5 HalfCheetah-v5 Hopper-v5}
declare -A target=([Swimmer-v5]=325 [Hopper-v5]=3120 [HalfCheetah-v5]=3430)
out=runs/${TAG:-bench}
mkdir -p "$out"
for env in $envs; do
  [ -n "${target[$env]:-}" ] || { echo "no threshold known for $env (Swimmer-v5, HalfCheetah-v5, Hopper-v5)"; exit 2; }
  for seed in ${SEEDS:-0 1 2}; do
    timeout -s TERM "$limit" python ars.py --env "$env" --seed "$seed" --target-return "${target[$env]}" \
      ${FLAGS:-} --out-dir "$out" > "$out/${env}_seed$seed.log" 2>&1
    tail -n 1 "$out/${env}_seed$seed.log"
    run=$(grep -m1 '^run directory:' "$out/${env}_seed$seed.log" | cut -d' ' -f3)
    [ -n "$run" ] && python docs/bench/results_csv.py --append "$run" --variant "${TAG:-}"
  done
done
