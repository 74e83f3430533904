"""A training script's speed beside the environment's own: steps per second of its training with
1 and 2 workers against a bare env.step loop that replays the very episodes of that training.

    python docs/bench/throughput.py ars.py --env HalfCheetah-v5 --repeats 5
    python docs/bench/throughput.py es_openai.py --env HalfCheetah-v5 --repeats 5
    python docs/bench/throughput.py es_basic.py --env LunarLander-v3 --repeats 3

Once, untimed, a training whose environments record each episode's reset seed and actions: a
script gives the same bits for a seed, so the timed trainings step through these very episodes.
Then each repetition times, one after the other: the bare loop over those episodes on one core
and split over two processes; the training with 1 worker and with 2; and the 1-worker training
again with the bare loop running beside it on the other core (paired: what the host does to both
cores at once cancels out of that ratio). A training's rate is its own steps_per_s (the rollouts
and the update) over every iteration but the first, which also makes the workers' environments.
Each repetition appends its rows to docs/results/throughput.csv. Linux and macOS: workers fork.
"""

import argparse
import contextlib
import csv
import glob
import importlib
import io
import multiprocessing
import os
import sys
import tempfile
import time

import numpy as np
from results_csv import ROOT, THROUGHPUT, append, machine

sys.path.insert(0, ROOT)
NO_EVAL = ["--eval-every", "1000000", "--eval-episodes", "1"]
TRAINING = {  # a short training with no evaluation
    "es_basic.py": ["--iterations", "6", *NO_EVAL],
    "ars.py": "--iterations 10 --n-directions 8 --top-b 8".split() + NO_EVAL,
    "es_openai.py": "--iterations 6 --population 40 --noise-size 10000000".split() + NO_EVAL,
}
FACTORY = {"es_basic.py": "new_env", "ars.py": "make_env", "es_openai.py": "make_env"}


class Recorder:  # an environment that saves each episode's (seed, actions) at its end
    def __init__(self, env, folder: str):
        self.env, self.folder, self.seed, self.actions = env, folder, None, []

    def __getattr__(self, name):  # action_space, unwrapped, ...: those of the environment
        return getattr(self.env, name)

    def reset(self, seed=None, **kw):
        self.seed, self.actions = seed, []
        return self.env.reset(seed=seed, **kw)

    def step(self, action):
        self.actions.append(np.array(action, copy=True))
        out = self.env.step(action)
        if out[2] or out[3]:  # terminated or truncated
            name = f"{time.perf_counter_ns()}_{os.getpid()}.npz"
            np.savez(os.path.join(self.folder, name), seed=self.seed, actions=self.actions)
        return out


def train(module, script: str, env_id: str, workers: int, record=None) -> float:
    """The training's steps per second over every iteration but the first (its steps_per_s: the
    rollouts and the update); record: a folder where its environments save their episodes."""
    factory = getattr(module, FACTORY[script])
    if record:  # the forked workers inherit the patched factory
        setattr(module, FACTORY[script], lambda *a, **kw: Recorder(factory(*a, **kw), record))
    try:
        with tempfile.TemporaryDirectory() as out, open(os.devnull, "w") as sink:
            argv = ["--env", env_id, "--workers", str(workers), "--out-dir", out]
            with contextlib.redirect_stdout(sink):
                module.main([*argv, *TRAINING[script]])
            (log,) = glob.glob(os.path.join(out, "*", "progress.csv"))
            with open(log) as f:
                rows = list(csv.DictReader(f))
    finally:
        setattr(module, FACTORY[script], factory)
    steps = np.diff([0] + [int(r["env_steps"]) for r in rows])[1:]
    seconds = sum(n / float(r["steps_per_s"]) for n, r in zip(steps, rows[1:]))
    return steps.sum() / seconds


