"""Throughput measurement shared by ars_throughput.py and es_openai_throughput.py.

What the scripts add to the environment (policy, bookkeeping, communication) is measured against
bare env.step loops on the same environment:

- A loop with uniform random actions (`random_loop`). A MuJoCo step costs more or less depending
  on the contacts it resolves, so random actions and a training policy's actions do not cost the
  same per step.
- A loop that replays the training's own episodes (`replay`): while `recording(module, folder)`
  is active, every environment the script's workers make (they are forked, so they inherit the
  patched `make_env`) saves each episode's reset seed and actions to `folder`. One training is
  run in it, untimed. The scripts give the same bits for a given seed (tested), so the timed
  trainings, run without the recorder, step through exactly these episodes, and the replay
  checks that it gets back each episode's return.

The host of this virtual machine changes speed by up to a factor of two from one tenth of a
second to the next (a bare HalfCheetah loop timed in 2,000-step chunks ran at 10,000 to 19,000
steps per second within a minute, with CPU time equal to wall time: the process is not
descheduled, it runs slower). Whole-run rates measured one after the other therefore differ by
tens of percent between repetitions. `measure` reports both:

- per repetition, whole-run rates (the replay loop, then 1 worker, then 2 workers), and their
  medians;
- best of R: each training iteration's time, and the replay of that iteration's episodes, is
  taken at its minimum over the R repetitions (the practice of Python's timeit: interference
  only ever slows a run down, so the fastest of several runs of the same work is the best
  estimate of its cost), and rates are summed over the iterations. The same episodes and the
  same iterations are compared, so the per-core ratio compares like with like.
- paired: the training with 1 worker is run once more with a bare loop replaying the same
  episodes on the other core at the same time (`beside`), and the ratio is taken between the two
  rates of those same seconds. Whatever the host does to both cores at once cancels out of the
  ratio; what it does to one core alone does not, and the two loops share the processor's caches.
  On the 2-core AMD EPYC of docs/ars.md the two cores' speeds were not correlated
  (`core_swings.py` of commit 015dbc7: r = -0.13 and 0.06 over 40 one-second windows), so there
  the pairing did not narrow the spread.
"""

import contextlib
import glob
import importlib
import itertools
import multiprocessing as mp
import os
import sys
import tempfile
import time

import numpy as np
from results_csv import THROUGHPUT, append, machine


class Recorder:
    """Wraps an environment; at each episode's end saves (seed, actions, return) in an .npz file."""

    counter = itertools.count()

    def __init__(self, env, folder: str):
        self.env, self.folder, self.seed, self.actions, self.total = env, folder, None, [], 0.0

    def __getattr__(self, name):  # action_space, render, unwrapped, ...: those of the environment
        return getattr(self.env, name)

    def reset(self, seed=None, **kw):
        self.seed, self.actions, self.total = seed, [], 0.0
        return self.env.reset(seed=seed, **kw)

    def step(self, action):
        self.actions.append(np.array(action, copy=True))
        out = self.env.step(action)
        self.total += float(out[1])
        if out[2] or out[3]:  # terminated or truncated
            name = os.path.join(self.folder, f"{os.getpid()}_{next(self.counter):06d}.npz")
            np.savez(
                name,
                seed=np.array(-1 if self.seed is None else self.seed),
                actions=np.array(self.actions),
                returns=np.array(self.total),
            )
        return out


def make(module, env_id: str):
    """An environment as the script makes it (make_env: the same in ars.py and es_openai.py)."""
    return module.make_env(env_id, None)


@contextlib.contextmanager
def recording(module, folder: str):
    """Patch module.make_env so that every environment made for training records its episodes."""
    original = module.make_env

    def make_env(*args, **kw):
        return Recorder(original(*args, **kw), folder)

    module.make_env = make_env
    try:
        yield
    finally:
        module.make_env = original


def load_episodes(folder: str, part: int = 0, parts: int = 1, skip: int = 0) -> list:
    """(seed, actions, return) of the recorded episodes, in order; with skip, from episode skip
    on; with parts > 1, only part, part + parts, part + 2 parts, ... of those."""
    episodes = []
    for name in sorted(glob.glob(os.path.join(folder, "*.npz")))[skip:][part::parts]:
        with np.load(name) as f:
            seed = int(f["seed"])
            episodes.append((None if seed < 0 else seed, list(f["actions"]), float(f["returns"])))
    return episodes


def random_loop(module, env_id: str, episodes: int, seed: int = 0) -> float:
    """env.step steps per second with precomputed uniform random actions, resets included."""
    env = make(module, env_id)
    rng = np.random.default_rng(seed)
    low, high = env.action_space.low, env.action_space.high
    actions = rng.uniform(low, high, size=(4096, *low.shape))
    steps, t0 = 0, time.perf_counter()
    for e in range(episodes):
        module.reset_env(env, seed + e)
        while True:
            _, _, terminated, truncated, _ = env.step(actions[steps % 4096])
            steps += 1
            if terminated or truncated:
                break
    return steps / (time.perf_counter() - t0)


