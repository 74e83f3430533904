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
import os
import signal
import socket
import sys
import threading
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

os.environ.setdefault("OMP_NUM_THREADS", "1")
import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

# ==============================================================================================
# Given: the policy, its actions, rollouts, and small environments for debugging
# ==============================================================================================
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


class QuadraticEnv(gym.Env):
    """One step, for debugging: the observation is fixed and the return is -|a - a*|^2, so the best
    possible return is 0 and the gradient of the return is known."""
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    TARGET = np.array([0.5, -0.3])

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([1.0, 0.5, -0.5, 0.25], np.float32), {}

    def step(self, action):
        return self.reset()[0], -float(np.sum((action - self.TARGET) ** 2)), True, False, {}


gym.register("Quadratic-v0", entry_point=QuadraticEnv)
_envs = {}  # one environment per process and name, made on first use


def rollout(policy: dict, env_name: str, env_seed: int) -> float:
    """The return of one episode of `policy`, started from `env_seed`."""
    if env_name not in _envs:
        _envs[env_name] = gym.make(env_name)
    env = _envs[env_name]
    obs, _ = env.reset(seed=env_seed)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(compute_action(policy, obs, env.action_space))
        total, done = total + float(reward), terminated or truncated
    return total


def n_outputs(action_space) -> int:
    """Outputs of the network: one per action (Discrete) or per action dimension (Box)."""
    return int(action_space.n) if isinstance(action_space, gym.spaces.Discrete) else action_space.shape[0]


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


# ==============================================================================================
# Part 1: the initial mean policy
# ==============================================================================================
def initial_policy(obs_dim: int, n_out: int, hidden: int = 16) -> dict:
    """Return the mean mu_0 of the search distribution: a dict with the keys W1, b1, W2, b2 and the
    shapes of policy_shapes(obs_dim, n_out, hidden), every weight zero."""
    # YOUR CODE HERE (part 1)
    raise NotImplementedError("Part 1: return the zero mean policy (see the docstring)")
    # END OF YOUR CODE


# ==============================================================================================
# Part 2: a mirrored pair of perturbed policies
# ==============================================================================================
def mirrored_pair(policy: dict, seed: int, sigma: float) -> tuple:
    """Eq. (1): return (mu + sigma eps, mu - sigma eps) as two new dicts, where
    eps = sample_noise(policy, seed).
    Do not change `policy` itself."""
    # YOUR CODE HERE (part 2)
    raise NotImplementedError("Part 2: return (mu + sigma eps, mu - sigma eps)")
    # END OF YOUR CODE


# ==============================================================================================
# Part 3: the update of the mean
# ==============================================================================================
def update_mean_policy(policy: dict, seeds: list, F_plus: np.ndarray, F_minus: np.ndarray,
                       sigma: float, alpha: float) -> dict:
    """Return the new mean, for n pairs with seeds[i], fitness F_plus[i] (of mu + sigma eps_i) and
    F_minus[i] (of mu - sigma eps_i), eps_i = sample_noise(policy, seeds[i]):

        mu_new = mu + alpha / (2 n sigma) * sum_i (F_plus[i] - F_minus[i]) * eps_i      (Eq. 5)

    (one term for every key). Do not change `policy` itself."""
    # YOUR CODE HERE (part 3)
    raise NotImplementedError("Part 3: return the updated mean (see the formula in the docstring)")
    # END OF YOUR CODE


# ==============================================================================================
# Part 4: the evaluation that runs on a worker
# ==============================================================================================
def evaluate_pair(policy: dict, seed: int, sigma: float, env_name: str) -> tuple:
    """Eqs. (2), (3): the returns R+ and R- of one pair. Runs on a worker process (or a Ray worker).
    Rebuild the pair of `seed` with mirrored_pair, play one episode with each policy, both from the
    same env_seed = seed (see rollout), and return (seed, return_plus, return_minus): the seed and
    two numbers, never the weights."""
    # YOUR CODE HERE (part 4)
    raise NotImplementedError("Part 4: rebuild the pair from the seed, play both episodes, return (seed, R+, R-)")
    # END OF YOUR CODE


