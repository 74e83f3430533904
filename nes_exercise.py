"""Class exercise: natural evolution strategies (NES), evaluated in parallel.

You will train a small neural-network policy for CartPole-v1 without a single gradient of the
network: keep a Gaussian distribution over its weights, try mirrored pairs of perturbed weights
in parallel, and move the mean towards the better ones. The handout is docs/nes_exercise.md.

Complete the five parts marked "YOUR CODE HERE", in order. After each one, run the checker:

    python nes_exercise.py --check      # says which part passes, and what to do next
    python nes_exercise.py              # trains CartPole-v1 once every part passes
    python nes_exercise.py --ray        # the same code on Ray (pip install ray)
"""

import argparse
import ctypes
import importlib.util
import math
import multiprocessing as mp
import os
import signal
import socket
import sys
import time
from concurrent.futures import ProcessPoolExecutor

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
    rng = np.random.default_rng(seed)
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


# ---- Given: running the parts (nothing to change below; the checker is tests/nes_checker.py) ----
class RayExecutor:
    """executor.submit(fn, *args) -> future, on Ray: a task Ray reruns if its worker dies (the
    pair's seed names all its randomness: the same result). error(message): one line, exit 2."""

    def __init__(self, address=None, error=sys.exit):
        try:
            import ray
        except ImportError:
            error("--ray needs Ray: pip install ray")
        host, _, port = (address or "").removeprefix("ray://").rpartition(":")
        try:  # Ray itself would retry an address that does not answer for minutes
            if host and port.isdigit():
                socket.create_connection((host, int(port)), timeout=10).close()
            if not ray.is_initialized():
                ray.init(address=address, log_to_driver=False, include_dashboard=False)
        except Exception as e:
            why = (str(e).strip() or type(e).__name__).splitlines()[0]
            error(f"no Ray cluster answers at {address} ({why})")
        self.ray, self.remote = ray, {}

    def submit(self, fn, *args):
        if fn not in self.remote:  # the functions of imported files go to the workers by value
            for name in {fn.__module__, __name__} - {"__main__"}:
                self.ray.cloudpickle.register_pickle_by_value(sys.modules[name])
            self.remote[fn] = self.ray.remote(max_retries=3)(fn)
        return self.remote[fn].remote(*args).future()

    def shutdown(self, wait=True, cancel_futures=False):
        pass


def checker():
    """tests/nes_checker.py, the checker of the five parts."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests", "nes_checker.py")
    if not os.path.exists(path):
        sys.exit(f"nes_exercise.py: error: the checker {path} is missing (see the repository)")
    spec = importlib.util.spec_from_file_location("nes_checker", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def positive(kind, zero=False):  # an argparse type: a finite number above 0 (or 0 if zero)
    def number(text: str):
        value = kind(text)
        if not (value >= 0 if zero else value > 0) or value == math.inf:
            sign = ">=" if zero else ">"
            raise argparse.ArgumentTypeError(f"must be finite, {sign} 0; got {text}")
        return value

    number.__name__ = kind.__name__  # argparse's "invalid int value" names it
    return number


def init_worker():  # a worker process: Ctrl-C is the master's; it ends with the master (Linux)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


class Parser(argparse.ArgumentParser):
    """argparse, with a mistake in one line: 'nes_exercise.py: error: ... (see --help)', exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> Parser:
    description = "NES class exercise: complete the parts, --check them, then train."
    p = Parser(prog="nes_exercise.py", description=description)
    a = p.add_argument
    a("--check", action="store_true", help="check the parts, say what to do next")
    a("--env", default="CartPole-v1", help="gymnasium environment id (default CartPole-v1)")
    a("--iterations", type=positive(int), default=100, help="updates of the mean, at most (100)")
    a("--pairs", type=positive(int), default=20, help="n, mirrored pairs an iteration (20)")
    a("--sigma", type=positive(float), default=0.1, help="σ, std of the noise (0.1)")
    a("--alpha", type=positive(float), default=0.1, help="α, step size (0.1)")
    a("--target-return", type=float, default=475.0, help="stop at this mean return (475)")
    a("--seed", type=positive(int, zero=True), default=0, help="seeds the pairs (0)")
    a("--workers", type=positive(int), default=os.cpu_count(), help="processes (all cores)")
    a("--ray", action="store_true", help="evaluate the pairs on Ray (pip install ray)")
    a("--ray-address", help="with --ray: an existing cluster, e.g. 127.0.0.1:6379")
    return p


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    me = sys.modules[__name__]
    if args.check:
        sys.exit(0 if checker().check(me) else 1)
    if not checker().check(me, out=lambda line: None):
        p.error("some parts are not done yet; run: python nes_exercise.py --check")
    try:
        space = gym.make(args.env).observation_space
    except (gym.error.Error, ImportError) as e:  # unknown, retired, or missing an extra
        p.error(str(e))
    if len(space.shape or ()) != 1:
        p.error(f"{args.env}: the network takes a flat vector of observations, not {space}")
    ray = args.ray or args.ray_address  # an address says where Ray is: it means --ray
    if ray:
        executor = RayExecutor(args.ray_address, p.error)
    else:
        executor = ProcessPoolExecutor(args.workers, initializer=init_worker)
    t0 = time.time()
    hyper = dict(iterations=args.iterations, n_pairs=args.pairs, sigma=args.sigma, alpha=args.alpha)
    mu = train(args.env, executor, **hyper, seed=args.seed, target=args.target_return)
    executor.shutdown()
    if not all(np.isfinite(mu[k]).all() for k in KEYS):
        p.exit(1, "nes_exercise.py: error: the mean became NaN or inf: alpha / sigma too large\n")
    returns = evaluate_mean(mu, args.env, 100)
    took = f"({time.time() - t0:.0f} s)"
    print(f"mean policy: {returns.mean():.1f} +- {returns.std():.1f} over 100 episodes {took}")
    return mu, returns


def stop(signum, frame):  # Ctrl-C or SIGTERM: the workers end at once, mid-episode, then the run
    for proc in mp.active_children():
        proc.kill()
    print("nes_exercise.py: interrupted", file=sys.stderr, flush=True)
    os._exit(130)  # not sys.exit, which would wait for the pool's threads


if __name__ == "__main__":
    signal.signal(signal.SIGINT, stop)  # also in a job started with '&' (SIGINT starts ignored)
    signal.signal(signal.SIGTERM, stop)
    main()