def replay(module, env_id: str, folder: str, part: int = 0, parts: int = 1, skip: int = 0) -> tuple:
    """Steps per second of a bare loop over the recorded episodes (resets included), the number
    of steps replayed, and how many episodes did not give back their recorded return (0 when
    the replay followed the training's trajectories). part, parts, skip: as load_episodes."""
    episodes = load_episodes(folder, part, parts, skip)
    env = make(module, env_id)
    steps, returns, t0 = 0, [], time.perf_counter()
    for seed, actions, _ in episodes:
        module.reset_env(env, seed)  # as the scripts' rollouts reset
        total = 0.0
        for a in actions:
            total += env.step(a)[1]
        returns.append(total)
        steps += len(actions)
    seconds = time.perf_counter() - t0
    env.close()
    mismatches = sum(abs(r - e[2]) > 1e-6 * max(1.0, abs(e[2])) for r, e in zip(returns, episodes))
    return steps / seconds, steps, mismatches


def _replay_part(job: tuple) -> tuple:
    module_name, env_id, folder, part, parts, skip = job
    rate, steps, _ = replay(importlib.import_module(module_name), env_id, folder, part, parts, skip)
    return steps, steps / rate  # steps and seconds of this process


def replay_parallel(module, env_id: str, folder: str, processes: int, skip: int = 0) -> float:
    """Steps per second of `processes` bare loops at once, each replaying its share of the
    recorded episodes (from episode skip on): all their steps over the time of the slowest."""
    with mp.get_context("fork").Pool(processes) as pool:
        done = pool.map(
            _replay_part,
            [(module.__name__, env_id, folder, i, processes, skip) for i in range(processes)],
            chunksize=1,
        )
    return sum(steps for steps, _ in done) / max(seconds for _, seconds in done)


def replay_groups(module, env_id: str, folder: str, sizes: list) -> list:
    """Seconds to replay each group of consecutive recorded episodes; sizes: episodes per group."""
    episodes = load_episodes(folder)
    env = make(module, env_id)
    seconds, i = [], 0
    for n in sizes:
        t0 = time.perf_counter()
        for seed, actions, _ in episodes[i : i + n]:
            module.reset_env(env, seed)
            for a in actions:
                env.step(a)
        seconds.append(time.perf_counter() - t0)
        i += n
    env.close()
    return seconds


def _replay_beside(module_name: str, env_id: str, folder: str, skip: int, stop, queue):
    """Replay the recorded episodes (from episode skip on) over and over until stop is set; put
    on queue the (time, steps so far) after each episode."""
    episodes, module = load_episodes(folder, skip=skip), importlib.import_module(module_name)
    env = make(module, env_id)
    marks, steps = [(time.perf_counter(), 0)], 0
    while not stop.is_set():
        for seed, actions, _ in episodes:
            module.reset_env(env, seed)
            for a in actions:
                env.step(a)
            steps += len(actions)
            marks.append((time.perf_counter(), steps))
            if stop.is_set():
                break
    env.close()
    queue.put(marks)


def beside(module, env_id: str, folder: str, skip: int, run):
    """Call run() while a bare loop replays the recorded episodes on the other core; returns what
    run() returns and the bare loop's steps per second over the same seconds (time.perf_counter
    is one clock for all processes on Linux)."""
    ctx = mp.get_context("fork")
    stop, queue = ctx.Event(), ctx.Queue()
    loop = ctx.Process(
        target=_replay_beside, args=(module.__name__, env_id, folder, skip, stop, queue)
    )
    loop.start()
    time.sleep(0.5)  # the loop's environment is made and stepping before the run starts
    t0 = time.perf_counter()
    try:
        out = run()
    finally:
        t1 = time.perf_counter()
        stop.set()
        marks = queue.get()
        loop.join()
    inside = [(t, n) for t, n in marks if t0 <= t <= t1]
    if len(inside) < 2:
        raise SystemExit(
            "the training was too short to time the loop beside it: give more iterations"
        )
    (ta, na), (tb, nb) = inside[0], inside[-1]
    return out, (nb - na) / (tb - ta)