# ==============================================================================================
# Part 5: the training loop
# ==============================================================================================
def train(env_name: str, executor, iterations: int, n_pairs: int, sigma: float, alpha: float,
          seed: int = 0, hidden: int = 16, log=print) -> dict:
    """Return the trained mean policy. Start from initial_policy (env = gym.make(env_name) gives
    obs_dim = env.observation_space.shape[0] and n_out = n_outputs(env.action_space)). At each iteration:
      1. seeds = pair_seeds(seed, iteration, n_pairs);
      2. submit evaluate_pair(mu, s, sigma, env_name) for every seed s with executor.submit, so that
         the pairs run in parallel, then collect every future's result();
      3. shape all 2 n returns together with centered_ranks (Eq. 4), split them back into F_plus, F_minus;
      4. mu = update_mean_policy(mu, seeds, F_plus, F_minus, sigma, alpha);
      5. log one line with the iteration and the mean of the 2 n returns."""
    # YOUR CODE HERE (part 5)
    raise NotImplementedError("Part 5: write the training loop (steps 1-5 in the docstring)")
    # END OF YOUR CODE


# ==============================================================================================
# Given: the checker and the command line (nothing to change below)
# ==============================================================================================
class SerialExecutor:
    """executor.submit(fn, *args) run on the spot: what the checker uses."""

    def __init__(self):
        self.calls = []

    def submit(self, fn, *args):
        from concurrent.futures import Future
        self.calls.append(args)
        future = Future()
        future.set_result(fn(*args))
        return future


class RayExecutor:
    """The same submit(fn, *args) -> future on Ray: fn becomes a Ray remote function, a task that Ray
    runs again if its worker dies (the pair's seed names all its randomness: same result)."""

    def __init__(self, address=None):
        try:
            import ray
        except ImportError:
            print("nes_exercise.py: error: --ray needs Ray, which is not installed: pip install ray", file=sys.stderr)
            sys.exit(2)
        host, _, port = (address or "").removeprefix("ray://").rpartition(":")
        if address not in (None, "auto", "local") and not (host and port.isdigit() and 0 < int(port) < 65536):
            print(f"nes_exercise.py: error: --ray-address must be HOST:PORT, ray://HOST:PORT, auto or local, "
                  f"got '{address}'", file=sys.stderr)
            sys.exit(2)
        if host:  # Ray itself would retry an unreachable address for minutes
            try:
                socket.create_connection((host, int(port)), timeout=10).close()
            except OSError:
                print(f"nes_exercise.py: error: no Ray cluster answers at {address}; start one with "
                      "'ray start --head' or check the address", file=sys.stderr)
                sys.exit(2)
        self.ray, self.remote, self.started = ray, {}, not ray.is_initialized()
        self.policy_key = self.policy_ref = None
        if self.started:
            try:
                ray.init(address=address, log_to_driver=False, include_dashboard=False)
            except Exception as e:  # e.g. no cluster for 'auto', or ray:// without ray[client]
                print(f"nes_exercise.py: error: Ray did not start: {first_line(e)}", file=sys.stderr)
                sys.exit(2)
        if __name__ != "__main__":  # imported: send this file's functions to the workers by value
            ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    def submit(self, fn, *args):
        if fn not in self.remote:  # registered with the cluster once, not once per task
            self.remote[fn] = self.ray.remote(max_retries=3)(fn)
        return self.remote[fn].remote(*map(self.put_policy, args)).future()

    def put_policy(self, arg):
        """A policy (a dict of arrays) goes into Ray's object store once per iteration, where each
        machine fetches it once; the tasks carry its reference. Other arguments travel as they are."""
        if not isinstance(arg, dict):
            return arg
        key = b"".join(np.asarray(v).tobytes() for v in arg.values())
        if key != self.policy_key:
            self.policy_key, self.policy_ref = key, self.ray.put(arg)
        return self.policy_ref

    def shutdown(self, wait=True, cancel_futures=False):
        """As ProcessPoolExecutor.shutdown: stops the Ray this executor started, with its pending tasks."""
        if self.started:
            self.ray.shutdown()


class CheckFailed(Exception):
    pass


def _expect(ok: bool, message: str):
    if not ok:
        raise CheckFailed(message)


def _tiny_policy() -> dict:
    rng = np.random.default_rng(7)
    return {k: rng.normal(size=s) for k, s in policy_shapes(4, 2, 3).items()}


def _same(a: dict, b: dict) -> bool:
    return isinstance(a, dict) and set(a) == set(KEYS) and all(np.shape(a[k]) == np.shape(b[k]) and
                                                              np.allclose(a[k], b[k]) for k in KEYS)


def _peek(policy) -> str:
    try:
        return str(np.asarray(policy["W1"])[0, :2])
    except Exception:
        return f"a {type(policy).__name__}"


def check_part1():
    mu = initial_policy(4, 2, 16)
    _expect(isinstance(mu, dict) and set(mu) == set(KEYS),
            f"expected a dict with the keys {KEYS}, got {type(mu).__name__} "
            f"{sorted(mu) if isinstance(mu, dict) else ''}")
    for k, shape in policy_shapes(4, 2, 16).items():
        _expect(np.shape(mu[k]) == shape, f"{k} should have shape {shape}, got {np.shape(mu[k])}; "
                "see policy_shapes")
        _expect(np.all(np.asarray(mu[k]) == 0), f"{k} should be all zeros")


