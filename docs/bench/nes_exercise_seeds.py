"""The teacher's solution of the class exercise with the handout's defaults, one seed after the
other: its last line (the 100-episode mean of the trained mean policy), its log (the mean return
of every iteration, separated by spaces) and the wall time of the whole command, a row of
docs/results/nes_exercise.csv each.

    python docs/bench/nes_exercise_seeds.py              # seeds 0-9, the defaults
    python docs/bench/nes_exercise_seeds.py --seeds 3 5  # some seeds
"""

import argparse
import os
import re
import subprocess
import sys
import time

from results_csv import ROOT, append, machine

SOLUTION = os.path.join(ROOT, "docs", "teacher", "nes_exercise_solution.py")
COLUMNS = (
    "script env seed iterations pairs sigma alpha workers return_mean return_std episodes "
    "reached wall_time_s processor simd cores date commit log_returns"
).split()


def defaults() -> dict:
    """The exercise's defaults, from its --help."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import nes_runner

    p = nes_runner.build_parser()
    return {key: p.get_default(key) for key in ("iterations", "pairs", "sigma", "alpha", "workers")}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    seeds = p.parse_args().seeds
    for seed in seeds:
        t0 = time.perf_counter()
        out = subprocess.run(
            [sys.executable, SOLUTION, "--seed", str(seed)], capture_output=True, text=True
        )
        seconds = time.perf_counter() - t0
        last = re.search(r"mean policy: (\S+) \+- (\S+) over (\d+) episodes", out.stdout)
        if out.returncode != 0 or last is None:
            sys.exit(f"seed {seed}: exit status {out.returncode}: {out.stderr.strip()}")
        mean = float(last.group(1))
        log = re.findall(r"iteration +\d+: mean return +(\S+)", out.stdout)  # iterations 0, 1, ...
        row = dict(script="nes_exercise.py", env="CartPole-v1", seed=seed, **defaults())
        row.update(return_mean=mean, return_std=float(last.group(2)), episodes=last.group(3))
        row.update(reached=mean >= 475.0, wall_time_s=round(seconds, 2), **machine())
        row.update(log_returns=" ".join(log))
        append("nes_exercise.csv", [row], COLUMNS)
        print(f"seed {seed}: mean policy {mean:.1f} over 100 episodes, {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main()
