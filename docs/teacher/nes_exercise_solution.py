"""The teacher's solution of the NES class exercise: the bodies of its five parts, to paste into
nes_exercise.py under "YOUR CODE HERE" (the given functions they call come from that file).

    python docs/teacher/nes_exercise_solution.py --check  # the checker on these five functions
    python docs/teacher/nes_exercise_solution.py          # the exercise solved: trains CartPole-v1
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from nes_exercise import (
    KEYS,
    centered_ranks,
    gym,
    n_outputs,
    np,
    pair_seeds,
    policy_shapes,
    rollout,
    sample_noise,
)

PARTS = ("initial_policy", "mirrored_pair", "update_mean_policy", "evaluate_pair", "train")


def initial_policy(obs_dim: int, n_out: int, hidden: int = 16) -> dict:
    return {k: np.zeros(shape) for k, shape in policy_shapes(obs_dim, n_out, hidden).items()}


def mirrored_pair(policy: dict, seed: int, sigma: float) -> tuple:
    eps = sample_noise(policy, seed)
    plus = {k: policy[k] + sigma * eps[k] for k in KEYS}
    minus = {k: policy[k] - sigma * eps[k] for k in KEYS}
    return plus, minus


def update_mean_policy(
    policy: dict, seeds: list, F_plus: np.ndarray, F_minus: np.ndarray, sigma: float, alpha: float
) -> dict:
    n = len(seeds)
    new = {k: policy[k].copy() for k in KEYS}
    for seed, fp, fm in zip(seeds, F_plus, F_minus):
        eps = sample_noise(policy, seed)
        for k in KEYS:
            new[k] += alpha / (2 * n * sigma) * (fp - fm) * eps[k]
    return new


def evaluate_pair(policy: dict, seed: int, sigma: float, env_name: str) -> tuple:
    plus, minus = mirrored_pair(policy, seed, sigma)
    return seed, rollout(plus, env_name, seed), rollout(minus, env_name, seed)


def train(
    env_name, executor, iterations, n_pairs, sigma, alpha, seed=0, hidden=16, target=None, log=print
) -> dict:
    env = gym.make(env_name)
    mu = initial_policy(env.observation_space.shape[0], n_outputs(env.action_space), hidden)
    for iteration in range(iterations):
        pairs = pair_seeds(seed, iteration, n_pairs)
        futures = [executor.submit(evaluate_pair, mu, s, sigma, env_name) for s in pairs]
        results = [f.result() for f in futures]  # only after every pair is submitted
        seeds = [r[0] for r in results]
        R = np.array([r[1] for r in results] + [r[2] for r in results])
        F = centered_ranks(R)  # all 2 n returns ranked together (Eq. 4)
        mu = update_mean_policy(mu, seeds, F[:n_pairs], F[n_pairs:], sigma, alpha)
        log(f"iteration {iteration:3d}: mean return {R.mean():8.2f}")
        if target is not None and R.mean() >= target:
            break
    return mu


if __name__ == "__main__":  # the exercise with these five parts in place of the stubs
    import nes_exercise

    for name in PARTS:
        setattr(nes_exercise, name, globals()[name])
    nes_exercise.main()