def check_part2():
    mu, sigma = _tiny_policy(), 0.1
    before = {k: v.copy() for k, v in mu.items()}
    pair = mirrored_pair(mu, 3, sigma)
    _expect(isinstance(pair, tuple) and len(pair) == 2, "return a tuple (plus, minus) of two dicts")
    plus, minus = pair
    _expect(_same(mu, before), "mirrored_pair changed the policy it was given; build new dicts")
    eps = sample_noise(mu, 3)
    want_plus, want_minus = ({k: mu[k] + s * sigma * eps[k] for k in KEYS} for s in (1, -1))
    if _same(plus, want_minus) and _same(minus, want_plus):
        raise CheckFailed("plus and minus are swapped: plus is mu + sigma eps")
    if _same(plus, {k: mu[k] + eps[k] for k in KEYS}):
        raise CheckFailed("the perturbation is not scaled: use mu + sigma * eps")
    _expect(_same(plus, want_plus), "plus should be mu + sigma * eps with eps = sample_noise(policy, seed); "
            f"expected W1[0, :2] = {want_plus['W1'][0, :2]}, got {_peek(plus)}")
    _expect(_same(minus, want_minus), "minus should be mu - sigma * eps, the mirror image of plus (the same eps); "
            f"expected W1[0, :2] = {want_minus['W1'][0, :2]}, got {_peek(minus)}")


def check_part3():
    mu, sigma, alpha = _tiny_policy(), 0.1, 0.05
    before = {k: v.copy() for k, v in mu.items()}
    seeds, F_plus, F_minus = [11, 12, 13], np.array([0.5, -0.25, 0.1]), np.array([-0.3, 0.25, 0.0])
    new = update_mean_policy(mu, seeds, F_plus, F_minus, sigma, alpha)
    _expect(_same(mu, before), "update_mean_policy changed the policy it was given; return a new dict")
    _expect(isinstance(new, dict) and set(new) == set(KEYS), f"return a dict with the keys {KEYS}")
    n = len(seeds)
    step = {k: sum(alpha / (2 * n * sigma) * (fp - fm) * sample_noise(mu, s)[k]
                   for s, fp, fm in zip(seeds, F_plus, F_minus)) for k in KEYS}
    got = {k: new[k] - mu[k] for k in KEYS}
    ratio = sum(float(np.sum(got[k] * step[k])) for k in KEYS) / sum(float(np.sum(step[k] ** 2)) for k in KEYS)
    hints = [(-1.0, "sign error: the mean must move towards the member with the higher fitness, "
                    "+(F_plus - F_minus) * eps"),
             (sigma, "missing 1/sigma: divide by (2 n sigma)"), (sigma**2, "sigma is multiplied, not divided"),
             (2.0, "the sum is divided by n instead of 2 n"), (n, "the sum is divided by 2 instead of 2 n"),
             (2 * n, "no division by the number of episodes (2 n)"),
             (2 * n * sigma, "the step is alpha * sum(...), without 1 / (2 n sigma)")]
    if not all(np.allclose(got[k], step[k]) for k in KEYS):
        for factor, hint in hints:
            if np.isclose(ratio, factor, rtol=1e-6):
                raise CheckFailed(hint)
        raise CheckFailed(f"the step differs from alpha / (2 n sigma) * sum_i (F+_i - F-_i) eps_i "
                          f"(its projection on the right step is {ratio:.3g} times it)")


def check_part4():
    mu, sigma = _tiny_policy(), 0.5
    mu = {**mu, "W1": np.abs(mu["W1"])}
    out = evaluate_pair(mu, 5, sigma, "CartPole-v1")
    _expect(isinstance(out, tuple) and len(out) == 3, "return a tuple (seed, return_plus, return_minus)")
    seed, r_plus, r_minus = out
    for value, name in ((r_plus, "return_plus"), (r_minus, "return_minus")):
        _expect(not isinstance(value, (dict, np.ndarray, list)),
                f"{name} is a {type(value).__name__}: return the episode's return, a number, never the weights")
    _expect(seed == 5, f"the first element should be the seed you were given (5), got {seed!r}")
    plus, minus = mirrored_pair(mu, 5, sigma)
    want = (rollout(plus, "CartPole-v1", 5), rollout(minus, "CartPole-v1", 5))
    if (r_plus, r_minus) == want[::-1] and want[0] != want[1]:
        raise CheckFailed("return_plus and return_minus are swapped")
    _expect((float(r_plus), float(r_minus)) == want,
            f"expected the returns {want} of rollout(plus, env_name, seed) and rollout(minus, env_name, seed), "
            f"got {(r_plus, r_minus)}: use the pair's seed as the env_seed of both episodes")


