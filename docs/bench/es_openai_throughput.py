"""Throughput of es_openai.py against a bare env.step loop, and its speed-up from 1 to 2 workers.

    python docs/bench/es_openai_throughput.py --env HalfCheetah-v5 --iterations 6 --repeats 5

Prints one Markdown table row per repetition and their medians, then the mean per-step cost of
the policy and of env.step as the workers measured them. Run it on a quiet machine: each
repetition measures the bare loop, 1 worker and 2 workers one after the other, so that a slow
minute of a shared machine hits all three; the medians of the ratios are the figures to report.
"""
import argparse
import csv
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import es_openai as eo  # noqa: E402
import numpy as np  # noqa: E402


def bare_loop(env_id: str, episodes: int, seed: int = 0) -> float:
    """env.step steps per second with precomputed random actions, resets included."""
    env = eo.make_env(env_id, None)
    rng = np.random.default_rng(seed)
    low, high = env.action_space.low, env.action_space.high
    actions = rng.uniform(low, high, size=(4096, *low.shape))
    steps, t0 = 0, time.perf_counter()
    for e in range(episodes):
        env.reset(seed=seed + e)
        while True:
            _, _, terminated, truncated, _ = env.step(actions[steps % 4096])
            steps += 1
            if terminated or truncated:
                break
    return steps / (time.perf_counter() - t0)


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
    print("| repetition | bare env.step loop (steps/s, 1 core) | es_openai.py, 1 worker | per-core ratio | "
          "es_openai.py, 2 workers | speed-up 1 -> 2 |")
    print("|---|---|---|---|---|---|")
    table, costs = [], []
    for r in range(a.repeats):
        bare = bare_loop(a.env, episodes=a.population)
        one, policy_us, env_us = es_training(a.env, 1, a.iterations, a.population)
        two, _, _ = es_training(a.env, 2, a.iterations, a.population)
        table.append((bare, one, one / bare, two, two / one))
        costs.append((policy_us, env_us))
        print(f"| {r + 1} | {bare:,.0f} | {one:,.0f} | {one / bare:.2f} | {two:,.0f} | {two / one:.2f}x |", flush=True)
    bare, one, ratio, two, speedup = np.median(np.array(table), axis=0)
    print(f"| median ({a.env}) | {bare:,.0f} | {one:,.0f} | {ratio:.2f} | {two:,.0f} | {speedup:.2f}x |")
    policy_us, env_us = np.median(np.array(costs), axis=0)
    print(f"\nper step, 1 worker: policy {policy_us:.1f} us, env.step {env_us:.1f} us "
          f"(env.step is {env_us / (1e6 / one):.0%} of the worker's time)")


if __name__ == "__main__":
    main()
