"""What a training episode costs beyond its env.step calls, in one process.

    python docs/bench/rollout_overhead.py --env HalfCheetah-v5 --repeats 15 --pairs 1,2,4

Records one episode of ars.py's `rollout` (a random 6 x 17 policy with normalization), and for
each P in --pairs the 2P episodes of P mirrored pairs in es_openai.py's `rollout_lockstep` (a
normc-initialized 2x64 MLP, action noise on, one `PolicyBatch` call per step), then alternates,
`--repeats` times each, the real rollout with a bare loop that replays the same episodes on the
same environment objects (for es_openai.py, alternating over the 2P environments as lockstep
does). The fastest of the repetitions is kept for each (interference only slows a run down), so
the ratio measures the rollout's own cost, free of the pipes and the master of the throughput
scripts. It also times ars.py's four policy calls alone, on one episode's states with no env.step
between them, and np.maximum with float32 bounds (gymnasium's) against float64 ones.
"""
import argparse
import glob
import os
import sys
import tempfile
import time
import timeit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import ars  # noqa: E402
import es_openai as eo  # noqa: E402
import numpy as np  # noqa: E402
from replay import Recorder  # noqa: E402


def recorded_actions(folder: str) -> list:
    return [list(np.load(name)["actions"]) for name in sorted(glob.glob(os.path.join(folder, "*.npz")))]


def bare(env, actions: list, seed: int):
    """Step one recorded episode's actions."""
    ars.reset_env(env, seed)
    for a in actions:
        env.step(a)


def policy_alone(env, M, mu, inv_sigma, repeats: int) -> float:
    """Microseconds per step of rollout's policy step (the same four calls on float64 arrays) over
    one episode's recorded states, with no env.step between the steps: the cost of those calls
    when nothing else runs between them, fastest of the repetitions."""
    W, low, high = M * inv_sigma, env.action_space.low.astype(np.float64), env.action_space.high.astype(np.float64)
    offset = -W @ mu
    states = []
    x, _ = ars.reset_env(env, 123)
    while True:
        states.append(x)
        x, _, terminated, truncated, _ = env.step(np.clip(W @ x + offset, low, high))
        if terminated or truncated:
            break
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for x in states:
            a = np.dot(W, x)
            np.add(a, offset, out=a)
            np.maximum(a, low, out=a)
            np.minimum(a, high, out=a)
        best = min(best, time.perf_counter() - t0)
    return 1e6 * best / len(states)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.error = lambda message: p.exit(2, f"rollout_overhead.py: error: {message}\n")  # one line, no usage block
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--pairs", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4],
                   help="es_openai.py: mirrored pairs stepped together, e.g. 1,2,4")
    a = p.parse_args()
    if a.repeats < 1 or not all(1 <= k <= 1000 for k in a.pairs):
        p.error("--repeats must be at least 1, and each of --pairs 1 to 1000")
    try:
        ars.check_env(a.env)
    except ars.UserError as e:
        p.error(str(e))
    ars.quiet_mujoco()  # its settotalmass warning, once per environment, in every forked process too
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
        bare(env, episode[0], 123)
        t_roll.append(t1 - t0)
        t_bare.append(time.perf_counter() - t1)
    n = len(episode[0])
    print(f"ars.py rollout: {1e6 * min(t_roll) / n:.1f} us per step; bare replay of the same episode "
          f"{1e6 * min(t_bare) / n:.1f}; ratio {min(t_bare) / min(t_roll):.3f}")
    print(f"ars.py policy step alone (its four NumPy calls on the episode's states, no env.step between them): "
          f"{policy_alone(env, M, mu, inv_sigma, a.repeats):.2f} us per step")
    a64, low32 = np.zeros(act_dim), env.action_space.low  # gymnasium's bounds are float32
    for name, low in (("float32", low32), ("float64", low32.astype(np.float64))):
        t = min(timeit.repeat(lambda: np.maximum(a64, low, out=a64), number=100_000, repeat=5)) / 100_000
        print(f"np.maximum(a, low, out=a), a float64, low {name}: {1e6 * t:.2f} us")

    sizes = eo.layer_sizes(obs_dim, [64, 64], env.action_space, 0)
    theta = eo.normc_init(sizes, rng)
    spec = (sizes, "tanh", np.zeros(obs_dim), np.ones(obs_dim), env.action_space, 0, True)
    for P in a.pairs:  # P mirrored pairs in lockstep, as a worker steps a message of --lockstep P jobs
        eps = [rng.standard_normal(theta.size).astype(np.float32) for _ in range(P)]
        thetas = [theta + s * 0.05 * e for e in eps for s in (1.0, -1.0)]
        envs = [ars.make_env(a.env, None) for _ in range(2 * P)]
        seeds = [77 + p for p in range(P)]

        def run_lockstep(envs):
            timer = {"policy_us": [], "env_us": []}
            rngs = [np.random.default_rng(p) for p in range(P)]
            eo.rollout_lockstep(envs, eo.PolicyBatch(thetas, *spec), seeds, rngs, 0.01, None, timer)

        episodes = []
        with tempfile.TemporaryDirectory() as folder:
            folders = [os.path.join(folder, str(i)) for i in range(2 * P)]
            for f in folders:
                os.mkdir(f)
            run_lockstep([Recorder(e, f) for e, f in zip(envs, folders)])
            for f in folders:
                episodes += recorded_actions(f)
        t_run, t_bare = [], []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            run_lockstep(envs)
            t1 = time.perf_counter()
            for i, e in enumerate(envs):
                ars.reset_env(e, seeds[i // 2])
            for step in zip(*episodes):  # the bare replay, alternating over the same 2P environments
                for e, action in zip(envs, step):
                    e.step(action)
            t_run.append(t1 - t0)
            t_bare.append(time.perf_counter() - t1)
        n = sum(len(e) for e in episodes)
        print(f"es_openai.py rollout_lockstep, {P} pair(s): {1e6 * min(t_run) / n:.1f} us per step; bare replay of "
              f"its {2 * P} episodes on the same environments {1e6 * min(t_bare) / n:.1f}; "
              f"ratio {min(t_bare) / min(t_run):.3f}")

if __name__ == "__main__":
    main()
