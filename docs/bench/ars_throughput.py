"""Throughput of ars.py against a bare env.step loop, and its speed-up from 1 to 2 workers.

    python docs/bench/ars_throughput.py --env HalfCheetah-v5 --iterations 10 --repeats 5

Prints one Markdown table row per repetition and their medians. Run it on a quiet machine: each
repetition measures the bare loop, 1 worker and 2 workers one after the other, so that a slow
minute of a shared machine hits all three; the medians of the ratios are the figures to report.
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import ars  # noqa: E402
import numpy as np  # noqa: E402


def bare_loop(env_id: str, episodes: int, seed: int = 0) -> float:
    """env.step steps per second with precomputed random actions, resets included."""
    env = ars.make_env(env_id, None)
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


def ars_training(env_id: str, workers: int, iterations: int, n_directions: int) -> float:
    """Training env steps per second of ars.py (rollouts, update and statistics; evaluation excluded)."""
    with tempfile.TemporaryDirectory() as out:
        args = ars.resolve_config(ars.build_parser().parse_args(
            ["--env", env_id, "--iterations", str(iterations), "--n-directions", str(n_directions),
             "--top-b", str(n_directions), "--workers", str(workers), "--eval-every", str(10**6),
             "--eval-episodes", "1", "--out-dir", out]))
        devnull, sys.stdout = sys.stdout, open(os.devnull, "w")
        try:
            ars.train(args)
        finally:
            sys.stdout.close()
            sys.stdout = devnull
        rows = ars.read_csv_rows(os.path.join(out, os.listdir(out)[0], "progress.csv"))
    steps = np.array([float(r[2]) for r in rows])
    per_iteration = np.diff(np.r_[0.0, steps])[1:]  # the first iteration also creates each worker's environment
    train_time = per_iteration / np.array([float(r[10]) for r in rows[1:]])
    return per_iteration.sum() / train_time.sum()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--n-directions", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    print("| repetition | bare env.step loop (steps/s, 1 core) | ars.py, 1 worker | per-core ratio | ars.py, 2 workers | speed-up 1 -> 2 |")
    print("|---|---|---|---|---|---|")
    table = []
    for r in range(a.repeats):
        bare = bare_loop(a.env, episodes=4 * a.n_directions)
        one = ars_training(a.env, 1, a.iterations, a.n_directions)
        two = ars_training(a.env, 2, a.iterations, a.n_directions)
        table.append((bare, one, one / bare, two, two / one))
        print(f"| {r + 1} | {bare:,.0f} | {one:,.0f} | {one / bare:.2f} | {two:,.0f} | {two / one:.2f}x |", flush=True)
    bare, one, ratio, two, speedup = np.median(np.array(table), axis=0)
    print(f"| median ({a.env}) | {bare:,.0f} | {one:,.0f} | {ratio:.2f} | {two:,.0f} | {speedup:.2f}x |")


if __name__ == "__main__":
    main()
