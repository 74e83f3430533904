"""OpenAI evolution strategies: the full method with a NumPy MLP and a shared noise table.

Salimans, Ho, Chen, Sidor & Sutskever (2017), "Evolution Strategies as a Scalable Alternative to
Reinforcement Learning", https://arxiv.org/abs/1703.03864, Algorithm 2 and its tricks: fitness
shaping, mirrored sampling, Adam, weight decay, observation normalization, action noise and
discretization, a noise table shared by every worker. The math is in docs/es_openai.md; comments
below cite its equations as "Eq. (n)".

    python es_openai.py --env HalfCheetah-v5        # train with the environment's preset
    python es_openai.py --evaluate-snapshots runs/<run-dir> --episodes 5
"""
import argparse
import copy
import csv
import datetime
import difflib
import errno
import json
import math
import multiprocessing as mp
import multiprocessing.connection
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing import shared_memory
from typing import NamedTuple

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one BLAS thread per process: workers own the cores
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
import numpy as np  # noqa: E402

# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------

# The paper's MuJoCo policy (2x64 tanh; 10 action bins for Hopper and Swimmer) with the starter
# code's l2coeff 0.005 and action noise 0.01. sigma 0.05 and Adam 0.03 (starter code: 0.02 and
# 0.01; Swimmer and Hopper keep the starter's) and the populations were tuned here for the Table 3
# anchors (docs/es_openai.md, "Presets").
MUJOCO = dict(hidden="64,64", sigma=0.05, alpha=0.03, l2coeff=0.005, ac_noise_std=0.01, eval_every=5,
              eval_episodes=5)
PRESETS = {
    "HalfCheetah-v5": dict(MUJOCO, population=40, iterations=150, target_return=2385.79),
    "Swimmer-v5": dict(MUJOCO, sigma=0.02, alpha=0.01, population=40, ac_bins=10, iterations=100,
                       target_return=128.25),
    "Hopper-v5": dict(MUJOCO, sigma=0.02, alpha=0.01, population=100, ac_bins=10, iterations=1000,
                      target_return=3403.46),
    "CartPole-v1": dict(hidden="16", sigma=0.05, alpha=0.03, l2coeff=0.005, population=40, iterations=100,
                        eval_every=5, eval_episodes=20, target_return=475.0),
}
GENERIC = dict(hidden="64,64", sigma=0.02, alpha=0.01, l2coeff=0.005, population=40, ac_bins=0,
               iterations=200, eval_every=10, eval_episodes=10)