def measure(module, script: str, env_id: str, train, repeats: int, random_episodes: int) -> dict:
    """Print the throughput table and append each repetition's runs to docs/results/throughput.csv.
    train(workers) runs a training and returns, per iteration,
    (episodes, env steps, seconds of its training part); the first iteration, which also creates
    each worker's environment, is left out of every rate."""
    with tempfile.TemporaryDirectory() as folder:
        with recording(module, folder):  # the timed trainings below run these very episodes
            recorded = train(1)
        sizes, steps = [e for e, _, _ in recorded], np.array([s for _, s, _ in recorded])
        episodes = load_episodes(folder)
        lengths = [len(a) for _, a, _ in episodes][
            : sum(sizes)
        ]  # the evaluation episode at the end left out
        got = np.add.reduceat(lengths, np.r_[0, np.cumsum(sizes)[:-1]])
        mismatches = replay(module, env_id, folder)[2]
        if not np.array_equal(got, steps):
            raise SystemExit(
                "the recorded episodes do not add up to the training's iterations: "
                f"{got.tolist()} against {steps.tolist()} steps"
            )
        print(
            f"recorded {sum(sizes):,} training episodes ({steps.sum():,} steps) "
            f"in {len(sizes)} iterations; "
            f"{mismatches} replayed episodes differ from the training's return\n"
        )
        print(
            f"| repetition | bare loop, training's episodes (1 core) | {script}, 1 worker "
            f"| per-core ratio | {script}, 2 workers | speed-up 1 -> 2 "
            f"| bare loop on 2 processes | its speed-up 1 -> 2 | bare loop, random actions "
            f"| paired: {script}, 1 worker | bare loop beside it | paired ratio |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        n = steps[1:].sum()
        runs = {"bare": [], "one": [], "two": []}
        rows = []
        for r in range(repeats):
            runs["bare"].append(replay_groups(module, env_id, folder, sizes)[1:])
            runs["one"].append([t for _, _, t in train(1)][1:])
            runs["two"].append([t for _, _, t in train(2)][1:])
            bare2 = replay_parallel(module, env_id, folder, 2, skip=sizes[0])
            rand = random_loop(module, env_id, random_episodes)
            paired, bare_beside = beside(module, env_id, folder, sizes[0], lambda: train(1))
            one_paired = n / sum(t for _, _, t in paired[1:])
            bare, one, two = (n / sum(runs[k][-1]) for k in ("bare", "one", "two"))
            rows.append(
                (
                    bare,
                    one,
                    one / bare,
                    two,
                    two / one,
                    bare2,
                    bare2 / bare,
                    rand,
                    one_paired,
                    bare_beside,
                    one_paired / bare_beside,
                )
            )
            here = dict(
                machine(),
                bench=os.path.basename(sys.argv[0]),
                env=env_id,
                repetition=r + 1,
                unit="steps/s",
            )
            append(
                "throughput.csv",
                [
                    dict(here, run=run, workers=w, value=round(v, 1))
                    for run, w, v in (
                        ("bare loop, the training's episodes", 1, bare),
                        (script, 1, one),
                        (script, 2, two),
                        ("bare loop, the training's episodes", 2, bare2),
                        ("bare loop, random actions", 1, rand),
                        (f"{script} beside a bare loop", 1, one_paired),
                        (f"bare loop beside {script}", 1, bare_beside),
                    )
                ],
                THROUGHPUT,
            )
            print(
                f"| {r + 1} | {bare:,.0f} | {one:,.0f} | {one / bare:.2f} "
                f"| {two:,.0f} | {two / one:.2f}x | {bare2:,.0f} | {bare2 / bare:.2f}x "
                f"| {rand:,.0f} | {one_paired:,.0f} | {bare_beside:,.0f} "
                f"| {one_paired / bare_beside:.2f} |",
                flush=True,
            )
    rows = np.array(rows)
    m, lo, hi = np.median(rows, axis=0), rows.min(axis=0), rows.max(axis=0)
    print(
        f"| median of {repeats} | {m[0]:,.0f} | {m[1]:,.0f} "
        f"| {m[2]:.2f} ({lo[2]:.2f}-{hi[2]:.2f}) | {m[3]:,.0f} "
        f"| {m[4]:.2f}x ({lo[4]:.2f}-{hi[4]:.2f}) | {m[5]:,.0f} "
        f"| {m[6]:.2f}x ({lo[6]:.2f}-{hi[6]:.2f}) | {m[7]:,.0f} "
        f"| {m[8]:,.0f} | {m[9]:,.0f} | {m[10]:.2f} ({lo[10]:.2f}-{hi[10]:.2f}) |"
    )
    best = {k: n / np.min(np.array(v), axis=0).sum() for k, v in runs.items()}
    best2 = rows[:, 5].max()
    print(
        f"| best of {repeats}, iteration by iteration | {best['bare']:,.0f} | {best['one']:,.0f} "
        f"| {best['one'] / best['bare']:.2f} | {best['two']:,.0f} "
        f"| {best['two'] / best['one']:.2f}x | {best2:,.0f} (fastest run) "
        f"| {best2 / best['bare']:.2f}x "
        f"| {rows[:, 7].max():,.0f} (fastest run) | | | |"
    )
    return {"rows": rows, "best": best}
