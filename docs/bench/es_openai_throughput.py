"""Throughput of es_openai.py against bare env.step loops, and its speed-up from 1 to 2 workers.

    python docs/bench/es_openai_throughput.py --env HalfCheetah-v5 --iterations 6 --repeats 5

Each repetition runs 6 generations of es_openai.py (population 40, no evaluation) with one
worker on one core while, on the other core, a bare loop replays the very episodes of that
training (reset seeds and actions recorded once from a training with the same seed): the
per-core ratio compares the two over the same seconds, and the cores swap every repetition.
Then, one after the other: a bare loop with random actions, the replay loop alone, the replay
split over 2 processes, and es_openai.py with 1 and 2 workers. Training steps per second leave
out the first generation, which also creates each worker's environments. Last, the mean
per-step cost of the policy and of env.step as the workers measured them. How and why:
docs/bench/replay.py.
"""
import argparse
import csv
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import es_openai as eo  # noqa: E402
import numpy as np  # noqa: E402
from replay import measure  # noqa: E402


def es_training(env_id: str, workers: int, iterations: int, population: int) -> tuple:
    """Training env steps per second of es_openai.py (rollouts and update, evaluation excluded),
    and the workers' mean per-step policy and env.step times in microseconds."""
    with tempfile.TemporaryDirectory() as out:
        args = eo.resolve_config(eo.build_parser().parse_args(
            ["--env", env_id, "--iterations", str(iterations), "--population", str(population),
             "--workers", str(workers), "--eval-every", str(10**6), "--eval-episodes", "1",
             "--noise-size", "10000000", "--out-dir", out]))
        devnull, sys.stdout = sys.stdout, open(os.devnull, "w")
        try:
            eo.train(args)
        finally:
            sys.stdout.close()
            sys.stdout = devnull
        with open(os.path.join(out, os.listdir(out)[0], "progress.csv")) as f:
            rows = list(csv.DictReader(f))
    rows = rows[1:]  # the first generation also creates each worker's environment
    steps = sum(float(r["timesteps_this_gen"]) for r in rows)
    seconds = sum(float(r["time_gen_s"]) for r in rows)
    policy = np.mean([float(r["time_policy_us_mean"]) for r in rows])
    env = np.mean([float(r["time_env_us_mean"]) for r in rows])
    return steps / seconds, policy, env


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--population", type=int, default=40)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    costs = []

    def training(workers: int) -> float:
        rate, policy_us, env_us = es_training(a.env, workers, a.iterations, a.population)
        if workers == 1:
            costs.append((policy_us, env_us, env_us / (1e6 / rate)))
        return rate

    measure(eo, "es_openai.py", a.env, training, a.repeats, random_episodes=a.population)
    policy_us, env_us, share = np.median(np.array(costs[1:]), axis=0)  # costs[0]: the recording run
    print(f"\nper step, 1 worker (medians): policy {policy_us:.1f} us, env.step {env_us:.1f} us "
          f"(env.step is {share:.0%} of the worker's time)")


if __name__ == "__main__":
    main()
