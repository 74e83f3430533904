"""Class exercise: natural evolution strategies (NES), evaluated in parallel.

You will train a small neural-network policy for CartPole-v1 without a single gradient of the
network: keep a Gaussian distribution over its weights, try mirrored pairs of perturbed weights
in parallel, and move the mean towards the better ones. The handout is docs/nes_exercise.md.

Complete the five parts marked "YOUR CODE HERE", in order. After each one, run the checker:

    python nes_exercise.py --check      # says which part passes, and what to do next
    python nes_exercise.py              # trains CartPole-v1 once every part passes
    python nes_exercise.py --ray        # the same code on Ray (pip install ray)
"""

import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

# ---- Given: the policy, its actions, and rollouts ----
# A policy is a dict of numpy arrays, the weights of a one-hidden-layer network:
#   h = relu(W1 @ obs + b1),   output = W2 @ h + b2
# with W1: (hidden, obs_dim), b1: (hidden,), W2: (n_out, hidden), b2: (n_out,).
KEYS = ("W1", "b1", "W2", "b2")


def policy_shapes(obs_dim: int, n_out: int, hidden: int = 16) -> dict:
    return {"W1": (hidden, obs_dim), "b1": (hidden,), "W2": (n_out, hidden), "b2": (n_out,)}


def compute_action(policy: dict, obs: np.ndarray, action_space):
    """The network's output: the argmax for discrete actions, tanh of it for continuous ones."""
    h = np.maximum(policy["W1"] @ obs + policy["b1"], 0.0)
    out = policy["W2"] @ h + policy["b2"]
    return int(np.argmax(out)) if isinstance(action_space, gym.spaces.Discrete) else np.tanh(out)


_envs = {}  # one environment per process and name, made on first use


def rollout(policy: dict, env_name: str, env_seed: int) -> float:
    """The return of one episode of `policy`, started from `env_seed`."""
    if env_name not in _envs:
        _envs[env_name] = gym.make(env_name)
    env = _envs[env_name]
    obs, _ = env.reset(seed=env_seed)
    total, done = 0.0, False
    while not done:
        action = compute_action(policy, obs, env.action_space)
        obs, reward, terminated, truncated, _ = env.step(action)
        total, done = total + float(reward), terminated or truncated
    return total


def n_outputs(action_space) -> int:
    """Outputs of the network: one per action (Discrete) or per action dimension (Box)."""
    discrete = isinstance(action_space, gym.spaces.Discrete)
    return int(action_space.n) if discrete else action_space.shape[0]


def sample_noise(policy: dict, seed: int) -> dict:
    """eps ~ N(0, I) with the shapes of `policy`, the same for the same seed, on any machine."""
    rng = np.random.default_rng([seed, 1])  # not default_rng(seed): env.reset(seed)'s own stream
    return {k: rng.standard_normal(np.shape(policy[k])) for k in KEYS}


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Eq. (4): the rank of each value mapped linearly onto [-0.5, 0.5]. Equal values share their
    average rank, so a mirrored pair with equal returns contributes nothing."""
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(len(x))
    _, tie, count = np.unique(x, return_inverse=True, return_counts=True)
    ranks = (np.bincount(tie, weights=ranks) / count)[tie]
    return ranks / max(len(x) - 1, 1) - 0.5


def pair_seeds(seed: int, iteration: int, n_pairs: int) -> list:
    """The seeds of this iteration's pairs: each one names a perturbation and an episode."""
    return [int(s) for s in np.random.default_rng([seed, iteration]).integers(2**31, size=n_pairs)]


def evaluate_mean(policy: dict, env_name: str, episodes: int, seed: int = 10**6) -> np.ndarray:
    return np.array([rollout(policy, env_name, seed + e) for e in range(episodes)])