def check_part5():
    executor, lines = SerialExecutor(), []
    mu = train("Quadratic-v0", executor, iterations=60, n_pairs=10, sigma=0.1, alpha=0.1, seed=1,
               hidden=8, log=lines.append)
    _expect(isinstance(mu, dict) and set(mu) == set(KEYS), "train should return the mean policy, a dict")
    _expect(len(executor.calls) == 60 * 10, f"expected 600 calls of executor.submit (60 iterations x 10 pairs), "
            f"got {len(executor.calls)}: submit one evaluate_pair per seed")
    _expect(len(lines) == 60, f"expected one log line per iteration (60), got {len(lines)}")
    start = rollout(initial_policy(4, 2, 8), "Quadratic-v0", 0)
    end = rollout(mu, "Quadratic-v0", 0)
    _expect(end > 0.5 * start, f"on Quadratic-v0 the return went from {start:.3f} to {end:.3f}; it should "
            "approach 0. Check the signs and the ranks split: F[:n] are the plus returns")


PARTS = [("Part 1", "initial_policy", check_part1), ("Part 2", "mirrored_pair", check_part2),
         ("Part 3", "update_mean_policy", check_part3), ("Part 4", "evaluate_pair", check_part4),
         ("Part 5", "train", check_part5)]


def run_check(part) -> tuple:
    """(status, message) of one part: 'passed', 'not implemented yet' or 'wrong'."""
    name, function, check = part
    try:
        check()
    except NotImplementedError:
        return "not implemented yet", f"{function} still raises NotImplementedError"
    except CheckFailed as e:
        return "wrong", str(e)
    except Exception as e:  # a half-done part: report it, never crash
        return "wrong", f"{function} raised {type(e).__name__}: {e}"
    return "passed", ""


def check_all(out=print) -> bool:
    for part in PARTS:
        status, message = run_check(part)
        out(f"{part[0]} ({part[1]}): {status}" + (f": {message}" if message else ""))
        if status != "passed":
            out(f"Next: open {os.path.basename(__file__)}, find '{part[0]}', complete {part[1]} (read its "
                "docstring), then run --check again." if status == "not implemented yet" else
                f"Next: fix {part[1]} in {os.path.basename(__file__)}, then run --check again.")
            return False
    out("All five parts pass. Train with: python " + os.path.relpath(__file__))
    return True


CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
MAX_PAIRS = 10_000  # 20,000 episodes per iteration


def first_line(e: Exception) -> str:
    """The first line of an exception's message, for a one-line error."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0].rstrip(".")


def newer_version(env_id: str) -> str:
    """'; try HalfCheetah-v5, the newest version' when a newer version of env_id is registered."""
    namespace, name, version = gym.envs.registration.parse_env_id(env_id)
    newest = gym.envs.registration.find_highest_version(namespace, name)
    if version is None or newest is None or newest <= version:
        return ""
    return f"; try {gym.envs.registration.get_env_id(namespace, name, newest)}, the newest version"


def env_error(env_id: str):
    """Why env_id cannot be trained here, in one line, or None if it can."""
    if env_id not in gym.registry:
        return f"unknown environment '{env_id}'"
    try:
        with warnings.catch_warnings():  # an old version's warning takes lines; the error says it in one
            warnings.simplefilter("ignore")
            env = gym.make(env_id)
    except Exception as e:  # registered but not usable here: an old version, a missing extra (jax, box2d, ...)
        return f"cannot make '{env_id}': {first_line(e)}{newer_version(env_id)}"
    space = env.observation_space
    env.close()
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        return f"'{env_id}' observations must be a flat vector for this network, got {space}"
    return None


def init_worker():
    """Runs in each local worker process as it starts: Ctrl-C and SIGTERM are the master's to
    handle, and a thread ends the worker within a second of its master's death (even by kill -9)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    master = os.getppid()

    def watch():
        while os.getppid() == master:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def stop_on_sigterm(signum, frame):
    raise KeyboardInterrupt  # SIGTERM (kill, timeout) stops the run like Ctrl-C


STOPS = []  # the signals of a stop under way (Ctrl-C or SIGTERM on the command line)


