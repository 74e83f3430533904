"""Training throughput of two versions of ars.py or es_openai.py, interleaved: steps/s with 1 and
with 2 workers, and with 1 worker over a bare env.step loop timed in the same repetition.

    git worktree add ../old 8f57846
    python docs/bench/old_new.py ../old/ars.py ars.py --env HalfCheetah-v5 --repeats 5
    python docs/bench/old_new.py ../old/es_openai.py es_openai.py --env HalfCheetah-v5 --repeats 5

Each repetition runs, one after the other: a bare loop (env.step with actions drawn beforehand,
10 episodes of the environment's seeds 0-9), the first script with 1 worker, the second with 1,
the first with 2, the second with 2; every other repetition runs the second script first (ars.py:
10 iterations of N = b = 8 directions; es_openai.py: 6 generations of 40 episodes, a table of 10
million numbers; no evaluation).
A run's rate is the median of the steps_per_s column (the training part of an iteration)
over iterations 2 and later; its whole-process time, the seconds from start to exit (imports,
environments, the noise table, the workers' start and stop included). Prints each repetition,
then the medians and the medians of the paired ratios new / old; every timed run becomes two rows
of docs/results/throughput.csv (steps/s, and s for the whole process), each script named with its
commit.
"""

import argparse
import contextlib
import csv
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

import gymnasium as gym
import numpy as np
from results_csv import THROUGHPUT, append, machine

FLAGS = {
    "ars.py": ["--iterations", "10", "--n-directions", "8", "--top-b", "8"],
    "es_openai.py": ["--iterations", "6", "--population", "40", "--noise-size", "10000000"],
}


def rate(script: str, env_id: str, workers: int) -> tuple:
    """(median steps/s of iterations 2 and later, whole-process seconds) of one training run."""
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        own = FLAGS[os.path.basename(script)]
        subprocess.run(
            [
                sys.executable,
                script,
                "--env",
                env_id,
                *own,
                "--eval-every",
                "1000000",
                "--eval-episodes",
                "1",
                "--workers",
                str(workers),
                "--out-dir",
                out,
            ],
            check=True,
            capture_output=True,
        )
        seconds = time.perf_counter() - t0
        (path,) = glob.glob(os.path.join(out, "*", "progress.csv"))
        with open(path) as f:
            rows = list(csv.DictReader(f))[1:]
        return statistics.median(float(r["steps_per_s"]) for r in rows), seconds


def bare_rate(env_id: str, episodes: int = 10) -> float:
    """env.step alone: steps/s over episodes of uniform random actions, resets excluded."""
    # MuJoCo 3.3+ warns of gymnasium's settotalmass on every make
    with contextlib.suppress(ImportError):
        import mujoco

        mujoco.set_mju_user_warning(lambda message: None)
    env, steps, seconds = gym.make(env_id), 0, 0.0
    rng = np.random.default_rng(0)
    for seed in range(episodes):
        env.reset(seed=seed)
        n = env.spec.max_episode_steps or 1000
        actions = rng.uniform(
            env.action_space.low, env.action_space.high, (n, env.action_space.shape[0])
        )
        step, t0 = env.step, time.perf_counter()
        for a in actions:
            steps += 1
            _, _, terminated, truncated, _ = step(a)
            if terminated or truncated:
                break
        seconds += time.perf_counter() - t0
    env.close()
    return steps / seconds


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.error = lambda message: p.exit(
        2, f"old_new.py: error: {message}\n"
    )  # one line, no usage block
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    if (
        a.repeats < 1
        or not (os.path.isfile(a.old) and os.path.isfile(a.new))
        or {os.path.basename(a.old), os.path.basename(a.new)} - set(FLAGS)
        or os.path.basename(a.old) != os.path.basename(a.new)
    ):
        p.error("give two ars.py or two es_openai.py files, and --repeats at least 1")
    rates = {
        (who, w): [] for who in ("bare", "old", "new") for w in (1, 2) if who != "bare" or w == 1
    }
    name = {
        "bare": "bare loop, random actions",
        **{
            who: f"{os.path.basename(path)} at "
            + subprocess.run(
                ["git", "rev-parse", "--short=7", "HEAD"],
                cwd=os.path.dirname(os.path.abspath(path)),
                capture_output=True,
                text=True,
            ).stdout.strip()
            for who, path in (("old", a.old), ("new", a.new))
        },
    }
    walls = {(who, w): [] for who in ("old", "new") for w in (1, 2)}
    for k in range(a.repeats):
        rates["bare", 1].append(bare_rate(a.env))
        order = (("old", a.old), ("new", a.new))
        if k % 2:  # every other repetition the new script first: the order favours neither
            order = order[::-1]
        for w in (1, 2):
            for who, script in order:
                steps_per_s, seconds = rate(script, a.env, w)
                rates[who, w].append(steps_per_s)
                walls[who, w].append(seconds)
        print(
            f"repetition {k + 1}: "
            + ", ".join(f"{who} {w}w {r[-1]:,.0f}" for (who, w), r in rates.items()),
            flush=True,
        )
        here = dict(
            machine(), bench=f"old_new.py {os.path.basename(a.new)}", env=a.env, unit="steps/s"
        )
        append(
            "throughput.csv",
            [
                dict(here, run=name[who], workers=w, repetition=k + 1, value=round(r[-1], 1))
                for (who, w), r in rates.items()
            ]
            + [
                dict(
                    here,
                    run=f"{name[who]}, whole process",
                    workers=w,
                    repetition=k + 1,
                    value=round(s[-1], 2),
                    unit="s",
                )
                for (who, w), s in walls.items()
            ],
            THROUGHPUT,
        )
    med = {key: statistics.median(r) for key, r in rates.items()}
    for w in (1, 2):
        print(
            f"{w} worker(s): old {med['old', w]:,.0f}, new {med['new', w]:,.0f} steps/s, "
            f"new / old {med['new', w] / med['old', w]:.3f}"
        )
    for w in (1, 2):
        paired = statistics.median(n / o for n, o in zip(rates["new", w], rates["old", w]))
        whole = statistics.median(n / o for n, o in zip(walls["new", w], walls["old", w]))
        print(
            f"{w} worker(s), medians of the paired ratios new / old: steps/s {paired:.3f}, "
            f"whole-process seconds {whole:.3f}"
        )
    for who in ("old", "new"):
        per_core = statistics.median(r / b for r, b in zip(rates[who, 1], rates["bare", 1]))
        print(
            f"{who}: 1 worker / bare loop {per_core:.3f} (median of the repetitions' ratios), "
            f"2 workers / 1 = {med[who, 2] / med[who, 1]:.2f}x"
        )


if __name__ == "__main__":
    main()