def available_cores() -> int:
    """The cores this process may use (a CPU affinity mask or a container can allow fewer than exist)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Parser(argparse.ArgumentParser):
    def __init__(self, **kw):
        super().__init__(allow_abbrev=False, **kw)  # --iter is no --iterations: --resume must see every flag

    def error(self, message):  # one line, not the whole usage block
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="es_openai.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="OpenAI evolution strategies (Salimans et al. 2017, Algorithm 2) with a NumPy MLP.",
        epilog="presets (any flag overrides its preset; other environments use the generic row):\n"
        + "\n".join(f"  {k:15s} " + ", ".join(f"{a}={v}" for a, v in d.items())
                    for k, d in list(PRESETS.items()) + [("(generic)", GENERIC)]))
    a = p.add_argument
    a("--env", default="HalfCheetah-v5", help="gymnasium id with Box or Discrete actions")
    a("--seed", type=int, default=0, help="decides every random number of the run except the noise table")
    a("--iterations", type=int, help="generations, updates of theta (preset)")
    a("--population", type=int, help="n, training episodes per generation, population_size (typ. 40-10000)")
    a("--min-timesteps", type=int, default=0, help="a generation also needs this many env steps (starter: "
      "100000; 0: off)")
    a("--sigma", type=float, help="σ, noise_stdev, std of the parameter noise (typ. 0.01-0.05)")
    a("--optimizer", choices=("adam", "sgd", "plain"), default="adam",
      help="adam, sgd (with momentum) or plain gradient steps")
    a("--alpha", type=float, help="α, the optimizer's step size (typ. 0.001-0.03)")
    a("--momentum", type=float, default=0.9, help="γ, SGD momentum (typ. 0.9)")
    a("--beta1", type=float, default=0.9, help="Adam β1")
    a("--beta2", type=float, default=0.999, help="Adam β2")
    a("--l2coeff", type=float, help="λ, L2 weight decay coefficient (typ. 0-0.01; starter 0.005)")
    a("--fitness", choices=("centered_rank", "sign", "centered_sign_rank", "none"), default="centered_rank",
      help="return_proc_mode: how returns become weights (Eqs. 4-5)")
    a("--no-mirror", dest="mirror", action="store_false", help="plain sampling instead of mirrored pairs")
    a("--hidden", help="hidden layer sizes, e.g. 64,64 or 256,256 (preset)")
    a("--activation", choices=("tanh", "relu", "lrelu", "elu"), default="tanh", help="hidden nonlinearity")
    a("--no-obs-norm", dest="obs_norm", action="store_false", help="feed raw observations to the policy")
    a("--calc-obstat-prob", type=float, default=0.01,
      help="share of training pairs whose observations update the statistics (typ. 0.01)")
    a("--ac-noise-std", type=float, help="σ_a, std of the noise added to training actions (Box only; "
      "default 0.01 for Box, 0 for Discrete)")
    a("--ac-bins", type=int, help="discretize each action dimension into K uniform bins (0: continuous)")
    a("--eval-prob", type=float, default=0.0, help="share of population jobs (pairs, or single episodes "
      "with --no-mirror) replaced by one episode of the noiseless policy (starter 0.003)")
    a("--noise-size", type=int, default=250_000_000, help="float32 numbers in the noise table (starter 250M, 1 GB)")
    a("--noise-seed", type=int, default=123, help="seed of the noise table (starter 123)")
    a("--episode-length", type=int, help="steps per episode (default: the env's time limit)")
    a("--workers", type=int, help="rollout processes (default: all cores; with --ray, the cluster's CPUs)")
    a("--lockstep", type=int, default=4, metavar="P", help="P, mirrored pairs a worker steps together, one "
      "policy call per step for all 2P episodes (typ. 1-4; speed only: the results do not change)")
    a("--out-dir", default="runs", help="where run directories are created")
    a("--eval-every", type=int, help="evaluate the noiseless policy every K generations (preset)")
    a("--eval-episodes", type=int, help="episodes per evaluation (preset)")
    a("--save-every", type=int, default=10, help="snapshot_freq: keep a snapshot every K generations")
    a("--target-return", type=float, help="stop once the evaluation mean reaches R")
    a("--resume", metavar="RUN_DIR", help="continue the run saved in RUN_DIR")
    a("--play", metavar="RUN_DIR", help="evaluate the policy saved in RUN_DIR and exit")
    a("--evaluate-snapshots", metavar="RUN_DIR", help="evaluate every snapshot of RUN_DIR: a table and a plot")
    a("--episodes", type=int, default=10, help="episodes for --play and --evaluate-snapshots")
    a("--video", action="store_true", help="with --play: write RUN_DIR/video/<env>.gif of one episode")
    a("--ray", action="store_true", help="run the rollouts on Ray: start one on this machine, or join "
      "RAY_ADDRESS or --ray-address (pip install ray)")
    a("--ray-address", metavar="ADDRESS", help="with --ray: an existing cluster, e.g. 10.0.0.1:6379 or auto")
    return p


MAX_EPISODES = 10**6  # per evaluation or generation: more is a typo, and its bookkeeping would fill the memory
PLOT_EVERY = 10.0  # seconds: progress.png is redrawn at most this often during a run (a plot costs the master
#                    about 0.2 s while the workers wait), and once more at the end
MAX_UNITS = 10**5  # per layer or action dimension: a 10**5 x 10**5 layer is already 40 GB


class UserError(Exception):
    """A mistake in the command line or the files it names: one line, exit status 2."""


def resolve_config(args: argparse.Namespace) -> argparse.Namespace:
    """Fill unset flags from the preset, then check every option and their combinations before
    anything runs (the source notebooks' asserts become these messages)."""
    for key, value in {**GENERIC, **PRESETS.get(args.env, {})}.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    try:
        args.hidden_sizes = [int(h) for h in str(args.hidden).split(",") if h.strip()]
    except ValueError:
        raise UserError(f"--hidden takes sizes like 64 or 64,64, got '{args.hidden}'") from None
    reals = ("sigma", "alpha", "momentum", "beta1", "beta2", "l2coeff", "calc_obstat_prob", "eval_prob")
    checks = [
        (all(math.isfinite(getattr(args, k)) for k in reals) and
         (args.ac_noise_std is None or math.isfinite(args.ac_noise_std)), "every number must be finite"),
        (args.seed >= 0 and args.noise_seed >= 0, "--seed and --noise-seed must be 0 or more"),
        (args.sigma > 0, "--sigma must be positive"), (args.alpha > 0, "--alpha must be positive"),
        (0 <= args.momentum < 1, "--momentum must be in [0, 1)"),
        (0 <= args.beta1 < 1 and 0 <= args.beta2 < 1, "--beta1 and --beta2 must be in [0, 1)"),
        (args.l2coeff >= 0, "--l2coeff must be 0 or more"),
        (args.population >= 2, "--population must be at least 2 (ranks need two episodes)"),
        (not args.mirror or args.population % 2 == 0,
         f"--population must be even with mirrored sampling, got {args.population} (or add --no-mirror)"),
        (args.min_timesteps >= 0, "--min-timesteps must be 0 or more"),
        (all(h >= 1 for h in args.hidden_sizes), "--hidden sizes must be at least 1"),
        (0 <= args.calc_obstat_prob <= 1, "--calc-obstat-prob must be in [0, 1]"),
        (not args.obs_norm or args.calc_obstat_prob > 0,
         "--calc-obstat-prob must be positive with observation normalization (or add --no-obs-norm)"),
        (0 <= args.eval_prob < 1, "--eval-prob must be in [0, 1)"),
        (args.ac_noise_std is None or args.ac_noise_std >= 0, "--ac-noise-std must be 0 or more"),
        (args.ac_bins == 0 or args.ac_bins >= 2, "--ac-bins must be 0 (continuous) or at least 2"),
        (args.workers is None or args.workers >= 1, "--workers must be at least 1"),
        (args.lockstep >= 1, "--lockstep must be at least 1"),
        (args.ray or not args.ray_address, "--ray-address needs --ray"),
        (args.iterations >= 0, "--iterations must be at least 0"),
        (args.eval_every >= 1 and args.eval_episodes >= 1 and args.save_every >= 1,
         "--eval-every, --eval-episodes and --save-every must be at least 1"),
        (args.episodes >= 1, "--episodes must be at least 1"),
        (max(args.episodes, args.eval_episodes, args.population) <= MAX_EPISODES,
         f"--episodes, --eval-episodes and --population must be at most {MAX_EPISODES:,}"),
        (max(args.hidden_sizes, default=0) <= MAX_UNITS and args.ac_bins <= MAX_UNITS,
         f"--hidden sizes and --ac-bins must be at most {MAX_UNITS:,}"),
        (args.episode_length is None or args.episode_length >= 1, "--episode-length must be at least 1"),
        (args.noise_size >= 1, "--noise-size must be at least 1"),
        (args.target_return is None or not math.isnan(args.target_return), "--target-return must be a number, not nan")]
    for ok, message in checks:
        if not ok:
            raise UserError(message)
    set_workers(args)
    return args


def set_workers(args: argparse.Namespace):
    """--workers defaults to this machine's cores, or with --ray to the cluster's CPUs (Ray is joined
    or started here: a cluster that cannot be reached is refused before anything is written)."""
    cpus = available_cores()
    if args.ray and args.play is None:
        ray = start_ray(args.ray_address)
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    args.workers = args.workers or cpus
    if args.workers > 16 * cpus:  # each worker is a process with an environment: surely a typo
        where = "in the cluster" if args.ray else "here"
        raise UserError(f"--workers {args.workers} is more than 16 per CPU ({cpus} CPUs {where})")


def check_env(args) -> tuple:
    """(obs_dim, action space) of args.env, after checking that the options fit its spaces."""
    import gymnasium as gym
    if args.env not in gym.registry:
        close = difflib.get_close_matches(args.env, list(gym.registry), n=3, cutoff=0.5)
        raise UserError(f"unknown environment '{args.env}'" + (f"; did you mean {', '.join(close)}?" if close
                        else "; see gymnasium.registry for the registered ids"))
    try:
        env = gym.make(args.env)
    except Exception as e:  # a missing extra (box2d, mujoco) or a broken install
        raise UserError(f"cannot create '{args.env}': {str(e).splitlines()[0]}") from None
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise UserError(f"'{args.env}' observations must be a flat Box vector, got {obs_space}")
    if gym.spec(args.env).max_episode_steps is None and not args.episode_length:
        raise UserError(f"'{args.env}' has no time limit: give --episode-length")
    if isinstance(act_space, gym.spaces.Discrete):
        if args.ac_bins:
            raise UserError(f"'{args.env}' has discrete actions already: --ac-bins is for Box actions")
        if args.ac_noise_std:
            raise UserError(f"'{args.env}' has discrete actions: --ac-noise-std is for Box actions")
        args.ac_noise_std = 0.0
    elif isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        if args.ac_bins and not (np.isfinite(act_space.low).all() and np.isfinite(act_space.high).all()):
            raise UserError(f"'{args.env}' has unbounded actions: --ac-bins needs finite bounds")
        args.ac_noise_std = 0.01 if args.ac_noise_std is None else args.ac_noise_std
    else:
        raise UserError(f"'{args.env}' has {type(act_space).__name__} actions; es_openai.py handles Discrete "
                        "and flat Box actions")
    return obs_space.shape[0], act_space


# ----------------------------------------------------------------------------------------------
# The math (docs/es_openai.md, Eqs. 1-11)
# ----------------------------------------------------------------------------------------------

def stream(seed: int, *key: int) -> np.random.Generator:
    """An independent random stream named by what it is for: key = (purpose, iteration, index)."""
    return np.random.default_rng(np.random.SeedSequence([seed, *key]))


TRAIN, EVAL, INIT = 0, 2, 3  # first word of a stream key: what the stream is for (EVAL = 2 as in ars.py)


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Eq. (4): the rank of each value mapped linearly onto [-0.5, 0.5]. Equal values share their
    average rank, so a mirrored pair with equal returns contributes nothing."""
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(len(x))
    _, tie, count = np.unique(x, return_inverse=True, return_counts=True)
    ranks = (np.bincount(tie, weights=ranks) / count)[tie]
    return ranks / max(len(x) - 1, 1) - 0.5


def shape_fitness(returns: np.ndarray, sign_returns: np.ndarray, mode: str) -> np.ndarray:
    """Eqs. (4)-(5), return_proc_mode. returns, sign_returns: (m, 2) mirrored or (m, 1); ranks are
    taken over all of them together, as the paper does."""
    if mode == "centered_rank":  # deviation: tied returns share their average rank (the starter's argsort splits them)
        return centered_ranks(returns.ravel()).reshape(returns.shape)
    if mode == "sign":  # sum over the episode of sign(r_t): positive steps minus negative steps
        return sign_returns.astype(np.float64)
    if mode == "centered_sign_rank":
        return centered_ranks(sign_returns.ravel()).reshape(returns.shape)
    return returns.astype(np.float64)


def pair_weights(F: np.ndarray) -> np.ndarray:
    """w_i of Eq. (6): F+ - F- for a mirrored pair (m, 2), F itself for a single episode (m, 1)."""
    return F[:, 0] - F[:, 1] if F.shape[1] == 2 else F[:, 0]


def batched_weighted_sum(weights: np.ndarray, indices: np.ndarray, table: np.ndarray, dim: int,
                         batch_size: int = 500) -> np.ndarray:
    """sum_i w_i eps_i with eps_i = table[idx_i : idx_i + dim], as a few (batch, dim) products
    instead of a Python loop over vectors (the starter code's batch of 500, smaller for wide policies)."""
    batch_size = max(1, min(batch_size, (64 << 20) // (4 * dim)))  # at most 64 MB of noise at once
    total = np.zeros(dim, dtype=np.float32)
    for start in range(0, len(weights), batch_size):
        idx = indices[start:start + batch_size]
        eps = np.stack([table[i:i + dim] for i in idx])  # (batch, dim)
        total += weights[start:start + batch_size].astype(np.float32) @ eps
    return total


def es_gradient(F: np.ndarray, indices: np.ndarray, table: np.ndarray, dim: int) -> np.ndarray:
    """Eq. (6): g = (1/n) sum_i w_i eps_i, with n the number of episodes: an estimate of sigma times
    the gradient of J, Eq. (1)'s smoothed return. The factor 1/sigma of the true gradient (Eq. 2)
    is not applied here: Adam and SGD fold it into alpha, as the starter code does."""
    return batched_weighted_sum(pair_weights(F), indices, table, dim) / F.size


class Adam:
    """Eq. (7) (Kingma & Ba 2015), in the form of the starter code: the bias corrections go into
    the step size and epsilon stays outside them."""

    def __init__(self, dim: int, alpha: float, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8):
        self.alpha, self.beta1, self.beta2, self.epsilon = alpha, beta1, beta2, epsilon
        self.m, self.v, self.t = np.zeros(dim, np.float32), np.zeros(dim, np.float32), 0

    def step(self, grad: np.ndarray) -> np.ndarray:
        self.t += 1
        a = self.alpha * np.sqrt(1 - self.beta2 ** self.t) / (1 - self.beta1 ** self.t)
        self.m = self.beta1 * self.m + (1 - self.beta1) * grad
        self.v = self.beta2 * self.v + (1 - self.beta2) * grad * grad
        return (-a * self.m / (np.sqrt(self.v) + self.epsilon)).astype(np.float32)

    def state(self) -> dict:
        return {"opt_m": self.m, "opt_v": self.v, "opt_t": np.array(self.t)}

    def load(self, ck: dict):
        self.m, self.v, self.t = ck["opt_m"].astype(np.float32), ck["opt_v"].astype(np.float32), int(ck["opt_t"])


class SGD(Adam):
    """Eq. (8): v <- gamma v + (1 - gamma) grad; step = -alpha v (the starter code's momentum form)."""

    def __init__(self, dim: int, alpha: float, momentum: float = 0.9):
        super().__init__(dim, alpha)
        self.momentum = momentum

    def step(self, grad: np.ndarray) -> np.ndarray:
        self.t += 1
        self.v = self.momentum * self.v + (1 - self.momentum) * grad
        return (-self.alpha * self.v).astype(np.float32)


class Plain(Adam):
    """Eq. (3): step = -alpha grad, where grad carries the 1/sigma of the estimator."""

    def step(self, grad: np.ndarray) -> np.ndarray:
        self.t += 1
        return (-self.alpha * grad).astype(np.float32)


def make_optimizer(args, dim: int) -> Adam:
    if args.optimizer == "adam":
        return Adam(dim, args.alpha, args.beta1, args.beta2)
    return SGD(dim, args.alpha, args.momentum) if args.optimizer == "sgd" else Plain(dim, args.alpha)


def update(theta: np.ndarray, g: np.ndarray, optimizer: Adam, args) -> np.ndarray:
    """Eq. (7)/(8)/(3) with weight decay: the optimizer minimizes -g + l2coeff theta. Plain steps
    divide g by sigma (the textbook estimator); Adam and SGD do not (1/sigma folded into alpha)."""
    scale = 1.0 / args.sigma if args.optimizer == "plain" else 1.0
    return theta + optimizer.step(-g * scale + args.l2coeff * theta)


class RunningStat:
    """Eq. (9): observation statistics as sums (sum, sum of squares, count), which add up across
    workers with no special formula; the starter code's small start count 1e-2 and std floor 0.1
    (deviation: the sums are float64 here, float32 there)."""

    def __init__(self, dim: int, eps: float = 1e-2):
        self.sum, self.sumsq, self.count = np.zeros(dim), np.full(dim, eps), eps

    def increment(self, s: np.ndarray, ssq: np.ndarray, c: float):
        self.sum, self.sumsq, self.count = self.sum + s, self.sumsq + ssq, self.count + c

    @property
    def mean(self) -> np.ndarray:
        return self.sum / self.count

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(np.maximum(self.sumsq / self.count - np.square(self.mean), 1e-2))


# ----------------------------------------------------------------------------------------------
# The policy: an MLP over one flat float32 vector theta
# ----------------------------------------------------------------------------------------------

def layer_sizes(obs_dim: int, hidden: list, act_space, ac_bins: int) -> list:
    """[obs_dim, *hidden, outputs]: n logits (Discrete), adim * K logits (K bins), or adim values."""
    if hasattr(act_space, "n"):
        return [obs_dim, *hidden, int(act_space.n)]
    return [obs_dim, *hidden, act_space.shape[0] * (ac_bins or 1)]


def n_params(sizes: list) -> int:
    return sum(n_in * n_out + n_out for n_in, n_out in zip(sizes[:-1], sizes[1:]))


def unflatten(theta: np.ndarray, sizes: list) -> list:
    """Views [(W, b), ...] into theta, W of shape (n_in, n_out) as in the starter code: h @ W + b."""
    layers, at = [], 0
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        W = theta[at:at + n_in * n_out].reshape(n_in, n_out)
        at += n_in * n_out
        layers.append((W, theta[at:at + n_out]))
        at += n_out
    return layers


def normc_init(sizes: list, rng: np.random.Generator) -> np.ndarray:
    """Eq. (10): Gaussian weights rescaled so that every column (one unit's input weights) has norm
    1.0 in hidden layers and 0.01 in the output layer; biases 0."""
    theta = np.zeros(n_params(sizes), np.float32)
    layers = unflatten(theta, sizes)
    for j, (W, _) in enumerate(layers):
        std = 0.01 if j == len(layers) - 1 else 1.0
        w = rng.standard_normal(W.shape)
        W[:] = w * std / np.sqrt(np.square(w).sum(axis=0, keepdims=True))
    return theta


def elu(z: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A real ELU, z for z > 0 and exp(z) - 1 below (the Keras notebooks this script grew from mapped elu to a leaky ReLU)."""
    out[:] = np.where(z > 0, z, np.expm1(np.minimum(z, 0.0)))
    return out


ACTIVATIONS = {  # f(z, out): writes the activation of z into out
    "tanh": np.tanh,
    "relu": lambda z, out: np.maximum(z, 0.0, out=out),
    "lrelu": lambda z, out: np.maximum(z, 0.01 * z, out=out),  # slope 0.01 below zero (deviation: starter 0.2)
    "elu": elu,
}


class Policy:
    """a = pi_theta(o): normalize (Eq. 9), the MLP, then the action of Eq. (11).

    The step is written for speed, since it runs once per environment step: each layer's bias
    is stored as the last row of its weight matrix and every layer input ends with a constant 1,
    so a layer is one product and one activation written in place; the layers are float64 copies
    made once per episode, so the environment's float64 observations need no conversion."""

    def __init__(self, theta: np.ndarray, sizes: list, activation: str, ob_mean, ob_std, act_space, ac_bins: int,
                 ob_clip: bool = True):
        self.layers = [np.vstack([W, b]).astype(np.float64) for W, b in unflatten(theta, sizes)]  # (n_in + 1, n_out)
        self.inputs = [np.ones(n + 1) for n in sizes[:-1]]  # each layer's input and the constant 1
        self.act = ACTIVATIONS[activation]
        self.ob_inv_std = 1.0 / np.asarray(ob_std, np.float64)
        self.ob_shift = -np.asarray(ob_mean, np.float64) * self.ob_inv_std  # (o - mean) / std = o / std + shift
        clip = 5.0 if ob_clip else np.inf  # without normalization the observations go in raw
        self.clip_low, self.clip_high = np.full(sizes[0], -clip), np.full(sizes[0], clip)
        self.discrete = hasattr(act_space, "n")
        if not self.discrete:
            self.low, self.high = act_space.low.astype(np.float64), act_space.high.astype(np.float64)
            self.bins, self.rows = ac_bins, np.arange(len(self.low))
            if ac_bins:  # bin k of dimension d is low_d + k (high_d - low_d) / (K - 1)
                self.bin_values = np.linspace(self.low, self.high, ac_bins, axis=1)  # (adim, K)

    def __call__(self, ob: np.ndarray, noise=None):
        x = self.inputs[0]
        v = x[:-1]  # Eq. (9): clip((o - mean) / std, -5, 5), written into the first input
        np.multiply(ob, self.ob_inv_std, out=v)
        np.add(v, self.ob_shift, out=v)
        np.maximum(v, self.clip_low, out=v)
        np.minimum(v, self.clip_high, out=v)
        for Wb, nxt in zip(self.layers[:-1], self.inputs[1:]):
            self.act(x @ Wb, nxt[:-1])  # h = f([x, 1] @ [W; b]) = f(x @ W + b)
            x = nxt
        y = x @ self.layers[-1]
        if self.discrete:
            return int(np.argmax(y))
        if self.bins:  # Eq. (11): per dimension, the value of the bin with the largest logit
            y = self.bin_values[self.rows, np.argmax(y.reshape(len(self.low), self.bins), axis=1)]
        if noise is not None:  # action noise, training rollouts only
            y += noise
        # Deviation: actions are clipped to the bounds (the starter code hands them to the env as they are).
        return np.minimum(np.maximum(y, self.low), self.high)


class PolicyBatch(Policy):
    """The policies of the mirrored pairs that rollout_lockstep steps together: row 2p is
    theta + sigma eps_p, row 2p + 1 is theta - sigma eps_p, B = 2P rows in all.

    Why a batch: a policy step is about a dozen NumPy calls on small arrays, each costing far more
    than its arithmetic. With the rows' layers stacked as (B, n_in + 1, n_out), one batched
    product per layer, and one call for each other operation on (B, ...) arrays, serve all B
    episodes: the math of B Policy calls for little more than the cost of one. Every operand is
    contiguous and of its partner's shape: NumPy is several times slower on strided or broadcast
    arrays of this size. Each row is computed exactly as Policy computes it alone (tested)."""

    def __init__(self, thetas: list, sizes: list, *args, **kw):
        super().__init__(thetas[0], sizes, *args, **kw)  # normalization, bounds and bins: as for one policy
        others = [Policy(theta, sizes, *args, **kw).layers for theta in thetas[1:]]
        self.layers = [np.stack(Wb) for Wb in zip(self.layers, *others)]  # (B, n_in + 1, n_out)
        B = len(thetas)
        self.inputs = [np.ones((B, 1, n + 1)) for n in sizes[:-1]]  # (B, 1, n + 1): each row ends with the 1
        self.x0 = self.inputs[0].reshape(-1)  # (B (obs_dim + 1),): [o_1, 1, o_2, 1, ...] as one contiguous vector
        self.obs = self.inputs[0][:, 0, :-1]  # (B, obs_dim): where the observations are written
        self.hidden = [x[..., :-1] for x in self.inputs[1:]]  # (B, 1, n): where each activation goes
        # Eq. (9) on all of x0 at once (four calls): the 1s get scale 1, shift 0 and bounds [1, 1], so stay 1.
        rows = lambda a, one: np.tile(np.append(a, one), B)  # noqa: E731
        self.ob_inv_std, self.ob_shift = rows(self.ob_inv_std, 1.0), rows(self.ob_shift, 0.0)
        self.clip_low, self.clip_high = rows(self.clip_low, 1.0), rows(self.clip_high, 1.0)
        if not self.discrete:
            self.low, self.high = np.tile(self.low, (B, 1)), np.tile(self.high, (B, 1))  # (B, adim)

    def __call__(self, obs, noise=None):
        """Policy.__call__ on every row: normalize (Eq. 9), the MLP, the action of Eq. (11). obs: the
        B observations; noise: (B, adim) or None. Returns (B, adim) actions, or B ints (Discrete)."""
        v = self.x0  # (B (obs_dim + 1),)
        self.obs[:] = obs  # one call for all rows
        np.multiply(v, self.ob_inv_std, out=v)  # Eq. (9): clip((o - mean) / std, -5, 5), all rows at once
        np.add(v, self.ob_shift, out=v)
        np.maximum(v, self.clip_low, out=v)
        np.minimum(v, self.clip_high, out=v)
        for x, Wb, h in zip(self.inputs, self.layers[:-1], self.hidden):
            z = x @ Wb  # (B, 1, n_out): every row's [x, 1] @ [W; b] in one call
            self.act(z, z)  # in place on the contiguous product,
            h[:] = z  # then copied beside the 1s: faster than writing into the strided h
        y = (self.inputs[-1] @ self.layers[-1])[:, 0]  # (B, n_out)
        if self.discrete:
            return np.argmax(y, axis=1).tolist()
        if self.bins:  # Eq. (11): per row and dimension, the value of the bin with the largest logit
            y = self.bin_values[self.rows, np.argmax(y.reshape(len(y), -1, self.bins), axis=2)]  # (B, adim)
        if noise is not None:  # action noise, training rollouts only
            y += noise
        return np.minimum(np.maximum(y, self.low), self.high)  # clipped, as in Policy (a deviation)


# ----------------------------------------------------------------------------------------------
# The shared noise table
# ----------------------------------------------------------------------------------------------

class NoiseTable:
    """One block of float32 N(0, 1) numbers from a fixed seed in shared memory: the master fills
    it once; workers started afterwards read the same pages (no copy). A perturbation eps_i is the
    slice table[idx_i : idx_i + dim], so an index names a vector (docs/es_openai.md, "Noise table")."""

    def __init__(self, size: int, seed: int):
        self.shm = shared_memory.SharedMemory(create=True, size=4 * size)
        self.table = np.ndarray((size,), dtype=np.float32, buffer=self.shm.buf)
        # Deviation: numpy's PCG64 in float32, not the starter code's RandomState(123).randn (another table).
        rng, chunk = np.random.default_rng(seed), 1 << 24
        try:
            for start in range(0, size, chunk):
                rng.standard_normal(out=self.table[start:start + chunk], dtype=np.float32)
        except BaseException:  # Ctrl-C while filling: the shared block must not outlive the run
            self.close()
            raise

    @classmethod
    def view(cls, table: np.ndarray) -> "NoiseTable":
        """The same methods on a table held elsewhere (a Ray node's object store)."""
        noise = cls.__new__(cls)
        noise.shm, noise.table = None, table
        return noise

    def sample_index(self, rng: np.random.Generator, dim: int) -> int:
        return int(rng.integers(0, len(self.table) - dim + 1))

    def get(self, idx: int, dim: int) -> np.ndarray:
        return self.table[idx:idx + dim]

    def move_to(self, table: np.ndarray):
        """Read the same numbers from `table` (Ray's object store) and free the shared block."""
        self.close()
        self.table = table

    def close(self):
        self.table = None
        if self.shm is not None:
            self.shm.close()
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass
            self.shm = None


def make_env(env_id: str, episode_length, render: bool = False):
    import gymnasium as gym
    kw = {"max_episode_steps": episode_length} if episode_length else {}
    if render:
        kw["render_mode"] = "rgb_array"
        env = gym.make(env_id, **kw)
        model = getattr(env.unwrapped, "model", None)  # MuJoCo: film with the model's camera that
        if model is not None and any(model.camera(i).name == "track" for i in range(model.ncam)):
            env.close()  # follows the body; the default one stays put while the agent runs away
            return gym.make(env_id, camera_name="track", **kw)
        return env
    return gym.make(env_id, **kw)


def reset_env(env, seed: int):
    """env.reset(seed=seed), giving the same episode whatever the environment ran before.
    gymnasium's BipedalWalker keeps one Box2D world for all its episodes, and what that world keeps
    from earlier episodes can change the next one (tested), so one seed could give two episodes on
    two workers; it gets a fresh world first, as LunarLander's own reset does."""
    walker = env.unwrapped
    if type(walker).__name__ == "BipedalWalker" and walker.terrain:  # not before its first reset
        walker._destroy()  # the bodies leave the old world; then BipedalWalker.__init__'s b2World()
        walker.world = type(walker.world)()
    return env.reset(seed=seed)


# ----------------------------------------------------------------------------------------------
# Rollouts and the workers
# ----------------------------------------------------------------------------------------------

class Episode(NamedTuple):
    """What a rollout returns."""
    ret: float  # sum of the rewards
    sign_ret: float  # sum of sign(r_t), for the sign shaping modes (Eq. 5)
    length: int  # env steps
    ob_sums: tuple  # (sum, sum of squares) of the observations acted on (Eq. 9), or None


def rollout(env, policy: Policy, env_seed: int, rng=None, ac_noise_std: float = 0.0, keep_obs: bool = False,
            timer: dict = None, frames=None) -> Episode:
    """One episode, with the sums of its observations if keep_obs."""
    ob, _ = reset_env(env, env_seed)
    total, sign_total, steps = 0.0, 0.0, 0
    obs = [ob] if keep_obs else None
    noisy = rng is not None and ac_noise_std > 0
    t_policy = t_env = 0.0
    noise = None
    while True:
        t0 = time.perf_counter()
        if noisy:  # drawn 256 steps at a time: one call to the generator instead of one per step
            if steps % 256 == 0:
                block = ac_noise_std * rng.standard_normal((256, len(policy.low)))
            noise = block[steps % 256]
        action = policy(ob, noise)
        t1 = time.perf_counter()
        ob, r, terminated, truncated, _ = env.step(action)
        t_policy, t_env = t_policy + (t1 - t0), t_env + (time.perf_counter() - t1)
        r = float(r)
        total, sign_total, steps = total + r, sign_total + ((r > 0) - (r < 0)), steps + 1
        if frames is not None and steps % 2 == 1:  # every other frame: rendering costs more than a step
            frames.append(env.render())
        if terminated or truncated:
            break
        if keep_obs:
            obs.append(ob)
    if timer is not None:
        timer["policy_us"].append(1e6 * t_policy / steps)
        timer["env_us"].append(1e6 * t_env / steps)
    return Episode(float(total), float(sign_total), steps, obs_sums(obs) if keep_obs else None)


def obs_sums(obs: list) -> tuple:
    """(sum, sum of squares) of an episode's observations, in float64 (Eq. 9)."""
    obs = np.asarray(obs, dtype=np.float64)  # (L, obs_dim)
    return obs.sum(axis=0), np.square(obs).sum(axis=0)


def rollout_lockstep(envs: list, policy: PolicyBatch, env_seeds: list, rngs: list = None,
                     ac_noise_std: float = 0.0, keep_obs: list = None, timer: dict = None) -> list:
    """The episodes of P mirrored pairs stepped together on 2P environments: episodes 2p (+) and
    2p + 1 (-) are pair p's, both reset with env_seeds[p]; one PolicyBatch call per step computes
    every action. An episode that ends leaves its row computed and ignored while the others go on.
    rngs[p] draws pair p's action noise, keep_obs[p] says whether pair p records its observations.
    Returns an Episode for each, the same bits as each pair run alone. The timers
    split each call's time evenly over the env steps it served: policy_us and env_us are the
    totals over all the episodes' env steps."""
    obs = [reset_env(env, env_seeds[i // 2])[0] for i, env in enumerate(envs)]  # what the policy acts on next
    B = len(envs)  # 2P episodes, one per row of the PolicyBatch
    total, sign_total, steps, running = [0.0] * B, [0.0] * B, [0] * B, list(range(B))
    kept = [[ob] if keep_obs and keep_obs[i // 2] else None for i, ob in enumerate(obs)]
    noisy = rngs is not None and ac_noise_std > 0
    t_policy = t_env = 0.0
    t, noise = 0, None
    while running:
        t0 = time.perf_counter()
        if noisy:  # Eq. (11)'s noise, 256 lockstep steps per draw, (256, 2, adim) from each pair's stream
            if t % 256 == 0:
                block = np.concatenate([ac_noise_std * rng.standard_normal((256, 2, policy.low.shape[1]))
                                        for rng in rngs], axis=1)  # (256, 2P, adim)
            noise = block[t % 256]  # (2P, adim): row i for episode i
        actions = policy(obs, noise)
        t1 = time.perf_counter()
        results = [(i, *envs[i].step(actions[i])) for i in running]
        t_policy, t_env, t = t_policy + (t1 - t0), t_env + (time.perf_counter() - t1), t + 1
        for i, ob, r, terminated, truncated, _ in results:
            r = float(r)
            total[i], sign_total[i], steps[i] = total[i] + r, sign_total[i] + ((r > 0) - (r < 0)), steps[i] + 1
            if terminated or truncated:
                running.remove(i)
                continue
            obs[i] = ob
            if kept[i] is not None:
                kept[i].append(ob)
    if timer is not None:
        timer["policy_us"].append(1e6 * t_policy / sum(steps))
        timer["env_us"].append(1e6 * t_env / sum(steps))
    return [Episode(total[i], sign_total[i], steps[i], None if kept[i] is None else obs_sums(kept[i]))
            for i in range(B)]


def job_kind(seed: int, generation: int, k: int, eval_prob: float) -> tuple:
    """Job k of a generation: its random stream and whether it is a noiseless episode (eval_prob)."""
    rng = stream(seed, TRAIN, generation, k)
    return rng, bool(rng.random() < eval_prob)


def run_jobs(worker: dict, task: dict, jobs: list) -> list:
    """What a worker computes for one message of jobs [(kind, generation, k)]: each a mirrored pair
    (or one episode) of the population (Eq. 6), a noiseless episode (eval_prob), or an evaluation
    episode. The mirrored pairs among them are stepped together (rollout_lockstep), the rest one by
    one. Returns [(k, result)], scalars and sums only; a result does not depend on the jobs beside it."""
    spec = (worker["sizes"], worker["activation"], task["ob_mean"], task["ob_std"], worker["act_space"],
            worker["ac_bins"], task["ob_clip"])
    results, pairs = [None] * len(jobs), []
    for i, (kind, generation, k) in enumerate(jobs):
        if kind == "eval":  # --eval-every: the noiseless policy on evaluation seeds
            env_seed = int(stream(worker["seed"], EVAL, generation, k).integers(2**31))
            episode = rollout(worker["env"], Policy(task["theta"], *spec), env_seed)
            results[i] = (episode.ret, episode.length)
            continue
        rng, noiseless = job_kind(worker["seed"], generation, k, worker["eval_prob"])
        # Both rollouts of a pair share the environment seed (deviation: the starter code does not reseed).
        env_seed = int(rng.integers(2**31))
        if noiseless:
            episode = rollout(worker["env"], Policy(task["theta"], *spec), env_seed)
            results[i] = ("noiseless", episode.ret, episode.length)
            continue
        job = dict(perturb(worker, task, rng), i=i, rng=rng, env_seed=env_seed)
        if worker["mirror"]:
            pairs.append(job)  # stepped below, with the other pairs of this message
            continue
        timer, t3 = {"policy_us": [], "env_us": []}, time.perf_counter()
        episode = rollout(worker["env"], Policy(job["thetas"][0], *spec), env_seed, rng, worker["ac_noise_std"],
                          job["keep_obs"], timer)
        results[i] = population_result(job, [episode], timer, time.perf_counter() - t3)
    if pairs:  # the pairs' episodes in lockstep, on as many environments, made on first use
        worker["envs"] = envs = worker.get("envs") or [worker["env"]]
        envs += [make_env(worker["env_id"], worker["episode_length"]) for _ in range(2 * len(pairs) - len(envs))]
        timer, t3 = {"policy_us": [], "env_us": []}, time.perf_counter()
        policy = PolicyBatch([theta for job in pairs for theta in job["thetas"]], *spec)  # rows +, -, +, -, ...
        episodes = rollout_lockstep(envs[:2 * len(pairs)], policy, [job["env_seed"] for job in pairs],
                                    [job["rng"] for job in pairs], worker["ac_noise_std"],
                                    [job["keep_obs"] for job in pairs], timer)
        share = (time.perf_counter() - t3) / len(pairs)  # each pair's share of the lockstep time
        for p, job in enumerate(pairs):
            results[job["i"]] = population_result(job, episodes[2 * p:2 * p + 2], timer, share)
    return [(k, result) for (_, _, k), result in zip(jobs, results)]


def perturb(worker: dict, task: dict, rng) -> dict:
    """A population job's draws after its environment seed: the noise index i, whether it records
    observations, and theta +- sigma eps_i (theta + sigma eps_i alone without mirroring), timed."""
    t_job = time.perf_counter()
    dim = task["theta"].size
    idx = worker["noise"].sample_index(rng, dim)
    keep_obs = bool(rng.random() < worker["calc_obstat_prob"])  # per pair (deviation: per episode in the starter code)
    t0 = time.perf_counter()
    eps = worker["noise"].get(idx, dim)
    t1 = time.perf_counter()
    signs = (1.0, -1.0) if worker["mirror"] else (1.0,)
    thetas = [task["theta"] + (s * worker["sigma"]) * eps for s in signs]  # theta +- sigma eps_i
    t2 = time.perf_counter()
    return dict(idx=idx, keep_obs=keep_obs, thetas=thetas,
                times=dict(mutation=t2 - t_job, noise=t1 - t0, set_params=t2 - t1))


class PairResult(NamedTuple):
    """A population job's result: scalars and sums, never vectors. It travels as a plain tuple and
    the master names it again with PairResult(*t): through Ray, a class of a script run as __main__
    would travel with its whole definition, some 4 kB per result."""
    kind: str  # "pair" (also for one episode without mirroring); noiseless episodes send ("noiseless", return, length)
    idx: int  # where eps_i starts in the noise table
    returns: list  # of the + and - episodes (the + one alone without mirroring)
    sign_returns: list
    lengths: list
    ob_sum: np.ndarray  # summed over the episodes, or None when the job records no observations
    ob_sumsq: np.ndarray
    times: dict  # the timers of TIMERS


def population_result(job: dict, episodes: list, timer: dict, rollout_time: float) -> tuple:
    """A population job's result (the fields of PairResult) from its Episodes and its timers."""
    ob_sum = ob_sumsq = None
    if job["keep_obs"]:
        ob_sum, ob_sumsq = sum(e.ob_sums[0] for e in episodes), sum(e.ob_sums[1] for e in episodes)
    times = dict(job["times"], mutation=job["times"]["mutation"] + rollout_time,
                 policy_us=float(np.mean(timer["policy_us"])), env_us=float(np.mean(timer["env_us"])))
    return tuple(PairResult("pair", job["idx"], [e.ret for e in episodes], [e.sign_ret for e in episodes],
                            [e.length for e in episodes], ob_sum, ob_sumsq, times))  # a plain tuple: see PairResult


def exit_with_master():
    """In a worker: end this process when the master is gone, even killed with SIGKILL (then no
    'stop' comes, and a pipe end inherited by a sibling worker would keep recv() waiting forever)."""
    master = os.getppid()

    def watch():
        while os.getppid() == master:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def worker_main(conn, worker: dict):
    """A persistent rollout process: keeps the latest task (theta, observation statistics) and runs
    the jobs it is handed; the noise table is the master's shared memory, inherited, not copied."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the master's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the master's SIGTERM handler is not for workers
    exit_with_master()
    task = None
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the master is gone: no orphan stays behind
            return
        if msg[0] == "stop":
            return
        if msg[0] == "task":
            task = msg[2]
            continue
        if msg[0] == "peek":  # for the tests: read the table at an index, as this process sees it
            conn.send(("peek", msg[1], float(worker["noise"].table[msg[1]]), worker["noise"].shm.name))
            continue
        _, task_id, jobs = msg
        try:
            worker["env"] = worker.get("env") or make_env(worker["env_id"], worker["episode_length"])
            conn.send(("results", task_id, run_jobs(worker, task, jobs)))
        except Exception as e:  # the environment failed: tell the master instead of dying silently
            conn.send(("error", task_id, f"{type(e).__name__}: {e}"))


class WorkerPool:
    """Worker processes started once per run, after the noise table exists. The master publishes
    a task, then hands out jobs to whichever worker is free, up to --lockstep at a time."""

    def __init__(self, workers: int, noise: NoiseTable, args, act_space, sizes: list):
        worker = dict(noise=noise, seed=args.seed, env_id=args.env, episode_length=args.episode_length,
                      sizes=sizes, activation=args.activation, act_space=act_space, ac_bins=args.ac_bins,
                      sigma=args.sigma, mirror=args.mirror, ac_noise_std=args.ac_noise_std,
                      calc_obstat_prob=args.calc_obstat_prob if args.obs_norm else 0.0, eval_prob=args.eval_prob)
        ctx = mp.get_context("fork")  # workers inherit the shared table and the environment's spaces
        self.conns, self.procs, self.busy, self.task_id, self.lockstep = [], [], set(), 0, args.lockstep
        self.stale = self.stale_logged = 0  # results of an older task dropped so far, and logged so far
        for _ in range(workers):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker_main, args=(child, worker), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)

    def send(self, conn, msg: tuple):
        try:
            conn.send(msg)
        except (BrokenPipeError, ConnectionResetError):
            raise RuntimeError("a worker process died; the run stops (resume from the last "
                               "checkpoint with --resume)") from None

    def publish(self, task: dict) -> int:
        """Send a new task to every worker; results of older tasks become stale."""
        self.task_id += 1
        for conn in self.conns:
            self.send(conn, ("task", self.task_id, task))
        return self.task_id

    def receive(self, conn):
        try:
            msg = conn.recv()
        except (EOFError, ConnectionResetError):
            raise RuntimeError("a worker process died; the run stops (resume from the last "
                               "checkpoint with --resume)") from None
        self.busy.discard(conn)
        if msg[0] == "error":
            raise RuntimeError(f"a rollout failed in a worker: {msg[2]}")
        return msg

    def workers(self) -> int:
        return len(self.conns)

    def collect(self, msg: tuple, task_id: int, results: dict):
        """Adds a message's results of this task to results; those of an older task are dropped and counted."""
        if msg[1] != task_id:  # from an older generation
            self.stale += len(msg[2])
        else:
            results.update(msg[2])

    def next_jobs(self, next_job, results: dict, jobs_left) -> list:
        """The jobs of one message: a worker steps the pairs among them together. Up to --lockstep,
        and no more than an even share of jobs_left() over the workers, so that the last messages of
        a generation keep every worker busy."""
        size = self.lockstep
        if jobs_left is not None:
            size = min(size, max(1, -(-jobs_left() // self.workers())))  # ceil(jobs left / workers)
        jobs = []
        while len(jobs) < size and (job := next_job(results)) is not None:
            jobs.append(job)
        return jobs

    def run(self, task: dict, next_job, done, jobs_left=None) -> dict:
        """Hand out next_job() -> (kind, generation, k) or None to free workers until done(results)
        is true; jobs_left(), if given, counts the jobs still to hand out. Returns {k: result} of
        this task; results of older tasks are dropped and counted in self.stale."""
        task_id, results = self.publish(task), {}
        while True:
            for conn in self.conns:
                if conn not in self.busy:
                    jobs = self.next_jobs(next_job, results, jobs_left)
                    if not jobs:
                        break
                    self.send(conn, ("jobs", task_id, jobs))
                    self.busy.add(conn)
            if done(results):
                return results
            if not self.busy:
                raise RuntimeError("no job left to hand out before the generation closed")
            for conn in mp.connection.wait(list(self.busy)):
                self.collect(self.receive(conn), task_id, results)

    def evaluate(self, task: dict, generation: int, episodes: range) -> np.ndarray:
        """Returns of the noiseless policy on evaluation episodes `episodes` of this generation."""
        todo = list(episodes)[::-1]
        results = self.run(task, lambda res: ("eval", generation, todo.pop()) if todo else None,
                           lambda res: len(res) == len(episodes), lambda: len(todo))
        return np.array([results[j][0] for j in episodes])

    def close(self):
        for conn, proc in zip(self.conns, self.procs):
            try:
                conn.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
        for proc in self.procs:
            proc.join(timeout=2)
            if proc.is_alive():
                proc.terminate()
                proc.join()


# ----------------------------------------------------------------------------------------------
# Ray: the same jobs on a cluster (--ray; docs/es_openai.md, "Scaling out")
# ----------------------------------------------------------------------------------------------

RAY_STARTED = []  # the Ray instance this process started (and must stop), if any


def start_ray(address=None):
    """Join the Ray cluster at `address` (or RAY_ADDRESS), or start one on this machine. Ray is
    imported here only, so that it stays optional."""
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs Ray, which is not installed: pip install ray") from None
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS")
        host, _, port = (address or "").replace("ray://", "").rpartition(":")
        if host and port.isdigit():  # Ray itself would retry an unreachable address for minutes
            try:
                socket.create_connection((host, int(port)), timeout=10).close()
            except OSError as e:
                raise UserError(f"no Ray cluster answers at {address} ({e.strerror or e}); start one with "
                                "'ray start --head' or check the address") from None
        on_sigterm = signal.getsignal(signal.SIGTERM)
        try:
            ray.init(address=address, log_to_driver=False, include_dashboard=False)
        except Exception as e:  # no cluster at that address, a version mismatch, ...
            where = f" at {address}" if address else ""
            raise UserError(f"cannot start or join Ray{where}: {str(e).splitlines()[0]}") from None
        finally:  # ray.init installs its own SIGTERM handler, which would skip the last checkpoint
            signal.signal(signal.SIGTERM, on_sigterm)
        RAY_STARTED.append(ray)
    if __name__ != "__main__":  # imported (tests, notebooks): send this file's code to the nodes by value
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray


def stop_ray():
    while RAY_STARTED:
        RAY_STARTED.pop().shutdown()


class RayWorker:
    """The Ray actor: run_jobs on a worker whose noise table is the object store's copy on this
    node, mapped read-only (zero copy). The task travels by reference with every job and is
    fetched once per publication; an actor that Ray restarted after a crash fetches it again."""

    def __init__(self, worker: dict, table: np.ndarray):
        self.worker, self.task_id, self.task = dict(worker, noise=NoiseTable.view(table)), None, None

    def run(self, task_id: int, task: list, jobs: list) -> tuple:
        if self.task_id != task_id:
            import ray
            self.task, self.task_id = ray.get(task[0]), task_id  # task = [ref]: a bare ref is fetched per job
        self.worker["env"] = self.worker.get("env") or make_env(self.worker["env_id"], self.worker["episode_length"])
        return "results", task_id, run_jobs(self.worker, self.task, jobs)

    def peek(self, i: int) -> tuple:
        """(table[i], whether the table is writeable) as this actor sees it: for the tests."""
        table = self.worker["noise"].table
        return float(table[i]), bool(table.flags.writeable)

    def where(self) -> tuple:
        """(process id, node id) of this actor: for the tests."""
        import ray
        return os.getpid(), ray.get_runtime_context().get_node_id()


class RayPool(WorkerPool):
    """WorkerPool's interface on Ray actors, one per worker, spread over the nodes. The noise
    table goes into the object store once and each node maps it once; the master's own table
    moves there too. A task is put once per generation; jobs carry its reference and indices.
    Ray restarts a lost actor and runs its unfinished jobs again: every job names its
    randomness, so the results do not change."""

    retries = 3  # restarts per actor, and retries per job, before the run stops with an error
    timeout = 300.0  # seconds without any result (e.g. a lost node and no free CPU to replace it)
    queued = 2  # messages of jobs queued per actor: the next one is there when the last one ends

    def __init__(self, workers: int, noise: NoiseTable, args, act_space, sizes: list):
        self.ray = ray = start_ray()
        self.table = table = ray.put(noise.table)  # held for the run: a restarted actor maps it again
        noise.move_to(ray.get(table))  # the master reads the object store's copy: one table per node
        worker = dict(seed=args.seed, env_id=args.env, episode_length=args.episode_length, sizes=sizes,
                      activation=args.activation, act_space=act_space, ac_bins=args.ac_bins, sigma=args.sigma,
                      mirror=args.mirror, ac_noise_std=args.ac_noise_std,
                      calc_obstat_prob=args.calc_obstat_prob if args.obs_norm else 0.0, eval_prob=args.eval_prob)
        actor = ray.remote(num_cpus=1, max_restarts=self.retries, max_task_retries=self.retries)(RayWorker)
        self.actors = [actor.options(scheduling_strategy="SPREAD").remote(worker, table) for _ in range(workers)]
        self.inflight, self.load = {}, [0] * workers  # {result ref: (its actor, its task)}, jobs queued per actor
        self.task_id, self.task, self.lockstep = 0, None, args.lockstep
        self.stale = self.stale_logged = 0

    def workers(self) -> int:
        return len(self.actors)

    def publish(self, task: dict) -> int:
        self.task_id += 1
        self.task = [self.ray.put(task)]
        return self.task_id

    def receive(self, ref):
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as e:
            raise RuntimeError(f"a Ray worker was lost and its {self.retries} restarts are used up ("
                               f"{str(e).strip().splitlines()[0][:200]}); the run stops (resume from the last "
                               "checkpoint with --resume)") from None
        except ray.exceptions.RayTaskError as e:
            raise RuntimeError(f"a rollout failed in a Ray worker: {type(e.cause).__name__}: {e.cause}") from None

    def run(self, task: dict, next_job, done, jobs_left=None) -> dict:
        """Same as WorkerPool.run, with `queued` messages per actor."""
        task_id, results = self.publish(task), {}
        while True:
            for i, actor in enumerate(self.actors):
                while self.load[i] < self.queued:
                    jobs = self.next_jobs(next_job, results, jobs_left)
                    if not jobs:
                        break
                    # the task stays referenced while a job that names it may still be run again
                    self.inflight[actor.run.remote(task_id, self.task, jobs)] = i, self.task
                    self.load[i] += 1
            if done(results):
                return results
            if not self.inflight:
                raise RuntimeError("no job left to hand out before the generation closed")
            ready, _ = self.ray.wait(list(self.inflight), num_returns=1, timeout=self.timeout)
            if not ready:
                raise RuntimeError(f"no result from the Ray workers in {self.timeout:.0f} s (a node lost and no "
                                   "free CPU to restart its workers?); resume with --resume")
            self.load[self.inflight.pop(ready[0])[0]] -= 1
            self.collect(self.receive(ready[0]), task_id, results)

    def close(self):
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)


class Generation:
    """The master's bookkeeping for one generation (docs/es_openai.md, "Master and workers"): jobs
    are numbered k = 0, 1, ...; the generation closes at the shortest prefix of jobs, all finished,
    that holds population_size training episodes and min_timesteps steps. Finished jobs past that
    prefix are skipped, so the result does not depend on which worker was faster."""

    def __init__(self, seed: int, generation: int, args):
        self.seed, self.generation, self.args = seed, generation, args
        self.next_k, self.handed_episodes, self.closed_at = 0, 0, None

    def next_job(self, results: dict):
        """The next job index to hand out, or None when no more can be needed."""
        if self.closed_at is not None:
            return None
        if self.handed_episodes >= self.args.population:  # more only while steps are missing
            done_steps = sum(self.steps(r) for r in results.values())
            if self.args.min_timesteps == 0 or done_steps >= self.args.min_timesteps:
                return None
        k, self.next_k = self.next_k, self.next_k + 1
        if not job_kind(self.seed, self.generation, k, self.args.eval_prob)[1]:
            self.handed_episodes += 2 if self.args.mirror else 1
        return "train", self.generation, k

    def jobs_left(self) -> int:
        """Population jobs not handed out yet (noiseless ones and --min-timesteps aside)."""
        per_job = 2 if self.args.mirror else 1
        return max(0, -(-(self.args.population - self.handed_episodes) // per_job))

    @staticmethod
    def steps(result) -> int:
        """Env steps of a result: a pair's, or a noiseless episode's ("noiseless", R, L)."""
        return int(sum(PairResult(*result).lengths)) if result[0] == "pair" else int(result[2])

    def done(self, results: dict) -> bool:
        episodes = steps = 0
        for k in range(self.next_k):
            if k not in results:
                return False
            r = results[k]
            steps += self.steps(r)
            episodes += len(PairResult(*r).returns) if r[0] == "pair" else 0
            if episodes >= self.args.population and steps >= self.args.min_timesteps:
                self.closed_at = k + 1
                return True
        return False


# ----------------------------------------------------------------------------------------------
# Run directory: config, progress.csv, checkpoints, plot (shared with the other scripts)
# ----------------------------------------------------------------------------------------------

SHARED_COLUMNS = ["iteration", "episodes", "env_steps", "wall_time_s", "return_mean", "return_std",
                  "return_min", "return_max", "eval_return_mean", "eval_return_std", "steps_per_s"]
TIMERS = ("mutation", "noise", "set_params", "policy_us", "env_us")
COLUMNS = SHARED_COLUMNS + [
    "length_mean", "noiseless_return_mean", "noiseless_return_std", "noiseless_length_mean", "noiseless_count",
    "episodes_this_gen", "timesteps_this_gen", "workers", "skipped_frac", "obs_count_this_gen", "obs_count",
    "theta_norm", "grad_norm", "update_norm", "time_gen_s", "time_update_s",
] + [f"time_{name}_{stat}" for name in TIMERS for stat in ("min", "max", "mean")]


def versions() -> dict:
    import gymnasium
    out = {"python": platform.python_version(), "numpy": np.__version__, "gymnasium": gymnasium.__version__}
    try:
        import mujoco
        out["mujoco"] = mujoco.__version__
    except ImportError:
        out["mujoco"] = None
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                                           text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        out["git_commit"] = None
    # The processor: a run repeats bit for bit only on one kind, since NumPy and OpenBLAS choose
    # their SIMD code (AVX2, AVX-512) by what it offers (docs/es_openai.md, "The same seed on
    # another processor").
    out["processor"], out["simd"] = platform.processor() or platform.machine(), None
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
        model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
        flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
        out["processor"], out["simd"] = model or out["processor"], [f for f in ("avx2", "avx512f") if f in flags]
    except OSError:  # no /proc: not Linux
        pass
    return out


def make_run_dir(out_dir: str, env_id: str, script: str, seed: int) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base, n = os.path.join(out_dir, f"{env_id}__{script}__{seed}__{stamp}"), 1
    while True:
        path = base if n == 1 else f"{base}-{n}"  # runs of one env and seed started in one second
        try:
            os.makedirs(path)
            break
        except FileExistsError:
            n += 1
        except (OSError, RecursionError) as e:  # RecursionError: thousands of folders to create
            raise UserError(f"cannot create the run directory in '{out_dir}': "
                            f"{getattr(e, 'strerror', None) or 'path too deep'}; choose another --out-dir") from None
    os.makedirs(os.path.join(path, "checkpoints"))
    return path


def read_config(run_dir: str, script: str, required: tuple) -> dict:
    """The config.json of a run directory of `script`, with the keys `required` and every saved
    flag of its flag's type (a hand-edited file can hold anything), or a UserError."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError, RecursionError):
        cfg = None
    cfg = cfg if isinstance(cfg, dict) else {}
    name = os.path.basename(str(cfg.get("run_dir"))).split("__")  # ENV__SCRIPT__SEED__STAMP
    maker = cfg.get("script", name[1] + ".py" if len(name) == 4 else script)  # older configs have no "script"
    if maker != script:
        raise UserError(f"'{run_dir}' is a run directory of {maker}, not of {script}; use python {maker} with it")
    if not all(key in cfg for key in required) or not isinstance(cfg.get("env"), str):
        raise UserError(f"'{run_dir}' is not a run directory of {script} (no config.json with {', '.join(required)})")
    takes = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}  # JSON values per kind of flag
    for action in build_parser()._actions:
        if action.dest not in cfg:
            continue
        value, kind = cfg[action.dest], bool if isinstance(action.default, bool) else action.type or str
        if value is None:  # null means "not given": only a flag whose default is None may be left so
            wrong = action.default is not None
        else:
            wrong = type(value) not in takes[kind] or bool(action.choices) and value not in action.choices
        if wrong:
            raise UserError(f"the config.json of '{run_dir}' holds {json.dumps(value)} for {action.dest}, "
                            f"which --{action.dest.replace('_', '-')} does not take")
    return cfg


def replace_or_clean(tmp: str, path: str):
    """The last step of an atomic write: rename tmp to path, or remove tmp and raise."""
    try:
        os.replace(tmp, path)
    except OSError:
        os.remove(tmp)
        raise


def save_npz_atomic(path: str, **arrays):
    """Writes path.tmp.npz, then renames it. Ctrl-C and SIGTERM wait until the file is written: a
    KeyboardInterrupt inside np.savez leaves a half-built ZipFile whose cleanup prints a traceback."""
    tmp = path + ".tmp.npz"
    masked = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM}) if masked else None
    try:
        np.savez(tmp, **arrays)
        replace_or_clean(tmp, path)
    finally:
        if masked:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)  # a stop that came meanwhile is raised now


def load_npz(path: str) -> dict:
    if not os.path.isfile(path):
        raise UserError(f"no checkpoint at '{path}'")
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except Exception:
        raise UserError(f"'{path}' is not a readable checkpoint (corrupt or not an .npz file)") from None


def write_csv_rows(path: str, rows: list, header: list):
    with open(path + ".tmp", "w", newline="") as f:  # then renamed: an interruption leaves the old file
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    replace_or_clean(path + ".tmp", path)


def probe_writable(folder: str):
    """Raises OSError unless folder is a folder this process may write into. os.access answers for
    permissions and for a read-only file system alike, and writes nothing, not even a trial file."""
    if not (os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK)):
        raise PermissionError(errno.EACCES, "it takes no new file (read-only, or not a folder)", folder)


def write_json(path: str, data: dict):
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=2)
    replace_or_clean(path + ".tmp", path)


def read_csv_rows(path: str, columns: list = None) -> list:
    """The rows of a progress.csv, as strings, checked against `columns` if given (a log written
    before the last columns were added gets nan in them). ValueError if it is damaged or edited."""
    with open(path, newline="") as f:
        header, *rows = list(csv.reader(f)) or [[]]
    columns = columns or header
    if len(header) < len(SHARED_COLUMNS) or header != columns[:len(header)] or any(len(r) != len(header) for r in rows):
        raise ValueError(f"{path}: not the columns of this script")
    for r in rows:
        for v in r:
            float(v or "nan")  # every cell a number (or empty, or nan): ValueError otherwise
    return [r + ["nan"] * (len(columns) - len(header)) for r in rows]


def plot_progress(run_dir: str, rows: list, title: str):
    """Redraw progress.png: training return (mean and range) and evaluation return. A plot that
    fails (matplotlib half-imported when a Ctrl-C came, a full disk) costs the picture, not the run."""
    try:
        draw_progress(run_dir, rows, title)
    except Exception as e:
        print(f"warning: progress.png not redrawn ({type(e).__name__}: {e})", file=sys.stderr)


def draw_progress(run_dir: str, rows: list, title: str):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = np.array([[float(v) if v not in ("", "nan") else np.nan for v in r] for r in rows]).reshape(-1, len(rows[0]))
    steps, mean, lo, hi, ev = data[:, 2], data[:, 4], data[:, 6], data[:, 7], data[:, 8]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.fill_between(steps, lo, hi, alpha=0.2, label="training return (min-max)")
    ax.plot(steps, mean, label="training return (mean)")
    ok = ~np.isnan(ev)
    ax.plot(steps[ok], ev[ok], "o-", label="evaluation return (mean)")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(os.path.join(run_dir, "progress.png.tmp.png"), dpi=90)
    plt.close(fig)
    os.replace(os.path.join(run_dir, "progress.png.tmp.png"), os.path.join(run_dir, "progress.png"))


def hold_stops() -> dict:
    """Ignore Ctrl-C and SIGTERM (while a stopped or finished run saves itself); returns the
    handlers they had, to put back."""
    return {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, signal.SIGTERM)}


def fmt_time(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------

def new_state(args, sizes: list, obs_dim: int) -> dict:
    theta = normc_init(sizes, stream(args.seed, INIT))
    return {"theta": theta, "optimizer": make_optimizer(args, theta.size), "ob_stat": RunningStat(obs_dim),
            "iteration": 0, "episodes": 0, "env_steps": 0, "wall_time": 0.0}


def checkpoint(run_dir: str, state: dict, args, sizes: list, snapshot: bool):
    """Parameters, observation sums, optimizer state, counters and the policy's structure."""
    ob = state["ob_stat"]
    arrays = dict(theta=state["theta"], ob_sum=ob.sum, ob_sumsq=ob.sumsq, ob_count=np.array(ob.count),
                  iteration=np.array(state["iteration"]), episodes=np.array(state["episodes"]),
                  env_steps=np.array(state["env_steps"]), wall_time=np.array(state["wall_time"]),
                  env=np.array(args.env), sizes=np.array(sizes), activation=np.array(args.activation),
                  ac_bins=np.array(args.ac_bins), obs_norm=np.array(args.obs_norm), **state["optimizer"].state())
    if snapshot:
        save_npz_atomic(os.path.join(run_dir, "checkpoints", f"iter_{state['iteration']:06d}.npz"), **arrays)
    save_npz_atomic(os.path.join(run_dir, "checkpoints", "latest.npz"), **arrays)


def load_state(path: str, args, sizes: list) -> dict:
    ck = load_npz(path)
    need = {"theta", "ob_sum", "ob_sumsq", "ob_count", "iteration", "episodes", "env_steps", "wall_time", "env",
            "sizes", "activation", "opt_m", "opt_v", "opt_t"}
    if not need <= set(ck):
        raise UserError(f"'{path}' lacks {sorted(need - set(ck))}; it is not a checkpoint of es_openai.py")
    if str(ck["env"]) != args.env:
        raise UserError(f"the checkpoint '{path}' is for {ck['env']}, not {args.env}")
    if list(ck["sizes"]) != list(sizes) or ck["theta"].shape != (n_params(sizes),) or str(ck["activation"]) != args.activation:
        raise UserError(f"the checkpoint '{path}' holds a {ck['sizes'].tolist()} {ck['activation']} policy; "
                        f"this run needs {sizes} {args.activation}")
    if "obs_norm" in ck and bool(ck["obs_norm"]) != args.obs_norm:  # older checkpoints lack the flag
        raise UserError(f"the checkpoint '{path}' is of a run {'with' if ck['obs_norm'] else 'without'} observation "
                        f"normalization; config.json says {'with' if args.obs_norm else 'without'}")
    floats = ("theta", "ob_sum", "ob_sumsq", "ob_count", "opt_m", "opt_v", "wall_time")
    if not all(np.isfinite(ck[k]).all() for k in floats):
        raise UserError(f"the checkpoint '{path}' holds NaN or inf, which no run saves: it is damaged")
    state = new_state(args, sizes, len(ck["ob_sum"]))
    state["optimizer"].load(ck)
    ob = state["ob_stat"]
    ob.sum, ob.sumsq, ob.count = ck["ob_sum"], ck["ob_sumsq"], float(ck["ob_count"])
    state.update(theta=ck["theta"].astype(np.float32), iteration=int(ck["iteration"]), episodes=int(ck["episodes"]),
                 env_steps=int(ck["env_steps"]), wall_time=float(ck["wall_time"]))
    return state


def task_of(state: dict, args) -> dict:
    """What the master publishes: theta and the statistics, frozen for the generation (Eq. 9)."""
    ob = state["ob_stat"]
    mean, std = (ob.mean, ob.std) if args.obs_norm else (np.zeros_like(ob.sum), np.ones_like(ob.sum))
    return {"theta": state["theta"], "ob_mean": mean, "ob_std": std, "ob_clip": args.obs_norm}


def es_generation(pool: WorkerPool, noise: NoiseTable, state: dict, args) -> dict:
    """One generation of Algorithm 2 (docs/es_openai.md, "Pseudocode"): collect the population,
    shape the returns, estimate g, take the optimizer step, then merge the observation sums."""
    t0, stale_before = time.time(), pool.stale_logged
    gen = Generation(args.seed, state["iteration"], args)
    results = pool.run(task_of(state, args), gen.next_job, gen.done, gen.jobs_left)
    stale = pool.stale - stale_before  # including those that came back during the last evaluation
    pool.stale_logged = pool.stale
    accepted = [results[k] for k in range(gen.closed_at)]
    pairs = [PairResult(*r) for r in accepted if r[0] == "pair"]
    noiseless = np.array([r[1:] for r in accepted if r[0] == "noiseless"]).reshape(-1, 2)  # (return, length) rows
    indices = np.array([r.idx for r in pairs])
    returns = np.array([r.returns for r in pairs])  # (m, 2) or (m, 1)
    sign_returns, lengths = np.array([r.sign_returns for r in pairs]), np.array([r.lengths for r in pairs])
    t1 = time.time()
    # The new state gets its own optimizer and statistics: `state` stays whole until the step is
    # accepted, so a stop or a NaN at any moment leaves a consistent state to checkpoint.
    optimizer, ob_stat = copy.deepcopy(state["optimizer"]), copy.deepcopy(state["ob_stat"])
    F = shape_fitness(returns, sign_returns, args.fitness)  # Eqs. (4)-(5)
    g = es_gradient(F, indices, noise.table, state["theta"].size)  # Eq. (6)
    theta = update(state["theta"], g, optimizer, args)  # Eq. (7), (8) or (3), with weight decay
    ob_count = 0.0
    for r in pairs:  # Eq. (9): the new observations count from the next generation on
        if r.ob_sum is not None:
            ob_stat.increment(r.ob_sum, r.ob_sumsq, float(sum(r.lengths)))
            ob_count += float(sum(r.lengths))
    steps = int(lengths.sum() + noiseless[:, 1].sum())
    skipped = stale + sum(1 for k in results if k >= gen.closed_at)
    new = dict(state, theta=theta, optimizer=optimizer, ob_stat=ob_stat, iteration=state["iteration"] + 1,
               episodes=state["episodes"] + lengths.size + len(noiseless), env_steps=state["env_steps"] + steps)
    times = {name: np.array([r.times[name] for r in pairs]) for name in TIMERS}
    info = dict(returns=returns.ravel(), lengths=lengths.ravel(), noiseless=noiseless, steps=steps,
                skipped_frac=skipped / (skipped + len(accepted)), ob_count=ob_count, grad_norm=np.linalg.norm(g),
                update_norm=np.linalg.norm(theta - state["theta"]), time_gen=time.time() - t0,
                time_update=time.time() - t1, times=times,
                finite=all(np.isfinite(a).all() for a in (theta, returns, ob_stat.sum, ob_stat.sumsq)))
    return new, info


def start_run(args, sizes: list, obs_dim: int) -> tuple:
    """(run directory or None for a new run, state, log rows): the saved run to resume, or a new state."""
    if args.resume is not None:
        state = load_state(os.path.join(args.resume, "checkpoints", "latest.npz"), args, sizes)
        try:
            rows = [r for r in read_csv_rows(os.path.join(args.resume, "progress.csv"), COLUMNS)
                    if int(r[0]) <= state["iteration"]]
        except (OSError, ValueError):
            raise UserError(f"the progress.csv of '{args.resume}' is missing or damaged") from None
        return args.resume, state, rows
    return None, new_state(args, sizes, obs_dim), []


def available_memory():
    """MemAvailable of /proc/meminfo in bytes (what can be used without swapping), or None."""
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None


def shm_space():
    """Free bytes of /dev/shm, where shared memory lives on Linux (64 MB in a default Docker container)."""
    try:
        st = os.statvfs("/dev/shm")
        return st.f_bavail * st.f_frsize
    except (OSError, AttributeError):
        return None


def make_noise_table(args) -> NoiseTable:
    """The shared table of --noise-size numbers, or a UserError if memory or /dev/shm cannot hold it."""
    need = 4 * args.noise_size
    for what, free in (("memory", available_memory()), ("/dev/shm", shm_space())):
        if free is not None and need > free:
            raise UserError(f"the noise table needs {need / 2**30:.2f} GiB and {what} has {free / 2**30:.2f} GiB "
                            "available: lower --noise-size")
    if args.noise_size >= 10**8:
        print(f"creating the noise table: {args.noise_size:,} float32 ({4 * args.noise_size / 2**30:.2f} GiB) ...",
              flush=True)
    try:
        return NoiseTable(args.noise_size, args.noise_seed)
    except OSError as e:
        raise UserError(f"cannot create the shared noise table: {e.strerror}; lower --noise-size") from None


def evaluate_if_due(pool: WorkerPool, state: dict, args) -> np.ndarray:
    """Every --eval-every generations and at the last one: the noiseless policy on --eval-episodes
    episodes; otherwise [nan]."""
    if state["iteration"] % args.eval_every and state["iteration"] != args.iterations:
        return np.array([np.nan])
    return pool.evaluate(task_of(state, args), state["iteration"], range(args.eval_episodes))


class Run:
    """The bookkeeping around the algorithm: the noise table, the run directory (config.json,
    progress.csv, snapshots, progress.png), the progress line, the worker processes, and how a run ends."""

    def __init__(self, args):
        obs_dim, act_space = check_env(args)
        self.args, self.held = args, {}  # held: signal handlers set aside while a stopped run saves itself
        self.plotted, self.next_plot = 0, time.monotonic() + PLOT_EVERY  # rows in progress.png, and when next
        self.sizes = layer_sizes(obs_dim, args.hidden_sizes, act_space, args.ac_bins)
        if args.noise_size < n_params(self.sizes):  # before theta_0 takes the memory of a policy this large
            raise UserError(f"--noise-size {args.noise_size} is smaller than the policy's {n_params(self.sizes)} "
                            "parameters")
        run_dir, self.start_state, self.rows = start_run(args, self.sizes, obs_dim)
        # The noise table before anything is written: a refusal (memory, /dev/shm) leaves no trace.
        self.noise = make_noise_table(args)
        try:
            self.dir = run_dir or make_run_dir(args.out_dir, args.env, "es_openai", args.seed)
            try:
                if args.resume is not None:  # first: a resumed run writes into a folder it did not make
                    probe_writable(os.path.join(self.dir, "checkpoints"))
                write_json(os.path.join(self.dir, "config.json"),
                           {**vars(args), "script": "es_openai.py", "run_dir": self.dir, "versions": versions()})
            except OSError as e:  # a resumed run's folder that cannot be written
                raise UserError(f"cannot write to the run directory '{self.dir}': {e.strerror}") from None
            if args.resume is None:
                checkpoint(self.dir, self.start_state, args, self.sizes, snapshot=True)  # generation 0 is a snapshot too
            write_csv_rows(os.path.join(self.dir, "progress.csv"), self.rows, COLUMNS)
            self.csv = open(os.path.join(self.dir, "progress.csv"), "a", newline="")
            print(f"run directory: {self.dir}  ({n_params(self.sizes)} parameters)", flush=True)
            self.pool = (RayPool if args.ray else WorkerPool)(args.workers, self.noise, args, act_space, self.sizes)
        except BaseException:  # the shared table never outlives a run that could not start
            self.noise.close()
            raise
        col = COLUMNS.index("eval_return_mean")  # a resumed run shows its last evaluation until the next one
        evals = [float(r[col]) for r in self.rows if r[col] not in ("", "nan")]
        self.last_eval = evals[-1] if evals else np.nan
        self.t_start, self.title = time.time() - self.start_state["wall_time"], f"OpenAI ES on {args.env}"

    def elapsed(self) -> float:
        """Seconds of training, over all the sessions of a resumed run."""
        return time.time() - self.t_start

    def log(self, new: dict, info: dict, ev: np.ndarray) -> str:
        """Writes a row of progress.csv (flushed); returns the progress line."""
        self.last_eval = self.last_eval if np.isnan(ev).all() else ev.mean()
        row, line = log_generation(self.csv, new, info, ev, self.last_eval, self.args)
        self.rows.append(row)
        return line

    def save_if_due(self, state: dict, ev: np.ndarray):
        """A checkpoint after every evaluation and every --save-every generations (and then a
        snapshot too), and progress.png redrawn with it if the last plot is PLOT_EVERY seconds old."""
        if state["iteration"] % self.args.save_every == 0 or not np.isnan(ev).all():
            checkpoint(self.dir, state, self.args, self.sizes, snapshot=state["iteration"] % self.args.save_every == 0)
            self.plot()

    def plot(self, final: bool = False):
        """Redraws progress.png if rows came since the last plot: during the run at most every
        PLOT_EVERY seconds, at the end (final) always."""
        if len(self.rows) > self.plotted and (final or time.monotonic() >= self.next_plot):
            plot_progress(self.dir, self.rows, self.title)
            self.plotted, self.next_plot = len(self.rows), time.monotonic() + PLOT_EVERY

    def hold_stops(self):
        """From here on a stop would only interrupt the final save: Ctrl-C and SIGTERM wait for it."""
        if not self.held:  # held once: a second call would keep SIG_IGN as the handlers to put back
            self.held = hold_stops()

    def interrupted(self, status) -> str:
        """Ctrl-C or SIGTERM: a second one (a shell or `timeout` often sends one) waits until the
        state is saved. A stop after the target or a divergence was logged changes nothing."""
        self.hold_stops()
        if status in ("target", "diverged"):
            return status
        print(f"\ninterrupted: resume with  python es_openai.py --resume {self.dir}", file=sys.stderr)
        return "interrupted"

    def close_and_save(self, state: dict, status):
        """Whatever ended the run, a worker's death included: the workers and the table go, and the
        last logged generation is saved (a snapshot too if the run finished)."""
        self.hold_stops()  # a worker's death arrives with stops still live, and closing the pool takes seconds
        self.pool.close()
        self.noise.close()
        self.csv.close()
        checkpoint(self.dir, state, self.args, self.sizes, snapshot=status in ("done", "target"))
        self.plot(final=True)
        for signum, handler in self.held.items():
            signal.signal(signum, handler)

    def finish(self, state: dict, status: str) -> dict:
        """The report of a run that reached its target, and train()'s result."""
        if status == "target":
            print(f"target {self.args.target_return} reached at generation {state['iteration']}: "
                  f"{state['episodes']} episodes, {state['env_steps']} env steps, "
                  f"{fmt_time(state['wall_time'])}", flush=True)
        return dict(state, run_dir=self.dir, status=status)


def train(args) -> dict:
    """The run, line by line as the pseudocode of docs/es_openai.md: generations of Algorithm 2
    (es_generation), evaluations, the log and snapshots (Run). Returns the final state."""
    run = Run(args)  # theta_0 by normc (Eq. 10), or loaded by --resume; the noise table; the workers start
    state, status = run.start_state, None
    try:
        while state["iteration"] < args.iterations:
            new, info = es_generation(run.pool, run.noise, state, args)  # the population, Eqs. (4)-(9)
            if not info["finite"]:
                status = "diverged"
                print(f"NaN or inf at generation {new['iteration']}: the run stops; the last good checkpoint "
                      "is kept (try a smaller --alpha or --sigma)", file=sys.stderr)
                break
            ev = evaluate_if_due(run.pool, new, args)
            new = dict(new, wall_time=run.elapsed())
            line = run.log(new, info, ev)  # a row of progress.csv
            reached = args.target_return is not None and not np.isnan(ev).all() and ev.mean() >= args.target_return
            # Logged: only now may `state`, and so a checkpoint, hold it. An interrupt before this
            # leaves `state` at the last logged generation, and --resume redoes this one (its row dropped).
            state, status = new, ("target" if reached else status)
            print(line, flush=True)  # a generation shown is a generation saved, whenever the run stops
            run.save_if_due(state, ev)
            if status == "target":
                break
        status = status or "done"
        run.hold_stops()  # the run is over
    except KeyboardInterrupt:
        status = run.interrupted(status)
    finally:
        run.close_and_save(state, status)
    return run.finish(state, status)


def log_generation(csv_file, state: dict, info: dict, ev: np.ndarray, last_eval: float, args) -> tuple:
    """Writes one row of progress.csv (flushed); returns it and the progress line to print."""
    returns, lengths, nl, times = info["returns"], info["lengths"], info["noiseless"], info["times"]
    steps_per_s = info["steps"] / info["time_gen"]
    nan = float("nan")
    row = [state["iteration"], state["episodes"], state["env_steps"], round(state["wall_time"], 2),
           returns.mean(), returns.std(), returns.min(), returns.max(), ev.mean(), ev.std() if ev.size > 1 else nan,
           round(steps_per_s, 1), lengths.mean(),
           nl[:, 0].mean() if len(nl) else nan, nl[:, 0].std() if len(nl) else nan,
           nl[:, 1].mean() if len(nl) else nan, len(nl),
           lengths.size + len(nl), info["steps"], args.workers, info["skipped_frac"], info["ob_count"],
           state["ob_stat"].count, np.linalg.norm(state["theta"]), info["grad_norm"], info["update_norm"],
           info["time_gen"], info["time_update"]]
    for name in TIMERS:
        row += [times[name].min(), times[name].max(), times[name].mean()]
    csv.writer(csv_file).writerow(row)
    csv_file.flush()
    eta = (args.iterations - state["iteration"]) * state["wall_time"] / state["iteration"]
    line = (f"gen {state['iteration']:5d} | eps {state['episodes']:7d} | steps {state['env_steps']:10,d} | "
            f"return {returns.mean():8.1f} (max {returns.max():7.1f}) | eval {last_eval:7.1f} | "
            f"{steps_per_s:6.0f} steps/s | {fmt_time(state['wall_time'])} | ETA {fmt_time(eta)}")
    return [str(v) for v in row], line


# ----------------------------------------------------------------------------------------------
# Saved policies: --play, --video, --evaluate-snapshots
# ----------------------------------------------------------------------------------------------

def saved_run(run_dir: str, args) -> tuple:
    """Restore the options of a run directory that shape its policy; returns (sizes, act_space)."""
    cfg = read_config(run_dir, "es_openai.py", ("env", "hidden", "activation", "ac_bins", "obs_norm"))
    for key in ("env", "hidden", "activation", "ac_bins", "obs_norm", "episode_length", "noise_size"):
        if key in cfg:
            setattr(args, key, cfg[key])
    try:
        resolve_config(args)  # the saved values checked as the command line's are (a hand-edited file)
    except UserError as e:
        raise UserError(f"the config.json of '{run_dir}': {e}") from None
    args.ac_noise_std = 0.0
    obs_dim, act_space = check_env(args)
    return layer_sizes(obs_dim, args.hidden_sizes, act_space, args.ac_bins), act_space


def play(args) -> np.ndarray:
    sizes, act_space = saved_run(args.play, args)
    state = load_state(os.path.join(args.play, "checkpoints", "latest.npz"), args, sizes)
    if args.video:
        check_video_folder(args.play, args.env)
    task = task_of(state, args)
    policy = Policy(task["theta"], sizes, args.activation, task["ob_mean"], task["ob_std"], act_space, args.ac_bins,
                    task["ob_clip"])
    env = make_env(args.env, args.episode_length)
    returns = np.array([rollout(env, policy, int(stream(args.seed, EVAL, 10**6, j).integers(2**31))).ret
                        for j in range(args.episodes)])
    print(f"{args.env}: mean return {returns.mean():.1f} +- {returns.std():.1f} over {args.episodes} episodes "
          f"(min {returns.min():.1f}, max {returns.max():.1f}), policy of generation {state['iteration']}")
    if args.video:
        print(f"video: {write_gif(args, policy)}")
    return returns


def evaluate_snapshots(args) -> list:
    """Every snapshot of a run on the same --episodes evaluation episodes: snapshots.csv and .png."""
    run_dir = args.evaluate_snapshots
    sizes, act_space = saved_run(run_dir, args)
    folder = os.path.join(run_dir, "checkpoints")
    names = sorted(f for f in os.listdir(folder) if f.startswith("iter_") and f.endswith(".npz")) \
        if os.path.isdir(folder) else []
    if not names:
        raise UserError(f"'{run_dir}' has no snapshots (checkpoints/iter_*.npz)")
    if not os.access(run_dir, os.W_OK) or os.path.isdir(os.path.join(run_dir, "snapshots.csv")):
        raise UserError(f"cannot write snapshots.csv to '{run_dir}'")
    states = [load_state(os.path.join(folder, f), args, sizes) for f in names]  # all checked before any runs
    noise = NoiseTable(1, 0)  # evaluation needs no noise
    pool = WorkerPool(args.workers, noise, args, act_space, sizes)
    table = []
    try:
        for state in states:
            ret = pool.evaluate(task_of(state, args), 10**6, range(args.episodes))  # the same episodes for all
            table.append([state["iteration"], state["env_steps"], ret.mean(), ret.std(), ret.min(), ret.max()])
            print(f"generation {state['iteration']:5d} | steps {state['env_steps']:10,d} | return {ret.mean():8.1f} "
                  f"+- {ret.std():6.1f} over {args.episodes} episodes", flush=True)
    finally:
        pool.close()
        noise.close()
    write_csv_rows(os.path.join(run_dir, "snapshots.csv"), table,
                   ["iteration", "env_steps", "return_mean", "return_std", "return_min", "return_max"])
    plot_snapshots(run_dir, np.array(table), args)
    print(f"wrote {os.path.join(run_dir, 'snapshots.csv')} and snapshots.png")
    return table


def plot_snapshots(run_dir: str, table: np.ndarray, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.errorbar(table[:, 0], table[:, 2], yerr=table[:, 3], fmt="o-", capsize=3)
    ax.set_xlabel("generation")
    ax.set_ylabel(f"return (mean +- std over {args.episodes} episodes)")
    ax.set_title(f"snapshots of {os.path.basename(os.path.normpath(run_dir))}", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(run_dir, "snapshots.tmp.png"), dpi=90)
    plt.close(fig)
    os.replace(os.path.join(run_dir, "snapshots.tmp.png"), os.path.join(run_dir, "snapshots.png"))


def check_video_folder(run_dir: str, env_id: str) -> str:
    """--video: the GIF's path, its folder made and tried before any episode is played, so that a
    folder that takes no file costs one line, not the evaluation before it."""
    folder, path = os.path.join(run_dir, "video"), os.path.join(run_dir, "video", f"{env_id}.gif")
    try:
        os.makedirs(folder, exist_ok=True)
        probe_writable(folder)
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror}") from None
    return path


def write_gif(args, policy: Policy) -> str:
    """One evaluation episode as a GIF through Pillow (brought by matplotlib)."""
    if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"  # headless MuJoCo rendering
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame's frames (Box2D, classic control) need no window
    from PIL import Image
    frames = []
    try:
        env = make_env(args.env, args.episode_length, render=True)
        rollout(env, policy, int(stream(args.seed, EVAL, 10**6, 0).integers(2**31)), frames=frames)
        images = [Image.fromarray(f).resize((f.shape[1] // 2, f.shape[0] // 2)) for f in frames]
    except Exception as e:
        raise UserError(f"cannot render {args.env}: {str(e).splitlines()[0]} (MuJoCo needs MUJOCO_GL=egl "
                        "or osmesa without a display; Box2D needs pygame)") from None
    path = check_video_folder(args.play, args.env)  # checked before the episodes; again, as it is used
    try:
        images[0].save(path + ".tmp.gif", save_all=True, append_images=images[1:], duration=80, loop=0)
        os.replace(path + ".tmp.gif", path)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror}") from None
    return path


# Flags that may be given again with --resume: they steer the run (or, alpha and sigma, rescue a
# diverged one); every other option keeps its saved value. --workers defaults to this machine's
# cores, not the saved count (the results do not depend on it).
RESUME_OVERRIDES = ("workers", "lockstep", "iterations", "target_return", "save_every", "alpha", "sigma")


def flags_given(argv) -> set:
    """The flags written on the command line (--name, also from --name=value)."""
    return {w.split("=")[0] for w in (sys.argv[1:] if argv is None else argv)}


def check_modes(args: argparse.Namespace, argv) -> None:
    """A flag of another mode than the one asked for is a mistake to report, not to ignore (a
    forgotten --play would otherwise start a training)."""
    words = flags_given(argv)
    modes = [f"--{m.replace('_', '-')}" for m in ("play", "resume", "evaluate_snapshots")
             if getattr(args, m, None) is not None]
    if len(modes) > 1:
        raise UserError(f"{' and '.join(modes)} do not go together: one at a time")
    if "--video" in words and args.play is None:
        raise UserError("--video goes with --play RUN_DIR")
    if getattr(args, "ray", False) and (args.play is not None or getattr(args, "evaluate_snapshots", None) is not None):
        raise UserError(f"--ray is for training: {'--play' if args.play is not None else '--evaluate-snapshots'} "
                        "runs on this machine")
    if "--episodes" in words and args.play is None and getattr(args, "evaluate_snapshots", None) is None:
        raise UserError("--episodes goes with --play RUN_DIR" +
                        (" or --evaluate-snapshots RUN_DIR" if hasattr(args, "evaluate_snapshots") else ""))


def refuse_fixed_flags(argv) -> None:
    """On --resume the saved configuration holds: a flag that would change it is refused, not ignored."""
    words, free = flags_given(argv), set(RESUME_OVERRIDES) | {"resume", "ray", "ray_address"}
    fixed = sorted({o for act in build_parser()._actions if act.dest not in free for o in act.option_strings
                    if o in words})
    if fixed:
        again = ", ".join("--" + k.replace("_", "-") for k in RESUME_OVERRIDES)
        raise UserError(f"{', '.join(fixed)} cannot change a resumed run (it keeps its config.json); "
                        f"only {again} may be given again")


def quiet_mujoco():
    """MuJoCo 3.3+ warns, once per environment made, that gymnasium's model files use a deprecated
    attribute (settotalmass): not this script's to fix, and its default handler also writes
    MUJOCO_LOG.TXT into the current folder. Other MuJoCo warnings still print, one line each."""
    try:
        import mujoco
    except ImportError:
        return

    def warn(message: str):
        if "settotalmass" not in message:
            print(f"MuJoCo warning: {message.strip()}", file=sys.stderr)
    mujoco.set_mju_user_warning(warn)


def main(argv=None):
    args = build_parser().parse_args(argv)
    quiet_mujoco()
    try:
        check_modes(args, argv)
        if args.play is not None or args.evaluate_snapshots is not None:  # an empty RUN_DIR is a mistake
            resolve_config(args)
            return play(args) if args.play is not None else evaluate_snapshots(args)
        if args.resume is not None:  # the saved configuration wins, except RESUME_OVERRIDES given again
            refuse_fixed_flags(argv)
            words = flags_given(argv)
            required = ("env", "seed", "sigma", "alpha", "population", "mirror", "fitness", "hidden", "optimizer")
            for key, value in read_config(args.resume, "es_openai.py", required).items():
                given = key in RESUME_OVERRIDES and f"--{key.replace('_', '-')}" in words
                if key in vars(args) and key not in ("resume", "workers", "ray", "ray_address") and not given:
                    setattr(args, key, value)
        resolve_config(args)  # read_config checked the saved values' types, this checks the values
        result = train(args)
    except UserError as e:
        print(f"es_openai.py: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # before the first generation, or during --play / --evaluate-snapshots
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
    except MemoryError:
        print("es_openai.py: error: not enough memory for this configuration (--noise-size, --hidden, "
              "--population?)", file=sys.stderr)
        sys.exit(2)
    except RuntimeError as e:
        print(f"es_openai.py: error: {e}", file=sys.stderr)
        sys.exit(1)
    except OSError as e:  # the run directory stopped taking files (a full disk): checkpoints are atomic
        where = f" '{e.filename}'" if e.filename else ""
        print(f"es_openai.py: error: cannot write{where}: {e.strerror or e}; the last checkpoint is kept",
              file=sys.stderr)
        sys.exit(1)
    finally:
        stop_ray()
    if result["status"] == "diverged":
        sys.exit(1)
    if result["status"] == "interrupted":
        if argv is None:  # the command line: a second Ctrl-C or SIGTERM while Python shuts down
            # (and resets its handlers to the default) would kill it instead of letting it exit with 130
            hold_stops()
        sys.exit(130)
    return result


def stop_on_sigterm(signum, frame):
    raise KeyboardInterrupt  # SIGTERM stops the run like Ctrl-C: workers stopped, checkpoint kept


if __name__ == "__main__":
    # Ctrl-C raises KeyboardInterrupt, even in a job started in the background (there SIGINT begins
    # ignored, and the run could not be stopped with kill -INT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    main()
