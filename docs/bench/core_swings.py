"""Are the host's speed swings shared by the two cores? Two bare loops at once, one per core.

    python docs/bench/core_swings.py --env HalfCheetah-v5 --seconds 40

Each process steps the environment with fixed random actions and notes the time of every
1,000 steps; the steps of each are then counted in one-second windows. Prints each loop's mean
rate and coefficient of variation over the windows, and the correlation between the two. A
correlation near 1 would mean that a bare loop run beside a training (replay.beside) sees the
same slowdowns as the training, so that their ratio cancels them.
"""
import argparse
import multiprocessing as mp
import time

import numpy as np


def loop(env_id: str, seconds: float, seed: int, queue):
    import gymnasium as gym
    env = gym.make(env_id)
    actions = np.random.default_rng(seed).uniform(env.action_space.low, env.action_space.high,
                                                  (1000, *env.action_space.shape))
    env.reset(seed=seed)
    marks, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        for a in actions:
            if any(env.step(a)[2:4]):  # terminated or truncated
                env.reset()
        marks.append(time.perf_counter())  # 1,000 steps done
    queue.put(marks)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.error = lambda message: p.exit(2, f"core_swings.py: error: {message}\n")  # one line, no usage block
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--seconds", type=int, default=40)
    a = p.parse_args()
    if a.seconds < 3:
        p.error("--seconds must be at least 3")
    import gymnasium as gym
    try:
        gym.spec(a.env)
    except gym.error.Error as e:
        p.error(f"--env: {e}")
    queue = mp.get_context("fork").Queue()
    procs = [mp.get_context("fork").Process(target=loop, args=(a.env, a.seconds, s, queue)) for s in (1, 2)]
    for proc in procs:
        proc.start()
    try:  # a loop that failed never reports: stop instead of waiting for ever
        marks = [queue.get(timeout=a.seconds + 120) for _ in procs]
    except Exception:
        raise SystemExit("a loop process failed (see its error above)") from None
    for proc in procs:
        proc.join()
    t0 = min(m[0] for m in marks)
    rates = np.array([np.bincount((np.array(m) - t0).astype(int), minlength=a.seconds)[:a.seconds] * 1000.0
                      for m in marks])  # (2, seconds): steps in each one-second window
    rates = rates[:, (rates > 0).all(axis=0)]
    cv = rates.std(axis=1) / rates.mean(axis=1)
    print(f"{rates.shape[1]} windows of 1 s; mean rates {rates[0].mean():,.0f} and {rates[1].mean():,.0f} steps/s; "
          f"coefficients of variation {cv[0]:.2f} and {cv[1]:.2f}; correlation {np.corrcoef(rates)[0, 1]:.2f}")


if __name__ == "__main__":
    main()
