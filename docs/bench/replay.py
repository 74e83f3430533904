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

The host of a virtual machine changes speed by tens of percent from one minute to the next, so
the per-core ratio is measured with both on the machine at once (`beside`): the training with
one worker pinned to one core, the replay loop pinned to the other, over the same seconds; the
next repetition swaps the cores. The speed-ups from 1 to 2 workers are measured one after the
other, beside the same speed-up of the bare loop itself (`replay_parallel`: the episodes split
over 2 processes), the most two cores of this machine give.
"""
import contextlib
import glob
import importlib
import itertools
import multiprocessing as mp
import os
import tempfile
import time

import numpy as np


class Recorder:
    """Wraps an environment; on each episode's end saves (seed, actions, return) as one .npz file."""

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
            np.savez(name, seed=np.array(-1 if self.seed is None else self.seed), actions=np.array(self.actions),
                     returns=np.array(self.total))
        return out


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


def load_episodes(folder: str, part: int = 0, parts: int = 1) -> list:
    """(seed, actions, return) of the recorded episodes part, part + parts, part + 2 parts, ..."""
    episodes = []
    for name in sorted(glob.glob(os.path.join(folder, "*.npz")))[part::parts]:
        with np.load(name) as f:
            seed = int(f["seed"])
            episodes.append((None if seed < 0 else seed, list(f["actions"]), float(f["returns"])))
    return episodes


def random_loop(module, env_id: str, episodes: int, seed: int = 0) -> float:
    """env.step steps per second with precomputed uniform random actions, resets included."""
    env = module.make_env(env_id, None)
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


def replay(module, env_id: str, folder: str, part: int = 0, parts: int = 1) -> tuple:
    """Steps per second of a bare loop over the recorded episodes (resets included), the number
    of steps replayed, and how many episodes did not give back their recorded return (0 when
    the replay followed the training's trajectories)."""
    episodes = load_episodes(folder, part, parts)
    env = module.make_env(env_id, None)
    steps, returns, t0 = 0, [], time.perf_counter()
    for seed, actions, _ in episodes:
        env.reset(seed=seed)
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
    module_name, env_id, folder, part, parts = job
    rate, steps, _ = replay(importlib.import_module(module_name), env_id, folder, part, parts)
    return steps, steps / rate  # steps and seconds of this process


def replay_parallel(module, env_id: str, folder: str, processes: int) -> float:
    """Steps per second of `processes` bare loops at once, each replaying its share of the
    recorded episodes: all their steps over the time of the slowest."""
    with mp.get_context("fork").Pool(processes) as pool:
        done = pool.map(_replay_part, [(module.__name__, env_id, folder, i, processes) for i in range(processes)],
                        chunksize=1)
    return sum(steps for steps, _ in done) / max(seconds for _, seconds in done)


def _replay_until_stopped(module_name: str, env_id: str, folder: str, cpu: int, stop, queue):
    """Replay the recorded episodes over and over on core `cpu`; report (time, steps so far) at
    each episode's end."""
    os.sched_setaffinity(0, {cpu})
    episodes = load_episodes(folder)
    env = importlib.import_module(module_name).make_env(env_id, None)
    steps, marks = 0, [(time.time(), 0)]
    queue.put("ready")
    while not stop.is_set():
        for seed, actions, _ in episodes:
            env.reset(seed=seed)
            for a in actions:
                env.step(a)
            steps += len(actions)
            marks.append((time.time(), steps))
            if stop.is_set():
                break
    queue.put(marks)


def beside(module, env_id: str, folder: str, replay_cpu: int, fn):
    """Run fn() pinned to the cores other than `replay_cpu` while the bare loop replays the
    recorded episodes on `replay_cpu`. Returns fn's result and the bare loop's steps per second
    over the episodes it finished during fn()."""
    ctx = mp.get_context("fork")
    stop, queue = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_replay_until_stopped, args=(module.__name__, env_id, folder, replay_cpu, stop, queue))
    proc.start()
    queue.get()  # the loop has its environment and runs
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, saved - {replay_cpu})  # the training's processes are forked from here: they inherit it
    t0 = time.time()
    try:
        result = fn()
    finally:
        t1 = time.time()
        os.sched_setaffinity(0, saved)
        stop.set()
    marks = queue.get()
    proc.join()
    inside = [(t, s) for t, s in marks if t0 <= t <= t1]
    rate = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
    return result, rate


def measure(module, script: str, env_id: str, train, repeats: int, random_episodes: int) -> list:
    """Print the throughput table: one row per repetition and their medians. train(workers)
    returns the training's env steps per second (first iteration excluded)."""
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs 2 cores")
    cpus = sorted(os.sched_getaffinity(0))[:2]
    with tempfile.TemporaryDirectory() as folder:
        with recording(module, folder):  # the timed trainings below run these very episodes
            train(1)
        _, steps, mismatches = replay(module, env_id, folder)
        print(f"recorded {steps:,} steps of the training's episodes; {mismatches} replayed episodes "
              "differ from the training's return\n")
        print(f"| repetition | {script}, 1 worker | bare loop of its episodes beside it, same seconds | "
              "per-core ratio | bare loop, random actions (alone) | bare loop of the episodes (alone) | "
              f"{script}, 1 worker (alone) | {script}, 2 workers | speed-up 1 -> 2 | bare loop on 2 processes | "
              "its speed-up 1 -> 2 |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        table = []
        for r in range(repeats):
            one_b, same_b = beside(module, env_id, folder, cpus[r % 2], lambda: train(1))
            rand = random_loop(module, env_id, random_episodes)
            same = replay(module, env_id, folder)[0]
            same2 = replay_parallel(module, env_id, folder, 2)
            one, two = train(1), train(2)
            table.append((one_b, same_b, one_b / same_b, rand, same, one, two, two / one, same2, same2 / same))
            print(f"| {r + 1} (cores {cpus[1 - r % 2]} / {cpus[r % 2]}) | {one_b:,.0f} | {same_b:,.0f} | "
                  f"{one_b / same_b:.2f} | {rand:,.0f} | {same:,.0f} | {one:,.0f} | {two:,.0f} | {two / one:.2f}x | "
                  f"{same2:,.0f} | {same2 / same:.2f}x |", flush=True)
    m = np.median(np.array(table), axis=0)
    lo, hi = np.min(np.array(table), axis=0), np.max(np.array(table), axis=0)
    print(f"| median ({env_id}) | {m[0]:,.0f} | {m[1]:,.0f} | {m[2]:.2f} ({lo[2]:.2f}-{hi[2]:.2f}) | {m[3]:,.0f} | "
          f"{m[4]:,.0f} | {m[5]:,.0f} | {m[6]:,.0f} | {m[7]:.2f}x ({lo[7]:.2f}-{hi[7]:.2f}) | {m[8]:,.0f} | "
          f"{m[9]:.2f}x ({lo[9]:.2f}-{hi[9]:.2f}) |")
    return table