# ---- Part 1: the initial mean policy ----
def initial_policy(obs_dim: int, n_out: int, hidden: int = 16) -> dict:
    """Return the mean mu_0 of the search distribution: a dict with the keys W1, b1, W2, b2 and the
    shapes of policy_shapes(obs_dim, n_out, hidden), every weight a float zero (np.zeros)."""
    # YOUR CODE HERE (part 1)
    raise NotImplementedError("Part 1: return the zero mean policy (see the docstring)")
    # END OF YOUR CODE


# ---- Part 2: a mirrored pair of perturbed policies ----
def mirrored_pair(policy: dict, seed: int, sigma: float) -> tuple:
    """Eq. (1): return (mu + sigma eps, mu - sigma eps) as two new dicts of new arrays, where
    eps = sample_noise(policy, seed). Do not change `policy` itself."""
    # YOUR CODE HERE (part 2)
    raise NotImplementedError("Part 2: return (mu + sigma eps, mu - sigma eps)")
    # END OF YOUR CODE


# ---- Part 3: the update of the mean ----
def update_mean_policy(
    policy: dict, seeds: list, F_plus: np.ndarray, F_minus: np.ndarray, sigma: float, alpha: float
) -> dict:
    """Return the new mean, for n pairs with seeds[i], fitness F_plus[i] (of mu + sigma eps_i) and
    F_minus[i] (of mu - sigma eps_i), eps_i = sample_noise(policy, seeds[i]):

        mu_new = mu + alpha / (2 n sigma) * sum_i (F_plus[i] - F_minus[i]) * eps_i      (Eq. 5)

    (one term for every key). Do not change `policy` itself."""
    # YOUR CODE HERE (part 3)
    raise NotImplementedError("Part 3: return the updated mean (see the formula in the docstring)")
    # END OF YOUR CODE


# ---- Part 4: the evaluation that runs on a worker ----
def evaluate_pair(policy: dict, seed: int, sigma: float, env_name: str) -> tuple:
    """Eqs. (2), (3): the returns R+ and R- of one pair, on a worker process (or a Ray worker).
    Rebuild the pair of `seed` with mirrored_pair, play one episode with each policy, both from
    env_seed = seed (see rollout), and return (seed, return_plus, return_minus): two numbers, never
    the weights, and the seed, which tells the master whose returns they are."""
    # YOUR CODE HERE (part 4)
    raise NotImplementedError("Part 4: rebuild the pair, play both episodes, return (seed, R+, R-)")
    # END OF YOUR CODE


# ---- Part 5: the training loop ----
def train(
    env_name, executor, iterations, n_pairs, sigma, alpha, seed=0, hidden=16, target=None, log=print
) -> dict:
    """Return the trained mean policy. Start from initial_policy (env = gym.make(env_name) gives
    obs_dim = env.observation_space.shape[0] and n_out = n_outputs(env.action_space)). At each
    iteration = 0, 1, ..., iterations - 1:
      1. seeds = pair_seeds(seed, iteration, n_pairs);
      2. submit evaluate_pair(mu, s, sigma, env_name) for every seed s with executor.submit, so
         that the pairs run in parallel, and only then collect every future's result();
      3. rank all 2 n returns together with centered_ranks (Eq. 4), then split the ranks back into
         F_plus (the first n) and F_minus, each in the order of the seeds the results carry;
      4. mu = update_mean_policy(mu, seeds, F_plus, F_minus, sigma, alpha);
      5. log(...) one line with the iteration and the mean of the 2 n returns;
      6. stop there, returning mu, if target is not None and that mean is at least target."""
    # YOUR CODE HERE (part 5)
    raise NotImplementedError("Part 5: write the training loop (steps 1-6 in the docstring)")
    # END OF YOUR CODE


# ---- plumbing: the command line and the workers, in tests/nes_runner.py (nothing to change) ----
def main(argv=None):
    """--check: the checker's verdict on each part; without it, the training of the five parts."""
    sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))
    try:
        import nes_runner
    except ModuleNotFoundError as e:  # a copy of this file without its tests/ folder
        sys.exit(f"nes_exercise.py: error: tests/{e.name}.py is missing (see the repository)")
    return nes_runner.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
