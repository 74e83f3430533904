"""Throughput of es_openai.py against bare env.step loops, and its speed-up from 1 to 2 workers.

    python docs/bench/es_openai_throughput.py --env HalfCheetah-v5 --iterations 6 --repeats 5

The training is 6 generations of es_openai.py (population 40, no evaluation). Each repetition
times, one after the other: a bare loop that replays the very episodes of that training (reset
seeds and actions recorded once from a training with the same seed), es_openai.py with 1 and
with 2 workers, the bare loop split over 2 processes, a bare loop with random actions, and
the 1-worker training again with the bare loop running beside it on the other core (paired).
Training rates leave out the first generation, which also creates each worker's environments.
Prints the rates of each repetition, their medians, and the best of the repetitions generation
by generation. Every timed run becomes a row of docs/results/throughput.csv.
How and why: docs/bench/replay.py.
"""

import argparse
import contextlib
import csv
import io
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from replay import measure  # noqa: E402

import es_openai as eo  # noqa: E402


def es_args(env_id: str, workers: int, iterations: int, population: int, extra: list, out: str):
    """es_openai.py's settings for a timed training (no evaluation), checked as the script would."""
    return eo.configure(
        eo.parse(
            [
                "--env",
                env_id,
                "--iterations",
                str(iterations),
                "--population",
                str(population),
                "--workers",
                str(workers),
                "--eval-every",
                str(10**6),
                "--eval-episodes",
                "1",
                "--noise-size",
                "10000000",
                "--out-dir",
                out,
                *extra,
            ]
        )
    )


def es_training(env_id: str, workers: int, iterations: int, population: int) -> list:
    """Per generation of es_openai.py: (training episodes, env steps, seconds: rollouts and
    update, evaluation excluded)."""
    with tempfile.TemporaryDirectory() as out:
        args = es_args(env_id, workers, iterations, population, [], out)
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            eo.train(args)
        with open(os.path.join(out, os.listdir(out)[0], "progress.csv")) as f:
            rows = list(csv.DictReader(f))
    return [
        (int(r["episodes_this_gen"]), int(r["timesteps_this_gen"]), float(r["time_gen_s"]))
        for r in rows
    ]


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.error = lambda message: p.exit(
        2, f"es_openai_throughput.py: error: {message}\n"
    )  # one line, no usage block
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--population", type=int, default=40)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    if a.iterations < 2 or a.repeats < 1:
        p.error("--iterations must be at least 2 (the first is left out), --repeats at least 1")
    err = io.StringIO()
    try:  # es_openai.py's own refusals (the environment, --population), before timing
        with contextlib.redirect_stderr(err):
            es_args(a.env, 1, a.iterations, a.population, [], "unused")  # the folder is never made
    except SystemExit:
        p.error(err.getvalue().strip().split("error: ", 1)[-1].removesuffix(" (see --help)"))
    with contextlib.suppress(ImportError):  # MuJoCo's settotalmass warning, in every worker too
        __import__("mujoco").set_mju_user_warning(lambda message: None)

    def training(workers: int) -> list:
        return es_training(a.env, workers, a.iterations, a.population)

    measure(eo, "es_openai.py", a.env, training, a.repeats, random_episodes=a.population)


if __name__ == "__main__":
    main()