def bare_loop(job: tuple) -> tuple:
    """(steps, seconds) of a bare loop over the recorded episodes part, part + parts, ...; with a
    stop event, over and over until it is set, putting (time, steps so far) on marks."""
    script, env_id, folder, part, parts, stop, marks = job
    module = importlib.import_module(script[:-3])
    env = getattr(module, FACTORY[script])(env_id)
    reset = getattr(module, "reset_env", lambda env, seed: env.reset(seed=seed))
    episodes = []
    for name in sorted(glob.glob(os.path.join(folder, "*.npz")))[part::parts]:
        with np.load(name) as f:
            episodes.append((int(f["seed"]), list(f["actions"])))
    steps, t0 = 0, time.perf_counter()
    while True:
        for seed, actions in episodes:
            reset(env, seed)  # as the scripts' rollouts reset
            for action in actions:
                env.step(action)
            steps += len(actions)
            if marks is not None:
                marks.put((time.perf_counter(), steps))
        if stop is None or stop.is_set():
            return steps, time.perf_counter() - t0


def bare(script: str, env_id: str, folder: str, processes: int) -> float:
    """Steps per second of the bare loops on `processes` processes, all their steps together."""
    jobs = [(script, env_id, folder, i, processes, None, None) for i in range(processes)]
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        done = pool.map(bare_loop, jobs, chunksize=1)
    return sum(steps for steps, _ in done) / max(seconds for _, seconds in done)


def paired(module, script: str, env_id: str, folder: str) -> tuple:
    """(the 1-worker training's steps/s, the bare loop's over the same seconds, beside it)."""
    ctx = multiprocessing.get_context("fork")
    stop, marks = ctx.Event(), ctx.Queue()
    loop = ctx.Process(target=bare_loop, args=((script, env_id, folder, 0, 1, stop, marks),))
    loop.start()
    time.sleep(0.5)  # its environment made and stepping before the training starts
    t0 = time.perf_counter()
    one = train(module, script, env_id, 1)
    t1 = time.perf_counter()
    stop.set()
    times = []
    while loop.is_alive() or not marks.empty():
        with contextlib.suppress(Exception):
            times.append(marks.get(timeout=0.1))
    loop.join()
    inside = [(t, n) for t, n in times if t0 <= t <= t1]
    (ta, na), (tb, nb) = inside[0], inside[-1]
    return one, (nb - na) / (tb - ta)


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.error = lambda message: p.exit(2, f"throughput.py: error: {message}\n")  # one line
    p.add_argument("script", choices=list(TRAINING))
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    if a.repeats < 1:
        p.error("--repeats must be at least 1")
    if "fork" not in multiprocessing.get_all_start_methods():  # the workers inherit the recorder
        p.error("needs the fork start method (Linux, macOS)")
    module = importlib.import_module(a.script[:-3])
    with contextlib.suppress(ImportError):  # MuJoCo's settotalmass warning, in every worker too
        __import__("mujoco").set_mju_user_warning(lambda message: None)
    err = io.StringIO()
    try:  # the script's own refusal of the environment, as this command's one line
        with contextlib.redirect_stderr(err):
            module.configure(module.parse(["--env", a.env]))
    except SystemExit:
        p.error(err.getvalue().strip().split("error: ", 1)[-1].removesuffix(" (see --help)"))
    bench = f"throughput.py {a.script}"
    with tempfile.TemporaryDirectory() as folder:
        train(module, a.script, a.env, 1, record=folder)
        for repetition in range(1, a.repeats + 1):
            bare1 = bare(a.script, a.env, folder, 1)
            one = train(module, a.script, a.env, 1)
            bare2 = bare(a.script, a.env, folder, 2)
            two = train(module, a.script, a.env, 2)
            one_beside, bare_beside = paired(module, a.script, a.env, folder)
            here = dict(machine(), bench=bench, env=a.env, repetition=repetition, unit="steps/s")
            runs = [
                ("bare loop, the training's episodes", 1, bare1),
                (a.script, 1, one),
                ("bare loop, the training's episodes", 2, bare2),
                (a.script, 2, two),
                (f"{a.script} beside a bare loop", 1, one_beside),
                (f"bare loop beside {a.script}", 1, bare_beside),
            ]
            rows = [dict(here, run=r, workers=w, value=round(v, 1)) for r, w, v in runs]
            append("throughput.csv", rows, THROUGHPUT)
            print(
                f"repetition {repetition}: per-core ratio {one / bare1:.2f}, side by side "
                f"{one_beside / bare_beside:.2f}, 2 workers over 1 {two / one:.2f}x, two bare "
                f"loops over one {bare2 / bare1:.2f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
