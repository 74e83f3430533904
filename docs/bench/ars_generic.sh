#!/usr/bin/env bash
# ars.py's generic defaults on tasks with no preset (docs/results/README.md, "Tasks with no preset: the
# generic defaults"): `python ars.py --env E --seed S --target-return T --workers 2`, no other
# flag, seeds 0, 1, 2 one after the other, each run appended to docs/results/ars_generic.csv.
#   bash docs/bench/ars_generic.sh [ENV ...]   (default: all three below)
# SEEDS picks the seeds (default "0 1 2"); the run directories go to runs/generic/.
set -u
cd "$(dirname "$0")/../.."
envs=${*:-LunarLanderContinuous-v3 MountainCarContinuous-v0 Pendulum-v1}
declare -A target=([LunarLanderContinuous-v3]=200 [MountainCarContinuous-v0]=90 [Pendulum-v1]=-200)
out=runs/generic
mkdir -p "$out"
for env in $envs; do
  [ -n "${target[$env]:-}" ] || { echo "ars_generic.sh: error: no target known for $env" >&2; exit 2; }
  for seed in ${SEEDS:-0 1 2}; do
    log="$out/${env}_seed$seed.log"
    python ars.py --env "$env" --seed "$seed" --target-return "${target[$env]}" --workers 2 \
      --out-dir "$out" > "$log" 2>&1
    tail -n 1 "$log"
    run=$(grep -m1 '^run directory:' "$log" | cut -d' ' -f3)
    [ -n "$run" ] && python docs/bench/results_csv.py --append "$run"
  done
done
