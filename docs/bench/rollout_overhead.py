"""What a training episode costs beyond its env.step calls, in one process.

    python docs/bench/rollout_overhead.py --env HalfCheetah-v5 --repeats 15

Records one episode of ars.py's `rollout` (a random 6 x 17 policy with normalization) and one
mirrored pair of es_openai.py's `rollout_pair` (a normc-initialized 2x64 MLP, action noise on),
then alternates, `--repeats` times each, the real rollout with a bare loop that replays the same
episodes on the same environment objects. The fastest of the repetitions is kept for each
(interference only slows a run down), so the ratio measures the rollout's own cost, free of the
pipes and the master of the throughput scripts. For the pair, the bare loop is timed both on
one environment and alternating between two as the lockstep pair does.
"""
import argparse
import glob
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import ars  # noqa: E402
import es_openai as eo  # noqa: E402
import numpy as np  # noqa: E402
from replay import Recorder  # noqa: E402


def recorded_actions(folder: str) -> list:
    return [list(np.load(name)["actions"]) for name in sorted(glob.glob(os.path.join(folder, "*.npz")))]


def bare(envs: list, episodes: list, seed: int, lockstep: bool = False):
    """Step the recorded actions: episode i on envs[i] in lockstep, or each in turn on envs[0]."""
    if lockstep:
        for env in envs:
            env.reset(seed=seed)
        for pair in zip(*episodes):
            for env, a in zip(envs, pair):
                env.step(a)
        return
    for actions in episodes:
        envs[0].reset(seed=seed)
        for a in actions:
            envs[0].step(a)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--repeats", type=int, default=15)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    env, env2 = ars.make_env(a.env, None), ars.make_env(a.env, None)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]

    M, mu, inv_sigma = 0.05 * rng.standard_normal((act_dim, obs_dim)), np.zeros(obs_dim), np.ones(obs_dim)
    with tempfile.TemporaryDirectory() as folder:
        ars.rollout(Recorder(env, folder), M, mu, inv_sigma, 123, keep_obs=True)
        episode = recorded_actions(folder)
    t_roll, t_bare = [], []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        ars.rollout(env, M, mu, inv_sigma, 123, keep_obs=True)
        t1 = time.perf_counter()
        bare([env], episode, 123)
        t_roll.append(t1 - t0)
        t_bare.append(time.perf_counter() - t1)
    n = len(episode[0])
    print(f"ars.py rollout: {1e6 * min(t_roll) / n:.1f} us per step; bare replay of the same episode "
          f"{1e6 * min(t_bare) / n:.1f}; ratio {min(t_bare) / min(t_roll):.3f}")

    sizes = eo.layer_sizes(obs_dim, [64, 64], env.action_space, 0)
    theta = eo.normc_init(sizes, rng)
    eps = rng.standard_normal(theta.size).astype(np.float32)
    pair = [theta + 0.05 * eps, theta - 0.05 * eps]
    spec = (sizes, "tanh", np.zeros(obs_dim), np.ones(obs_dim), env.action_space, 0, True)

    def run_pair(envs):
        timer = {"policy_us": [], "env_us": []}
        eo.rollout_pair(envs, eo.PolicyPair(pair, *spec), 77, np.random.default_rng(1), 0.01, False, timer)

    with tempfile.TemporaryDirectory() as folder:
        run_pair([Recorder(env, folder), Recorder(env2, folder)])
        episodes = recorded_actions(folder)
    t_pair, t_one, t_two = [], [], []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        run_pair([env, env2])
        t1 = time.perf_counter()
        bare([env], episodes, 77)
        t2 = time.perf_counter()
        bare([env, env2], episodes, 77, lockstep=True)
        t_pair.append(t1 - t0)
        t_one.append(t2 - t1)
        t_two.append(time.perf_counter() - t2)
    n = sum(len(e) for e in episodes)
    print(f"es_openai.py rollout_pair: {1e6 * min(t_pair) / n:.1f} us per step; bare replay of its two episodes "
          f"{1e6 * min(t_one) / n:.1f} on one environment, {1e6 * min(t_two) / n:.1f} alternating between two; "
          f"ratio {min(t_one) / min(t_pair):.3f}")


if __name__ == "__main__":
    main()