def stop_remembered(signum, frame):
    """Ctrl-C and SIGTERM on the command line: stop_on_sigterm, remembered in STOPS. The
    KeyboardInterrupt can land inside the pool's own locking and come out of train as another
    error (RuntimeError: cannot release un-acquired lock), which main then still treats as a stop."""
    STOPS.append(signum)
    stop_on_sigterm(signum, frame)


def main(argv=None):
    p = argparse.ArgumentParser(description="NES class exercise: complete the parts, --check them, then train.",
                                allow_abbrev=False)
    p.error = lambda message: p.exit(2, f"nes_exercise.py: error: {message} (see --help)\n")
    p.add_argument("--check", action="store_true", help="check the parts in order and say what to do next")
    p.add_argument("--env", default="CartPole-v1", help="gymnasium environment id")
    p.add_argument("--iterations", type=int, default=50, help="updates of the mean")
    p.add_argument("--pairs", type=int, default=25, help="n, mirrored pairs per iteration (at most 10000)")
    p.add_argument("--sigma", type=float, default=0.1, help="σ, std of the perturbations")
    p.add_argument("--alpha", type=float, default=0.05, help="α, step size")
    p.add_argument("--seed", type=int, default=0, help="decides the pairs' seeds (0 or more)")
    p.add_argument("--workers", type=int, default=CORES,
                   help="worker processes (default: all cores; at most 4 per core)")
    p.add_argument("--ray", action="store_true", help="evaluate the pairs on Ray instead of local processes")
    p.add_argument("--ray-address", help="an existing Ray cluster, e.g. 127.0.0.1:6379")
    args = p.parse_args(argv)
    if args.check:
        sys.exit(0 if check_all() else 1)
    # Caps: a population or a pool too large for memory is refused here, not by a MemoryError later
    for ok, message in ((args.iterations >= 1, "--iterations must be positive"),
                        (1 <= args.pairs <= MAX_PAIRS, f"--pairs must be between 1 and {MAX_PAIRS}"),
                        (0 < args.sigma < np.inf, "--sigma must be positive and finite"),
                        (0 < args.alpha < np.inf, "--alpha must be positive and finite"),
                        (1 <= args.workers <= 4 * CORES, f"--workers must be between 1 and {4 * CORES} "
                         "(4 per core on this machine; more only adds processes)"),
                        (args.seed >= 0, "--seed must be 0 or more"),
                        (args.ray or not args.ray_address, "--ray-address needs --ray")):
        if not ok:
            p.error(message)
    message = env_error(args.env)
    if message:
        p.error(message)
    if not all(run_check(part)[0] == "passed" for part in PARTS):
        p.exit(2, "nes_exercise.py: error: some parts are not done yet; run: python nes_exercise.py --check\n")
    executor = RayExecutor(args.ray_address) if args.ray else ProcessPoolExecutor(args.workers,
                                                                                   initializer=init_worker)
    t0 = time.time()
    stopped = False
    try:
        mu = train(args.env, executor, args.iterations, args.pairs, args.sigma, args.alpha, args.seed)
    except BaseException as e:  # Ctrl-C or SIGTERM: stop the local workers now, mid-episode
        if not (STOPS or isinstance(e, KeyboardInterrupt)):
            raise  # an error in train itself: its traceback shows where
        procs = list((getattr(executor, "_processes", None) or {}).values())
        for proc in procs:
            proc.terminate()
        for proc in procs:  # reaped before the script exits: no orphan, even on a loaded machine
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        stopped = True
        raise KeyboardInterrupt from None
    finally:  # the pairs not started yet are dropped. After a stop, without waiting for the pool's
        # manager thread, which can wait forever once its workers are killed (python/cpython#94440);
        # the script then ends with os._exit (below), which does not wait for that thread either.
        executor.shutdown(wait=not stopped, cancel_futures=True)
    if not all(np.isfinite(mu[k]).all() for k in KEYS):
        p.exit(1, "nes_exercise.py: error: the mean policy became NaN or inf; try a smaller --alpha or a larger "
               "--sigma\n")
    returns = evaluate_mean(mu, args.env, 100)
    print(f"mean policy: {returns.mean():.1f} +- {returns.std():.1f} over 100 episodes ({time.time() - t0:.0f} s)")
    return mu, returns


if __name__ == "__main__":
    # Ctrl-C (SIGINT) raises KeyboardInterrupt, even in a job started in the background (there it
    # begins ignored, and the run could not be stopped)
    signal.signal(signal.SIGINT, stop_remembered)
    signal.signal(signal.SIGTERM, stop_remembered)
    try:
        main()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C while Python shuts down
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("nes_exercise.py: interrupted", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)  # not sys.exit: Python's exit would join the pool's manager thread (python/cpython#83386)
