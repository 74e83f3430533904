"""Throughput of ars.py against bare env.step loops, and its speed-up from 1 to 2 workers.

    python docs/bench/ars_throughput.py --env HalfCheetah-v5 --iterations 10 --repeats 5

The training is 10 iterations of ars.py (N = b = 8 directions, no evaluation). Each repetition
times, one after the other: a bare loop that replays the very episodes of that training (reset
seeds and actions recorded once from a training with the same seed), ars.py with 1 and with 2
workers, the bare loop split over 2 processes, a bare loop with random actions, and the 1-worker
training again with the bare loop running beside it on the other core (paired). Training
rates leave out the first iteration, which also creates each worker's environment. Prints the
rates of each repetition, their medians, and the best of the repetitions iteration by
iteration. Every timed run becomes a row of docs/results/throughput.csv.
How and why: docs/bench/replay.py.
"""

import argparse
import contextlib
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import numpy as np  # noqa: E402
from replay import measure  # noqa: E402

import ars  # noqa: E402


def ars_training(env_id: str, workers: int, iterations: int, n_directions: int) -> list:
    """Per iteration of ars.py: (training episodes, env steps, seconds of its training part:
    rollouts, update and statistics; evaluation excluded)."""
    with tempfile.TemporaryDirectory() as out:
        args = ars.configure(
            ars.build_parser().parse_args(
                [
                    "--env",
                    env_id,
                    "--iterations",
                    str(iterations),
                    "--n-directions",
                    str(n_directions),
                    "--top-b",
                    str(n_directions),
                    "--workers",
                    str(workers),
                    "--eval-every",
                    str(10**6),
                    "--eval-episodes",
                    "1",
                    "--out-dir",
                    out,
                ]
            )
        )
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            ars.train(args)
        with open(os.path.join(out, os.listdir(out)[0], "progress.csv")) as f:
            rows = [line.split(",") for line in f.read().splitlines()[1:]]
    steps = np.diff(np.r_[0, [int(r[2]) for r in rows]])
    return [(2 * n_directions, int(n), n / float(r[10])) for n, r in zip(steps, rows)]


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.error = lambda message: p.exit(
        2, f"ars_throughput.py: error: {message}\n"
    )  # one line, no usage block
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--n-directions", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    if a.iterations < 2 or not 1 <= a.n_directions <= 10**4 or a.repeats < 1:
        p.error(
            "--iterations must be at least 2 (the first is left out), --n-directions 1 to 10000, "
            "--repeats at least 1"
        )
    with contextlib.suppress(
        ImportError
    ):  # MuJoCo's settotalmass warning, in every forked process too
        __import__("mujoco").set_mju_user_warning(lambda message: None)
    ars.configure(
        ars.build_parser().parse_args(["--env", a.env])
    )  # an unusable id: one line, exit 2
    measure(
        ars,
        "ars.py",
        a.env,
        lambda workers: ars_training(a.env, workers, a.iterations, a.n_directions),
        a.repeats,
        random_episodes=4 * a.n_directions,
    )


if __name__ == "__main__":
    main()
