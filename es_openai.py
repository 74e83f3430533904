"""OpenAI evolution strategies with a NumPy MLP and a shared noise table. Salimans, Ho, Chen, Sidor
& Sutskever (2017), "Evolution Strategies as a Scalable Alternative to Reinforcement Learning",
https://arxiv.org/abs/1703.03864, Algorithm 2 and its tricks; docs/es_openai.md derives the math,
cited below as "Eq. (n)".

    python es_openai.py --env HalfCheetah-v5             # train with the environment's preset
    python es_openai.py --evaluate-snapshots runs/<run-dir> --episodes 5
"""

import os
import signal

if __name__ in ("__main__", "__mp_main__"):  # Ctrl-C as the modules below load: status 130
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))
os.environ.setdefault("OMP_NUM_THREADS", "1")  # one BLAS thread per process: workers own the cores
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import contextlib
import csv
import glob
import io
import json
import math
import multiprocessing
import multiprocessing.connection
import shlex
import shutil
import socket
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, ProcessPoolExecutor, wait
from multiprocessing import shared_memory

import gymnasium as gym  # after the thread settings, which numpy reads on import
import numpy as np

# ---- configuration: presets, then the command line (a flag overrides its preset) ----
# The paper's MuJoCo policy (2x64 tanh, 10 action bins for Hopper and Swimmer), the starter code's
# l2coeff and action noise; HalfCheetah's sigma and alpha tuned here (docs/es_openai.md, "Presets").
MUJOCO = dict(hidden="64,64", sigma=0.05, alpha=0.03, l2coeff=0.005, ac_noise_std=0.01)
MUJOCO.update(eval_every=5, eval_episodes=5)
SMALL_STEPS = dict(MUJOCO, sigma=0.02, alpha=0.01, ac_bins=10)  # Swimmer's and Hopper's
PRESETS = {
    "HalfCheetah-v5": dict(MUJOCO, population=40, iterations=150, target_return=2385.79),
    "Swimmer-v5": dict(SMALL_STEPS, population=40, iterations=100, target_return=128.25),
    "Hopper-v5": dict(SMALL_STEPS, population=100, iterations=1000, target_return=3403.46),
    "CartPole-v1": dict(hidden="16", sigma=0.05, alpha=0.03, l2coeff=0.005, population=40),
}
PRESETS["CartPole-v1"].update(iterations=100, eval_every=5, eval_episodes=20, target_return=475.0)
PRESETS["CartPole-v1"].update(noise_size=10_000_000)  # 40 MB: plenty for 114 parameters
# What a preset leaves unset, and every other environment:
GENERIC = dict(hidden="64,64", sigma=0.02, alpha=0.01, l2coeff=0.005, population=40)
GENERIC.update(ac_noise_std=None, ac_bins=0, iterations=200, eval_every=10, eval_episodes=10)
GENERIC.update(target_return=None, noise_size=250_000_000)


def preset(env_id: str) -> dict:  # the defaults of the flags a preset sets
    return {**GENERIC, **PRESETS.get(env_id, {})}


def build_parser(env_id: str = "HalfCheetah-v5") -> argparse.ArgumentParser:
    p = Parser(
        prog="es_openai.py",
        description=f"OpenAI evolution strategies. The defaults shown are {env_id}'s preset.",
        epilog=preset_table(),
        formatter_class=HelpFormatter,
    )
    a = p.add_argument  # the types (below the banner) refuse impossible values in one line
    n = at_least
    r = in_range
    a("--env", default="HalfCheetah-v5", help="gymnasium id with Box or Discrete actions")
    a("--seed", type=n(0), default=0, help="decides every random number but the noise table")
    a("--iterations", type=n(0), help="generations, updates of theta")
    a("--population", type=n(2), help="n, population_size: training episodes per generation")
    a("--min-timesteps", type=n(0), default=0, help="timesteps_per_batch: steps it also needs")
    a("--sigma", type=n(0, float), help="σ, noise_stdev of the parameter noise (typ. 0.01-0.05)")
    a("--optimizer", choices=("adam", "sgd", "plain"), default="adam", help="plain: Eq. (3)")
    a("--alpha", type=n(0, float), help="α, the optimizer's step size (typ. 0.001-0.03)")
    a("--momentum", type=r(0, 1), default=0.9, help="γ, SGD momentum")
    a("--beta1", type=r(0, 1), default=0.9, help="Adam β1")
    a("--beta2", type=r(0, 1), default=0.999, help="Adam β2")
    a("--l2coeff", type=r(0, math.inf), help="λ, L2 weight decay (starter 0.005)")
    modes = ("centered_rank", "sign", "centered_sign_rank", "none")
    a("--fitness", choices=modes, default="centered_rank", help="return_proc_mode (Eqs. 4-5)")
    a("--no-mirror", dest="mirror", action="store_false", help="no pairs (mirror: %(default)s)")
    a("--hidden", help="hidden layer sizes, e.g. 64,64")
    a("--activation", choices=("tanh", "relu", "lrelu", "elu"), default="tanh", help="hidden f")
    a("--no-obs-norm", dest="obs_norm", action="store_false", help="raw (obs norm: %(default)s)")
    a("--calc-obstat-prob", type=r(0, 1, True), default=0.01, help="pairs that record states")
    a("--ac-noise-std", type=r(0, math.inf), help="σ_a, training actions' noise (None: Box 0.01)")
    a("--ac-bins", type=n(0), help="K uniform bins per action dimension (0: continuous)")
    a("--eval-prob", type=r(0, 1), default=0.0, help="jobs that are noiseless (starter 0.003)")
    a("--noise-size", type=n(1), help="float32 numbers in the noise table (250M: 1 GB)")
    a("--noise-seed", type=n(0), default=123, help="seed of the noise table")
    a("--episode-length", type=n(1), help="steps per episode (None: the time limit)")
    a("--workers", type=n(1), help="rollout processes (None: the cores, or Ray's CPUs)")
    a("--lockstep", type=n(1), default=4, metavar="P", help="pairs a worker steps at once (speed)")
    a("--out-dir", default="runs", help="where run directories are made")
    a("--eval-every", type=n(1), help="evaluate the noiseless policy every K generations")
    a("--eval-episodes", type=n(1), help="episodes per evaluation")
    a("--save-every", type=n(0), default=10, help="snapshot_freq: a snapshot every K (0: none)")
    a("--target-return", type=r(-math.inf, math.inf, True), help="stop once an evaluation has it")
    a("--resume", metavar="RUN_DIR", help="continue the run saved in RUN_DIR")
    a("--play", metavar="RUN_DIR", help="evaluate RUN_DIR's policy (or a snapshot file)")
    a("--evaluate-snapshots", metavar="RUN_DIR", help="every snapshot of RUN_DIR: table, plot")
    a("--episodes", type=n(1), default=10, help="episodes for --play and --evaluate-snapshots")
    a("--video", action="store_true", help="with --play: video/<env>.gif")
    a("--ray", action="store_true", help="rollouts on Ray: a new one here, or RAY_ADDRESS's")
    a("--ray-address", metavar="ADDRESS", help="with --ray: a cluster, e.g. 10.0.0.1:6379 or auto")
    p.set_defaults(**preset(env_id))
    return p


# ---- the math (docs/es_openai.md, Eqs. 1-9) ----
# The first word of a random stream's name: what its numbers are for (as in ars.py).
TRAIN = 0
EVAL = 2
INIT = 3


def stream(seed: int, *key: int) -> np.random.Generator:
    """An independent random stream named by what it is for: key = (purpose, iteration, index)."""
    return np.random.default_rng(np.random.SeedSequence([seed, *key]))


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Eq. (4): the rank of each value mapped linearly onto [-0.5, 0.5]. Equal values share their
    average rank, so a mirrored pair with equal returns contributes nothing."""
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(len(x))
    _, tie, count = np.unique(x, return_inverse=True, return_counts=True)
    ranks = (np.bincount(tie, weights=ranks) / count)[tie]
    return ranks / max(len(x) - 1, 1) - 0.5


def shape_fitness(returns: np.ndarray, sign_returns: np.ndarray, mode: str) -> np.ndarray:
    """Eqs. (4)-(5), return_proc_mode, on (m, 2) mirrored or (m, 1) returns, ranked all together
    (deviation: tied returns share their rank; the starter's argsort splits them)."""
    if mode == "centered_rank":
        return centered_ranks(returns.ravel()).reshape(returns.shape)
    if mode == "sign":  # the sum over the episode of sign(r_t)
        return sign_returns.astype(np.float64)
    if mode == "centered_sign_rank":
        return centered_ranks(sign_returns.ravel()).reshape(returns.shape)
    return returns.astype(np.float64)


def batched_weighted_sum(weights, indices, table: np.ndarray, dim: int, batch_size=500):
    """sum_i w_i eps_i, eps_i = table[idx_i : idx_i + dim], as (batch, dim) products (the starter's
    batch of 500, smaller for wide policies: at most 64 MB of noise at once)."""
    batch_size = max(1, min(batch_size, (64 << 20) // (4 * dim)))
    total = np.zeros(dim, dtype=np.float32)
    for start in range(0, len(weights), batch_size):
        eps = np.stack([table[i : i + dim] for i in indices[start : start + batch_size]])
        total += weights[start : start + batch_size].astype(np.float32) @ eps
    return total


def es_gradient(F: np.ndarray, indices: np.ndarray, table: np.ndarray, dim: int) -> np.ndarray:
    """Eq. (6): g = (1/n) sum over the pairs of w_i eps_i, n the episodes; w_i = F+ - F- for a pair
    (F alone without mirroring). The 1/sigma of Eq. (2) is left to the step size (the starter's)."""
    w = F[:, 0] - F[:, 1] if F.shape[1] == 2 else F[:, 0]
    return batched_weighted_sum(w, indices, table, dim) / F.size


def update(state: dict, g: np.ndarray, args) -> dict:
    """The optimizer's step on -g + l2coeff theta (weight decay), from its state (m, v, t): Adam
    and SGD fold the 1/sigma of Eq. (2) into alpha, plain steps take it. Returns the new state."""
    theta = state["theta"]
    m = state["opt_m"]
    v = state["opt_v"]
    t = state["opt_t"] + 1
    scale = 1.0 / args.sigma if args.optimizer == "plain" else 1.0
    grad = -g * scale + args.l2coeff * theta
    if args.optimizer == "adam":  # Eq. (7), the starter's form: the bias corrections in the step
        b1 = args.beta1
        b2 = args.beta2
        a = args.alpha * np.sqrt(1 - b2**t) / (1 - b1**t)
        m = b1 * m + (1 - b1) * grad
        v = b2 * v + (1 - b2) * grad * grad
        step = -a * m / (np.sqrt(v) + 1e-8)
    elif args.optimizer == "sgd":  # Eq. (8), the starter's momentum: v <- gamma v + (1 - gamma) g
        v = args.momentum * v + (1 - args.momentum) * grad
        step = -args.alpha * v
    else:  # Eq. (3)
        step = -args.alpha * grad
    return dict(theta=theta + step.astype(np.float32), opt_m=m, opt_v=v, opt_t=t)


def ob_mean_std(state: dict) -> tuple:
    """Eq. (9) from sums (sum, sum of squares, count) that add up across workers; the starter's
    start count 1e-2 and std floor 0.1 (deviation: float64 here, float32 there)."""
    mean = state["ob_sum"] / state["ob_count"]
    return mean, np.sqrt(np.maximum(state["ob_sumsq"] / state["ob_count"] - np.square(mean), 1e-2))


# ---- the policy: an MLP over one flat float32 theta (Eqs. 9-11) ----
def layer_sizes(obs_dim: int, hidden: list, act, ac_bins: int) -> list:
    """[obs_dim, *hidden, outputs]: n logits (Discrete), adim * K logits (K bins), or adim."""
    if isinstance(act, gym.spaces.Discrete):
        return [obs_dim, *hidden, int(act.n)]
    return [obs_dim, *hidden, act.shape[0] * (ac_bins or 1)]


def n_params(sizes: list) -> int:
    """d, the number of weights and biases of an MLP with these layer sizes."""
    return sum(n_in * n_out + n_out for n_in, n_out in zip(sizes[:-1], sizes[1:]))


def unflatten(theta: np.ndarray, sizes: list) -> list:
    """Views [(W, b), ...] into theta, W of shape (n_in, n_out) as in the starter: h @ W + b."""
    layers = []
    start = 0
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        W = theta[start : start + n_in * n_out].reshape(n_in, n_out)
        start += n_in * n_out
        b = theta[start : start + n_out]
        start += n_out
        layers.append((W, b))
    return layers


def normc_init(sizes: list, rng: np.random.Generator) -> np.ndarray:
    """Eq. (10): Gaussian columns rescaled to norm 1 (hidden layers) and 0.01 (output); biases 0."""
    theta = np.zeros(n_params(sizes), np.float32)
    layers = unflatten(theta, sizes)
    for j, (W, _) in enumerate(layers):
        w = rng.standard_normal(W.shape)
        std = 0.01 if j == len(layers) - 1 else 1.0
        W[:] = w * std / np.sqrt(np.square(w).sum(axis=0, keepdims=True))
    return theta


def activate(z: np.ndarray, activation: str):  # the hidden layers' nonlinearity, in place
    if activation == "tanh":
        np.tanh(z, out=z)
    elif activation == "relu":
        np.maximum(z, 0.0, out=z)
    elif activation == "lrelu":  # deviation: the starter's slope is 0.2
        np.maximum(z, 0.01 * z, out=z)
    else:  # a real ELU (the notebooks this grew from mapped elu to a leaky ReLU)
        z[:] = np.where(z > 0, z, np.expm1(np.minimum(z, 0.0)))


class Policy:
    """a = pi_theta(o) for the B parameter vectors of a job, stepped together (a mirrored pair:
    theta + sigma eps and theta - sigma eps): normalize (Eq. 9), the MLP, the action of Eq. (11).
    Each layer is kept as [W; b], the bias as its last row, so that f(x W + b) is one product
    per row, f([x, 1] @ [W; b]): (B, 1, n_in + 1) @ (B, n_in + 1, n_out)."""

    def __init__(self, thetas, sizes, activation, act, ac_bins, ob_mean, ob_std, ob_clip=True):
        per_theta = [[np.vstack([W, b]) for W, b in unflatten(theta, sizes)] for theta in thetas]
        self.layers = [np.stack(Wb).astype(np.float64) for Wb in zip(*per_theta)]
        self.B = len(thetas)
        self.ones = np.ones((self.B, 1))
        self.activation = activation
        self.inv_std = 1.0 / np.asarray(ob_std, np.float64)
        self.shift = -np.asarray(ob_mean, np.float64) * self.inv_std  # (o - mean) / std
        self.clip = 5.0 if ob_clip else np.inf  # without normalization the observations go in raw
        self.discrete = isinstance(act, gym.spaces.Discrete)
        self.bins = ac_bins
        if not self.discrete:
            self.low = act.low.astype(np.float64)
            self.high = act.high.astype(np.float64)
            self.rows = np.arange(len(self.low))  # bin k: low + k (high - low) / (K - 1)
            self.bin_values = np.linspace(self.low, self.high, ac_bins or 2, axis=1)  # (adim, K)

    def __call__(self, obs, noise=None):
        """obs: (B, n) observations; noise: (B, adim) action noise, or None. (B, adim) actions,
        or B ints."""
        x = np.minimum(
            np.maximum(obs * self.inv_std + self.shift, -self.clip), self.clip
        )  # Eq. (9)
        for Wb in self.layers[:-1]:
            z = (np.concatenate([x, self.ones], axis=1)[:, None] @ Wb)[:, 0]  # x W + b, (B, n_out)
            activate(z, self.activation)
            x = z
        y = (np.concatenate([x, self.ones], axis=1)[:, None] @ self.layers[-1])[:, 0]  # (B, n_out)
        if self.discrete:
            return np.argmax(y, axis=1).tolist()
        if self.bins:  # Eq. (11): per dimension, the value of the bin with the largest logit
            y = self.bin_values[self.rows, np.argmax(y.reshape(self.B, -1, self.bins), axis=2)]
        if noise is not None:  # action noise, training episodes only
            y = y + noise
        return np.minimum(np.maximum(y, self.low), self.high)  # deviation: clipped to the bounds


# ---- the noise table, the episodes, and the jobs a worker runs ----
def noise_table(size: int, seed: int, shared=True) -> tuple:
    """float32 N(0, 1) numbers, eps_i the slice table[idx_i : idx_i + dim], in one block of shared
    memory that every worker maps without a copy (shared=False: a plain array, for Ray's object
    store). Returns (block or None, table). Deviation: numpy's PCG64, not the starter's randn."""
    block = shared_memory.SharedMemory(create=True, size=4 * size) if shared else None
    table = np.ndarray(size, np.float32, block.buf) if shared else np.empty(size, np.float32)
    rng = np.random.default_rng(seed)
    for start in range(0, size, 1 << 24):
        rng.standard_normal(out=table[start : start + (1 << 24)], dtype=np.float32)
    return block, table


def rollouts(envs: list, policy: Policy, env_seeds: list, rngs=None, ac_noise_std=0.0, keep=None):
    """The B = policy.B episodes of a message's jobs, stepped together, one policy call a step:
    job j's episodes start from env_seeds[j], draw action noise from rngs[j] (Eq. 11) and keep
    their states' sums if keep[j]. Per episode: (return, the sum of its rewards' signs, length,
    (sum x, sum x^2) of the states acted on, or None)."""
    B = policy.B
    per = B // len(env_seeds)  # 2 for a mirrored pair, else 1
    while len(envs) < B:
        envs.append(make_env(envs[0].spec.id, envs[0].spec.max_episode_steps))
    obs = [reset_env(envs[i], env_seeds[i // per])[0] for i in range(B)]
    kept = [[ob] if keep and keep[i // per] else None for i, ob in enumerate(obs)]
    total = [0.0] * B
    signs = [0.0] * B
    steps = [0] * B
    running = list(range(B))
    noise = None
    t = 0
    while running:
        if rngs is not None and ac_noise_std > 0:  # step t's row of a (256, B, adim) block
            if t % 256 == 0:  # each job's (256, per, adim) from its own stream
                shape = (256, per, len(policy.low))
                block = np.concatenate(
                    [ac_noise_std * rng.standard_normal(shape) for rng in rngs], 1
                )
            noise = block[t % 256]
        actions = policy(np.array(obs), noise)
        t += 1
        for i in list(running):
            ob, r, terminated, truncated, _ = envs[i].step(actions[i])
            r = float(r)
            total[i] += r
            signs[i] += (r > 0) - (r < 0)
            steps[i] += 1
            if terminated or truncated:  # the terminal state is not acted on
                running.remove(i)
                continue
            obs[i] = ob
            if kept[i] is not None:
                kept[i].append(ob)
    sums = [None] * B
    for i, observed in enumerate(kept):
        if observed is not None:
            x = np.asarray(observed, np.float64)
            sums[i] = (x.sum(axis=0), np.square(x).sum(axis=0))
    return list(zip(total, signs, steps, sums))


def job_stream(args, kind: str, t: int, k: int) -> tuple:
    """(job (kind, t, k)'s random stream, whether the job is noiseless): an evaluation episode
    is; a population job is with probability --eval-prob, decided by the first number of its
    stream, so that the master knows it too before the job runs (Workers.run)."""
    if kind == "eval":
        return stream(args.seed, EVAL, t, k), True
    rng = stream(args.seed, TRAIN, t, k)
    return rng, rng.random() < args.eval_prob


def run_jobs(envs: list, args, table, task: dict, jobs: list) -> list:
    """A worker's answer to a message of jobs (kind, t, k): a population job is a mirrored pair
    (or one episode) of Eq. (6), or a noiseless episode (an evaluation, or one of --eval-prob).
    The message's pairs are stepped together (--lockstep: speed only). Returns [(k, result)],
    a result a dict of plain values."""
    theta = task["theta"]

    def policy(thetas):
        ob = (task["ob_mean"], task["ob_std"], task["ob_clip"])
        return Policy(thetas, args.sizes, args.activation, args.act, args.ac_bins, *ob)

    signs = (1.0, -1.0) if args.mirror else (1.0,)
    out = {}
    pairs = []  # the jobs of theta +- sigma eps_i (or theta + sigma eps_i)
    for i, (kind, t, k) in enumerate(jobs):
        rng, noiseless = job_stream(args, kind, t, k)  # its stream decides, in this order:
        env_seed = int(rng.integers(2**31))  # the episodes' seed (deviation: the starter's differ),
        if noiseless:
            ((R, _, L, _),) = rollouts(envs, policy([theta]), [env_seed])
            out[i] = dict(kind="noiseless" if kind == "train" else "eval", ret=R, length=L)
            continue
        idx = int(rng.integers(0, len(table) - theta.size + 1))  # the noise index,
        # whether to record observations (deviation: per pair; per episode in the starter)
        keep = bool(rng.random() < args.calc_obstat_prob * args.obs_norm)
        eps = table[idx : idx + theta.size]
        thetas = [theta + (s * args.sigma) * eps for s in signs]  # theta +- sigma eps_i
        pairs.append(dict(i=i, idx=idx, keep=keep, thetas=thetas, env_seed=env_seed, rng=rng))
    batches = [pairs] if args.mirror else [[pair] for pair in pairs]  # unmirrored: one by one
    for batch in [b for b in batches if b]:
        members = [member for pair in batch for member in pair["thetas"]]
        seeds = [pair["env_seed"] for pair in batch]
        rngs = [pair["rng"] for pair in batch]
        keep = [pair["keep"] for pair in batch]
        episodes = rollouts(envs, policy(members), seeds, rngs, args.ac_noise_std, keep)
        for j, pair in enumerate(batch):
            mine = episodes[len(signs) * j : len(signs) * (j + 1)]
            returns, sign_returns, lengths, sums = zip(*mine)
            r = dict(kind="pair", idx=pair["idx"], returns=returns, sign_returns=sign_returns)
            r.update(lengths=lengths, ob_sum=None, ob_sumsq=None)
            if pair["keep"]:
                r.update(ob_sum=sum(s[0] for s in sums), ob_sumsq=sum(s[1] for s in sums))
            out[pair["i"]] = r
    return [(k, out[i]) for i, (_, _, k) in enumerate(jobs)]


# ---- training: Algorithm 2 (docs/es_openai.md, "Master and workers", "Pseudocode") ----
class Workers:
    """Persistent workers fed from a task list: a message is up to --lockstep jobs (kind, t, k)
    and the task they belong to (theta and the observation statistics); `depth` messages per
    worker are out at once.
    A message still running when its call ended comes back during a later call: its result is
    dropped and counted (stale)."""

    def __init__(self, args, pool, table, table_ref=None, depth=1):
        self.args = args
        self.pool = pool  # local processes or Ray (make_pool)
        self.table = table  # the noise table as the master reads it
        self.table_ref = table_ref  # Ray's reference to it: a task gets it mapped; local: None
        self.depth = depth
        self.running = {}  # each message out: the number of the call that handed it out
        self.calls = 0
        self.stale = 0

    def run(self, task: dict, kind: str, t: int, n: int, min_steps: int = 0) -> tuple:
        """Jobs (kind, t, k), k = 0, 1, ..., handed out in order until they hold n episodes that
        count (training episodes: 2 a pair, 1 unmirrored; or evaluation episodes) and min_steps env
        steps; the call ends at the shortest finished prefix of jobs that holds both, whatever
        the workers' speeds. Returns ({k: result}, the prefix's length)."""
        a = self.args
        per = 1 if kind == "eval" or not a.mirror else 2
        self.calls += 1
        results = {}
        handed = 0  # episodes that count, handed out
        k = 0  # the next job
        prefix = 0  # the finished prefix: jobs 0 .. prefix - 1
        counted = 0  # the prefix's episodes that count, and its env steps
        steps = 0
        try:
            while True:
                while prefix in results:  # the finished prefix grows
                    r = results[prefix]
                    counted += len(r["returns"]) if r["kind"] == "pair" else r["kind"] == "eval"
                    steps += sum(r["lengths"]) if r["kind"] == "pair" else r["length"]
                    prefix += 1
                    if counted >= n and steps >= min_steps:
                        return results, prefix
                wanted = handed < n or steps < min_steps
                while wanted and len(self.running) < self.depth * a.workers:
                    left = -(-(n - handed) // per)  # jobs still needed, at least
                    size = min(a.lockstep, max(1, -(-left // a.workers)))  # a worker's share
                    jobs = []
                    while wanted and len(jobs) < size:
                        _, noiseless = job_stream(a, kind, t, k)  # what the worker will draw
                        handed += per * (kind == "eval" or not noiseless)
                        jobs.append((kind, t, k))
                        k += 1
                        wanted = handed < n or steps < min_steps
                    future = self.pool.submit(work, a, task, jobs, self.table_ref)
                    self.running[future] = self.calls
                finished, _ = wait(self.running, return_when=FIRST_COMPLETED)
                for future in finished:
                    out = future.result()  # [(k, result), ...]
                    if self.running.pop(future) == self.calls:
                        results.update(out)
                    else:  # of an older call: still running when that call ended
                        self.stale += len(out)
        except Exception as e:  # a worker died, or a rollout failed: one line, never a hang
            raise worker_died(e) from None


def task_of(state: dict, args) -> dict:  # theta and the statistics, frozen for a generation
    if args.obs_norm:
        mean, std = ob_mean_std(state)
    else:
        mean = np.zeros_like(state["ob_sum"])
        std = mean + 1.0
    return dict(theta=state["theta"], ob_mean=mean, ob_std=std, ob_clip=args.obs_norm)


def es_generation(workers, state: dict, args) -> tuple:
    """One generation: the population, shaped returns, g, the optimizer step, the new statistics.
    `state` is left whole, so a stop or a NaN leaves a state to checkpoint."""
    t0 = time.time()
    theta = state["theta"]  # (d,) float32
    t = state["iteration"]
    stale = workers.stale  # results of older calls dropped so far
    results, closed = workers.run(
        task_of(state, args), "train", t, args.population, args.min_timesteps
    )
    accepted = [results[k] for k in range(closed)]
    pairs = [r for r in accepted if r["kind"] == "pair"]
    noiseless = np.array([(r["ret"], r["length"]) for r in accepted if r["kind"] == "noiseless"])
    noiseless = noiseless.reshape(-1, 2)  # (return, length) rows
    indices = np.array([r["idx"] for r in pairs])
    returns = np.array([r["returns"] for r in pairs])  # (m, 2) mirrored, or (m, 1)
    sign_returns = np.array([r["sign_returns"] for r in pairs])
    lengths = np.array([r["lengths"] for r in pairs])
    F = shape_fitness(returns, sign_returns, args.fitness)  # Eqs. (4)-(5)
    t1 = time.time()
    g = es_gradient(F, indices, workers.table, theta.size)  # Eq. (6)
    new = dict(state, **update(state, g, args))  # Eq. (7), (8) or (3)
    ob_count = 0.0
    for r in pairs:  # Eq. (9): the new observations count from the next generation on
        if r["ob_sum"] is not None:
            new["ob_sum"] = new["ob_sum"] + r["ob_sum"]
            new["ob_sumsq"] = new["ob_sumsq"] + r["ob_sumsq"]
            new["ob_count"] = new["ob_count"] + float(sum(r["lengths"]))
            ob_count += float(sum(r["lengths"]))
    n_steps = int(lengths.sum() + noiseless[:, 1].sum())
    skipped = workers.stale - stale + sum(k >= closed for k in results)  # past the prefix, or older
    new["iteration"] = t + 1
    new["episodes"] = state["episodes"] + lengths.size + len(noiseless)
    new["env_steps"] = state["env_steps"] + n_steps
    checked = (new["theta"], returns, new["ob_sum"], new["ob_sumsq"])
    info = dict(returns=returns.ravel(), lengths=lengths.ravel(), noiseless=noiseless)
    info.update(steps=n_steps, skipped_frac=skipped / (skipped + len(accepted)))
    info.update(finite=all(np.isfinite(x).all() for x in checked), ob_count=ob_count)
    info.update(grad_norm=np.linalg.norm(g), update_norm=np.linalg.norm(new["theta"] - theta))
    info.update(time_gen=time.time() - t0, time_update=time.time() - t1)
    return new, info


def evaluate(workers, state: dict, args, episodes: int, key=None) -> np.ndarray:  # noiseless
    results, _ = workers.run(task_of(state, args), "eval", key or state["iteration"], episodes)
    return np.array([results[i]["ret"] for i in range(episodes)])


def train(args) -> dict:
    run = Run(args)  # theta_0 by normc (Eq. 10), or --resume's; the noise table; the workers
    state = run.state
    target = args.target_return
    try:
        while state["iteration"] < args.iterations:
            if STOP.is_set():  # Ctrl-C or SIGTERM: the run ends with what it logged
                return run.end(state, "interrupted")
            new, info = es_generation(run.workers, state, args)  # the population, Eqs. (4)-(9)
            if not info["finite"]:
                return run.end(state, "diverged")  # the last good state is checkpointed
            ev = None
            if new["iteration"] % args.eval_every == 0 or new["iteration"] == args.iterations:
                ev = evaluate(run.workers, new, args, args.eval_episodes)
            state = new
            run.log(state, info, ev)  # progress.csv, the progress line, the checkpoint
            if ev is not None and target is not None and ev.mean() >= target:
                return run.end(state, "target")
        return run.end(state, "done")
    except WorkerDied as e:  # the run ends with its last logged generation
        return run.end(state, "interrupted" if STOP.is_set() else f"stopped: {e}")
    finally:
        run.close()  # however it ends, the workers stop and the noise table is freed


# ---- plumbing: the command line, stops, workers, Ray, run directory, --play (not the math) ----
class Parser(argparse.ArgumentParser):
    """argparse, with a user's mistake in one line: 'SCRIPT: error: ... (see --help)', status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help shows every flag's default, and the presets as the table written below."""


def preset_table() -> str:  # --help's epilog: a row per preset, the flags by their symbols
    symbols = dict(hidden="hidden", sigma="σ", alpha="α", l2coeff="λ", population="n")
    symbols.update(iterations="T", eval_every="every", eval_episodes="evals", ac_bins="K")
    symbols.update(ac_noise_std="σ_a", target_return="target", noise_size="table")
    rows = [["--env", *symbols.values()]]
    for env_id in [*PRESETS, "any other"]:
        rows.append([env_id, *(str(preset(env_id)[key]) for key in symbols)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return "presets (a flag overrides its preset):\n  " + "\n  ".join(table)


def at_least(low, kind=int):  # an argparse type: an int >= low, or a finite float > low
    def number(text: str):
        value = kind(text)
        if kind is int and not value >= low:
            raise argparse.ArgumentTypeError(f"must be >= {low}")
        if kind is not int and not low < value < math.inf:
            raise argparse.ArgumentTypeError(f"must be > {low}")
        return value

    return number


def in_range(low, high, closed=False):  # an argparse type: a float in [low, high), or [low, high]
    def number(text: str):
        value = float(text)
        if not (low <= value < high or closed and value == high):
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}{']' if closed else ')'}")
        return value

    return number


def check(ok: bool, message: str):  # a user's mistake: one line, exit status 2, nothing written
    if not ok:
        build_parser().error(str(message).partition("\n")[0])  # whatever raised it, one line


# What a resumed run takes from its config.json; of these, only STEER may be given new values.
SAVED = "env seed iterations population min_timesteps sigma optimizer alpha momentum beta1 beta2 "
SAVED += "l2coeff fitness mirror hidden activation obs_norm calc_obstat_prob ac_noise_std ac_bins "
SAVED += "eval_prob noise_size noise_seed episode_length out_dir eval_every eval_episodes "
SAVED = (SAVED + "save_every target_return lockstep").split()
STEER = "iterations alpha sigma target_return save_every lockstep".split()  # and the workers


def parse(argv: list) -> argparse.Namespace:
    """The flags over the preset of --env; with --resume, over the options of the saved run."""
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--env", default=build_parser().get_default("env"))
    first.add_argument("--resume")
    known = first.parse_known_args(argv)[0]
    p = build_parser(known.env)
    if known.resume is not None:
        saved = read_config(known.resume)
        p.set_defaults(**{key: saved[key] for key in SAVED})
        p.description = p.description.split(". ")[0] + f". The defaults shown are {known.resume}'s."
    args = p.parse_args(argv)
    if known.resume is not None:
        changed = [key for key in SAVED if key not in STEER and getattr(args, key) != saved[key]]
        steer = ", --".join(STEER + ["workers", "ray", "ray-address"]).replace("_", "-")
        flag = "--" + "".join(changed[:1]).replace("_", "-")
        check(not changed, f"{flag} cannot change a resumed run; only --{steer} can")
    args.command = shlex.join(["python", SCRIPT, *argv])  # config.json: the same run again
    return args


def configure(args) -> argparse.Namespace:  # what no one flag can check; the workers
    sizes_ok = all(h.strip().isdigit() and int(h) > 0 for h in args.hidden.split(","))
    check(sizes_ok, f"--hidden takes sizes like 64 or 64,64, not '{args.hidden}'")
    even = not args.mirror or args.population % 2 == 0
    check(even, "--population must be even with mirrored sampling (or add --no-mirror)")
    pairs = args.mirror or "sign" not in args.fitness  # the starter defines them on pairs only
    check(pairs, f"--fitness {args.fitness} needs mirrored sampling (the starter code's)")
    recorded = not args.obs_norm or args.calc_obstat_prob > 0
    check(recorded, "--calc-obstat-prob must be > 0 with observation normalization")
    try:
        env = gym.make(args.env)
    except (gym.error.Error, ImportError) as e:  # an unknown id, a missing extra, a retired version
        check(False, e)
    obs = env.observation_space
    act = env.action_space
    flat = isinstance(obs, gym.spaces.Box) and len(obs.shape) == 1
    discrete = isinstance(act, gym.spaces.Discrete)
    box = isinstance(act, gym.spaces.Box) and len(act.shape) == 1
    takes = "es_openai.py takes a flat Box of observations, Discrete or flat Box actions"
    check(flat and (discrete or box), f"{args.env}: {obs}, {act}; {takes}")
    limited = env.spec.max_episode_steps or args.episode_length
    check(limited, f"{args.env} has no time limit: give --episode-length")
    box_only = not discrete or not args.ac_bins and not args.ac_noise_std
    for_box = "--ac-bins and --ac-noise-std are for Box actions"
    check(box_only, f"{args.env} has discrete actions: {for_box}")
    check(args.ac_bins != 1, "--ac-bins must be 0 (continuous) or at least 2")
    bounded = discrete or not args.ac_bins or np.isfinite([act.low, act.high]).all()
    check(bounded, f"{args.env} has unbounded actions: --ac-bins needs finite bounds")
    if args.ac_noise_std is None:
        args.ac_noise_std = 0.0 if discrete else 0.01
    args.act = act
    hidden = [int(h) for h in args.hidden.split(",")]
    args.sizes = layer_sizes(obs.shape[0], hidden, act, args.ac_bins)
    args.ray = args.ray or bool(args.ray_address)  # an address says where Ray is: it means --ray
    if args.ray:  # found, or refused, before anything is written
        ray = start_ray(args.ray_address)
        args.workers = args.workers or int(ray.cluster_resources()["CPU"])
    args.workers = args.workers or os.cpu_count()
    return args


def make_env(env_id: str, episode_length=None, render=False):
    """gymnasium's environment, its episodes cut at episode_length; render: its frames in RGB,
    MuJoCo's from the camera that follows the body."""
    kw = dict(max_episode_steps=episode_length) if episode_length else {}
    if render:
        kw["render_mode"] = "rgb_array"
    env = gym.make(env_id, **kw)
    model = getattr(env.unwrapped, "model", None)
    if render and model is not None:
        cameras = [model.camera(i).name for i in range(model.ncam)]
        if "track" in cameras:
            env = gym.make(env_id, camera_name="track", **kw)
    return env


ENVS = {}  # this process's environments, by id and episode length: rollouts adds as needed


def envs_of(env_id: str, episode_length=None) -> list:  # (not functools.cache: Ray pickles it)
    if (env_id, episode_length) not in ENVS:
        ENVS[env_id, episode_length] = [make_env(env_id, episode_length)]
    return ENVS[env_id, episode_length]


def reset_env(env, seed: int):
    """env.reset(seed); BipedalWalker's old Box2D world would change the episode: a new one."""
    walker = env.unwrapped
    if type(walker).__name__ == "BipedalWalker" and walker.terrain:
        walker._destroy()
        walker.world = type(walker.world)()
    return env.reset(seed=seed)


def mujoco_warning(message: str):  # MuJoCo 3.3+ warns of gymnasium's settotalmass: not ours
    if "settotalmass" not in message:
        print(f"MuJoCo warning: {message.strip()}", file=sys.stderr)


def quiet_mujoco():  # MuJoCo's warnings through mujoco_warning, in the master and each worker
    with contextlib.suppress(ImportError):
        import mujoco

        mujoco.set_mju_user_warning(mujoco_warning)


SCRIPT = "es_openai.py"  # as its run directories name it
STOP = threading.Event()  # set by Ctrl-C or SIGTERM; train() ends the run after the generation


def on_stop(signum, frame):  # the first stop sets STOP; a second ends the process at once
    if STOP.is_set():
        os._exit(130)
    STOP.set()


def init_worker():  # a worker: Ctrl-C is its master's to act on, and it ends with its master
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker has its master's on_stop
    quiet_mujoco()  # a worker started by spawn or forkserver has not the master's
    master = multiprocessing.parent_process().sentinel  # ready once the master has ended
    threading.Thread(target=exit_after, args=(master,), daemon=True).start()


def exit_after(sentinel):  # even a master killed with SIGKILL leaves no worker behind
    multiprocessing.connection.wait([sentinel])
    os._exit(1)


BLOCK = None  # a local worker's map of its master's noise table (init_table), and its view
TABLE = None


def init_table(name, size: int):  # a local worker: init_worker, then the noise table, mapped
    global BLOCK, TABLE
    init_worker()
    if name is not None:  # (--play's workers need none)
        BLOCK = shared_memory.SharedMemory(name)
        TABLE = np.ndarray(size, np.float32, BLOCK.buf)


def work(args, task: dict, jobs: list, table=None) -> list:
    """A worker's answer to a message (run_jobs). table: Ray's read-only copy of the noise table
    from its object store; a local worker reads TABLE."""
    if table is None:
        table = TABLE
    return run_jobs(envs_of(args.env, args.episode_length), args, table, task, jobs)


class WorkerDied(Exception):
    """A worker process died, or a rollout failed: the run ends with its last logged generation."""


def worker_died(e: Exception) -> WorkerDied:  # what a worker's failure says, in one line
    if isinstance(e, (BrokenExecutor, EOFError, OSError)):
        # A worker, or the forkserver, died. The others end now: a pool that breaks while it is
        # still starting workers can miss one, and then wait for it forever.
        for worker in multiprocessing.active_children():
            worker.terminate()
        return WorkerDied("a worker process died")
    reason = str(e).strip().splitlines()[0] if str(e).strip() else ""  # raised in a worker,
    return WorkerDied(f"a rollout failed: {type(e).__name__}: {reason}")  # or Ray lost one


def make_pool(args, block=None):  # the workers: processes started at the first job, or Ray's
    if args.ray:
        return RayExecutor(args.ray_address)
    name = None if block is None else block.name
    return ProcessPoolExecutor(
        args.workers, initializer=init_table, initargs=(name, args.noise_size)
    )


def start_ray(address):  # Ray is imported only for --ray: it stays optional
    try:
        import ray
    except ImportError:
        check(False, "--ray needs Ray: pip install ray")
    address = address or os.environ.get("RAY_ADDRESS")
    host, _, port = (address or "").replace("ray://", "").rpartition(":")
    try:  # Ray itself would retry an address that does not answer for minutes
        if host and port.isdigit():
            socket.create_connection((host, int(port)), timeout=10).close()
        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=False, include_dashboard=False)
    except Exception as e:  # a closed port; no cluster for 'auto'; ...
        check(False, f"no Ray cluster answers at {address} ({getattr(e, 'strerror', None) or e})")
    if __name__ != "__main__":  # imported (tests, notebooks): this file's code goes by value
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray


class RayExecutor:  # Ray tasks as submit(fn, *args) -> Future; a lost worker's task runs again
    retries = 3  # times a task runs again after its worker is lost

    def __init__(self, address):
        self.ray = start_ray(address)
        self.remote = {}  # fn: its Ray task, spread over the nodes
        ENVS.clear()  # Ray takes this file's globals by value: this process's own would travel

    def submit(self, fn, *args):  # a task run again gives the same result: a job names its seeds
        if fn not in self.remote:
            options = dict(num_cpus=1, max_retries=self.retries, scheduling_strategy="SPREAD")
            self.remote[fn] = self.ray.remote(**options)(fn)
        return self.remote[fn].remote(*args).future()

    def shutdown(self, wait=True, cancel_futures=False):
        pass  # Ray's worker processes are Ray's


def write_file(path: str, data: bytes):  # whole or not at all: a temporary file, then renamed
    try:
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
    except OSError as e:  # a full disk: the file as it was, no temporary file, its path named
        with contextlib.suppress(OSError):
            os.remove(path + ".tmp")
        raise OSError(e.errno, e.strerror, path) from None


def lock(run_dir: str):
    """RUN_DIR/.lock, locked while this master writes the run: the system lifts the lock when the
    process ends, however it ends, and forked workers do not hold it."""
    f = open(os.path.join(run_dir, ".lock"), "a")  # noqa: SIM115 (held as long as the run)
    try:
        if sys.platform == "win32":
            import msvcrt

            msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
        else:
            import fcntl

            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        check(False, f"another {SCRIPT} is writing '{run_dir}': wait for it to end, or stop it")
    return f


# What a checkpoint holds, with the policy's shape.
STATE = "theta opt_m opt_v opt_t ob_sum ob_sumsq ob_count iteration episodes env_steps wall_time"
STATE = STATE.split()
COLUMNS = (
    "iteration episodes env_steps wall_time_s return_mean return_std return_min return_max "
    "eval_return_mean eval_return_std steps_per_s length_mean noiseless_return_mean "
    "noiseless_return_std noiseless_length_mean noiseless_count episodes_this_gen "
    "timesteps_this_gen workers skipped_frac obs_count_this_gen obs_count theta_norm "
    "grad_norm update_norm time_gen_s time_update_s"
).split()


def table_room() -> float:  # bytes free where shared memory lives (Linux: /dev/shm); else inf
    with contextlib.suppress(OSError):  # a container's /dev/shm may hold 64 MB only
        return shutil.disk_usage("/dev/shm").free
    return math.inf


class Run:
    """The run directory and its files, the progress line, the noise table, the workers, how a
    run ends."""

    def __init__(self, args):
        theta = normc_init(args.sizes, stream(args.seed, INIT))
        table_size = f"{4 * args.noise_size / 2**30:.2f} GiB"
        too_small = f"--noise-size {args.noise_size} is smaller than the policy's {theta.size}"
        check(args.noise_size >= theta.size, f"{too_small} parameters")
        free = table_room()
        needs = f"the noise table needs {table_size}, and /dev/shm has {free / 2**30:.2f} GiB free"
        check(4 * args.noise_size < free, f"{needs}: lower --noise-size")
        self.args = args
        n = args.sizes[0]
        self.state = dict(theta=theta, opt_m=0 * theta, opt_v=0 * theta, opt_t=0, iteration=0)
        self.state.update(ob_sum=np.zeros(n), ob_sumsq=np.full(n, 1e-2), ob_count=1e-2)
        self.state.update(episodes=0, env_steps=0, wall_time=0.0)
        self.rows = []  # progress.csv: a dict per generation
        if args.resume is None:
            name = f"{args.env}__es_openai__{args.seed}__{time.strftime('%Y%m%d-%H%M%S')}"
            self.dir = os.path.join(args.out_dir, name)
            os.makedirs(os.path.join(self.dir, "checkpoints"))  # an OSError here: one line (main)
        else:
            self.dir = args.resume
        self.lock = lock(self.dir)  # one master per run directory
        if args.resume is not None:  # the log up to the checkpoint: what came after it is redone
            self.state = load_checkpoint(os.path.join(self.dir, "checkpoints", "latest.npz"), args)
            with open(os.path.join(self.dir, "progress.csv")) as f:
                rows = list(csv.DictReader(f))
            self.rows = [row for row in rows if int(row["iteration"]) <= self.state["iteration"]]
        versions = dict(
            python=sys.version.split()[0], numpy=np.__version__, gymnasium=gym.__version__
        )
        versions["mujoco"] = getattr(sys.modules.get("mujoco"), "__version__", None)  # if loaded
        config = dict(vars(args), act=str(args.act), script=SCRIPT, **versions)
        write_file(os.path.join(self.dir, "config.json"), json.dumps(config, indent=1).encode())
        self.write_progress()
        if args.resume is None:  # generation 0 is a snapshot too
            save_checkpoint(self.dir, self.state, args, snapshot=True)
        self.t0 = time.time() - self.state["wall_time"]
        size = f"{theta.size} parameters; the noise table: {table_size}"
        print(f"run directory: {self.dir}  ({size})", flush=True)
        self.block, table = noise_table(args.noise_size, args.noise_seed, shared=not args.ray)
        pool = make_pool(args, self.block)
        if args.ray:  # the table in Ray's object store, held for the run: a retried task maps it
            ref = pool.ray.put(table)
            self.workers = Workers(args, pool, pool.ray.get(ref), ref, depth=2)
        else:
            self.workers = Workers(args, pool, table)

    def close(self):  # the workers stop, the noise table is freed, the lock is lifted
        self.workers.pool.shutdown(cancel_futures=True)
        self.workers.table = None  # the master's view of the table, before the block goes
        if self.block is not None:
            self.block.close()
            self.block.unlink()
        self.lock.close()

    def write_progress(self):  # progress.csv, a row per generation logged
        text = io.StringIO()
        table = csv.DictWriter(text, COLUMNS, lineterminator="\n")
        table.writeheader()
        table.writerows(self.rows)
        write_file(os.path.join(self.dir, "progress.csv"), text.getvalue().encode())

    def evaluations(self) -> list:  # (mean, generation) of each evaluation logged so far
        means = [(float(row["eval_return_mean"]), int(row["iteration"])) for row in self.rows]
        return [(mean, it) for mean, it in means if not math.isnan(mean)]

    def log(self, state: dict, info: dict, ev):
        a = self.args
        it = state["iteration"]
        R = info["returns"]
        L = info["lengths"]
        nl = info["noiseless"]  # the noiseless episodes' (return, length) rows
        state["wall_time"] = time.time() - self.t0
        speed = info["steps"] / info["time_gen"]
        shown = ev if ev is not None else np.array([np.nan])
        row = dict(iteration=it, episodes=state["episodes"], env_steps=state["env_steps"])
        row.update(wall_time_s=round(state["wall_time"], 2), steps_per_s=round(speed, 1))
        row.update(return_mean=R.mean(), return_std=R.std(), return_min=R.min(), return_max=R.max())
        row.update(eval_return_mean=shown.mean())
        row.update(eval_return_std=shown.std() if shown.size > 1 else np.nan)
        row.update(length_mean=L.mean(), noiseless_count=len(nl))
        row.update(episodes_this_gen=L.size + len(nl), timesteps_this_gen=info["steps"])
        if not len(nl):  # no noiseless episode this generation: nan
            nl = np.full((1, 2), np.nan)
        row.update(noiseless_return_mean=nl[:, 0].mean(), noiseless_return_std=nl[:, 0].std())
        row.update(noiseless_length_mean=nl[:, 1].mean())
        row.update(workers=a.workers, skipped_frac=info["skipped_frac"])
        row.update(obs_count_this_gen=info["ob_count"], obs_count=state["ob_count"])
        row.update(theta_norm=np.linalg.norm(state["theta"]), grad_norm=info["grad_norm"])
        row.update(update_norm=info["update_norm"], time_gen_s=info["time_gen"])
        row.update(time_update_s=info["time_update"])
        self.rows.append(row)
        self.write_progress()
        evals = self.evaluations()
        evaluation = f"eval {evals[-1][0]:7.1f}" if evals else "eval       -"
        eta = (a.iterations - it) * state["wall_time"] / it / 60
        print(
            f"gen {it:5d} | eps {state['episodes']:7d} | steps {state['env_steps']:10,d} | "
            f"return {R.mean():8.1f} (max {R.max():7.1f}) | {evaluation} | {speed:6.0f} "
            f"steps/s | {state['wall_time'] / 60:5.1f} min | ETA {eta:5.1f} min",
            flush=True,
        )
        snapshot = a.save_every > 0 and it % a.save_every == 0
        if snapshot or ev is not None:
            save_checkpoint(self.dir, state, a, snapshot)
            write_file(
                os.path.join(self.dir, "progress.png"), plot(self.rows, f"OpenAI ES on {a.env}")
            )

    def end(self, state: dict, status: str) -> dict:  # the checkpoint, the plot, the last line
        a = self.args  # a finished run's last state is a snapshot too
        save_checkpoint(self.dir, state, a, snapshot=status in ("done", "target"))
        if self.rows:
            write_file(
                os.path.join(self.dir, "progress.png"), plot(self.rows, f"OpenAI ES on {a.env}")
            )
        done = f"{state['iteration']}: {state['episodes']} episodes, {state['env_steps']} env steps"
        if status == "target":
            message = f"target {a.target_return} reached at generation {done}"
        elif status == "done":
            message = f"done, generation {done}"
            evals = self.evaluations()
            if a.target_return is not None and evals:
                best, at = max(evals, key=lambda evaluation: evaluation[0])  # the first best
                message += f"; the target {a.target_return} was not reached: the best evaluation "
                message += f"was {best:.1f}, at generation {at}"
        elif status == "diverged":
            message = f"NaN or inf after generation {done}; its checkpoint is kept (a smaller "
            message += "--alpha or --sigma?)"
        else:
            again = shlex.join(["python", SCRIPT, "--resume", self.dir])
            message = f"{status}: resume with  {again}"
        print(message, file=sys.stdout if status in ("target", "done") else sys.stderr)
        return dict(state, run_dir=self.dir, status=status)


def save_checkpoint(run_dir: str, state: dict, args, snapshot: bool):  # --resume, --play read it
    policy = dict(env=args.env, sizes=args.sizes, activation=args.activation)
    policy.update(ac_bins=args.ac_bins, obs_norm=args.obs_norm)
    data = io.BytesIO()
    np.savez(data, **state, **policy)
    names = ["latest.npz"]
    if snapshot and args.save_every:
        names.append(f"iter_{state['iteration']:06d}.npz")
    for name in names:
        write_file(os.path.join(run_dir, "checkpoints", name), data.getvalue())


def load_checkpoint(path: str, args) -> dict:  # the state save_checkpoint wrote, for args' policy
    try:
        with np.load(path, allow_pickle=False) as f:
            c = {name: f[name] for name in f.files}
        saved = (str(c["env"]), c["sizes"].tolist(), str(c["activation"]), bool(c["obs_norm"]))
        state = {key: c[key] for key in STATE}  # ob_sum and ob_sumsq as saved
        for key in ("theta", "opt_m", "opt_v"):
            state[key] = c[key].astype(np.float32)
        for key in ("opt_t", "ob_count", "iteration", "episodes", "env_steps", "wall_time"):
            state[key] = c[key].item()
    except Exception as e:  # missing, not a zip, cut short, pickled, not es_openai.py's
        check(False, f"cannot read the checkpoint '{path}' ({type(e).__name__}: {e})")
    check(saved[0] == args.env, f"the checkpoint '{path}' is for {saved[0]}, not {args.env}")
    wanted = (args.env, args.sizes, args.activation, args.obs_norm)
    what = "(environment, layer sizes, activation, observation normalization)"
    check(saved == wanted, f"the checkpoint '{path}' is for {saved}, not {wanted} {what}")
    d = n_params(args.sizes)
    fits = state["theta"].shape == state["opt_m"].shape == state["opt_v"].shape == (d,)
    check(fits, f"the checkpoint '{path}' holds theta, opt_m or opt_v not of the policy's {d}")
    return state


def read_config(run_dir: str) -> dict:  # config.json of a run directory of this script
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            config = json.load(f)
        by = config["script"]
    except (OSError, ValueError, LookupError, TypeError):  # no such file, not JSON, no "script"
        check(False, f"'{run_dir}' is not a run directory of {SCRIPT}")
    check(by == SCRIPT, f"'{run_dir}' is a run directory of {by}, not of {SCRIPT}; use python {by}")
    return config


def plot(rows: list, title: str) -> bytes:  # progress.png: the learning curve
    from matplotlib.figure import Figure

    c = {key: np.array([row[key] for row in rows], dtype=float) for key in COLUMNS}
    ok = ~np.isnan(c["eval_return_mean"])
    fig = Figure((7, 4))  # fixed margins: a tight layout costs as much as the drawing
    ax = fig.subplots(gridspec_kw=dict(left=0.12, right=0.97, bottom=0.12, top=0.92))
    ax.fill_between(c["env_steps"], c["return_min"], c["return_max"], alpha=0.2, label="range")
    ax.plot(c["env_steps"], c["return_mean"], label="training (mean)")
    ax.plot(c["env_steps"][ok], c["eval_return_mean"][ok], "o-", label="evaluation (mean)")
    ax.set(xlabel="environment steps", ylabel="return", title=title)
    ax.legend(loc="lower right")
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=90)
    return image.getvalue()


def film(args, state: dict) -> bytes:  # --play's evaluation episode 0, the job ("eval", 10**6, 0)
    env = gym.wrappers.RenderCollection(make_env(args.env, args.episode_length, render=True))
    run_jobs([env], args, None, task_of(state, args), [("eval", 10**6, 0)])  # no noise table
    return gif(env.render())


def gif(frames: list) -> bytes:  # every second frame (one a step), at half size, 12.5 per second
    from PIL import Image  # comes with matplotlib

    images = [Image.fromarray(frame[::2, ::2]) for frame in frames[::2]]
    data = io.BytesIO()
    images[0].save(data, format="GIF", save_all=True, append_images=images[1:], duration=80, loop=0)
    return data.getvalue()


def play(args):  # --play RUN_DIR or one snapshot file, --evaluate-snapshots RUN_DIR
    path = args.evaluate_snapshots if args.play is None else args.play
    run_dir = path
    if path.endswith(".npz"):  # one snapshot file, in RUN_DIR/checkpoints
        run_dir = os.path.abspath(os.path.join(path, "../.."))
        names = [path]
    elif args.play is not None:
        names = [os.path.join(run_dir, "checkpoints", "latest.npz")]
    else:
        names = sorted(glob.glob(os.path.join(glob.escape(run_dir), "checkpoints", "iter_*.npz")))
    config = read_config(run_dir)  # the run's own policy options
    for key in ("env", "hidden", "activation", "ac_bins", "obs_norm", "episode_length"):
        setattr(args, key, config[key])
    args.ac_noise_std = 0.0
    args.ray = False
    args.ray_address = None
    configure(args)
    check(names, f"'{run_dir}' has no snapshots (checkpoints/iter_*.npz)")
    states = [load_checkpoint(name, args) for name in names]
    if args.video:
        os.makedirs(os.path.join(run_dir, "video"), exist_ok=True)
        path = os.path.join(run_dir, "video", f"{args.env}.gif")
        write_file(path, film(args, states[0]))
        print(f"video: {path}", flush=True)
    workers = Workers(args, make_pool(args), None)
    table = []
    try:
        for s in states:  # the same episodes for every snapshot
            R = evaluate(workers, s, args, args.episodes, 10**6)
            table.append([s["iteration"], s["env_steps"], R.mean(), R.std(), R.min(), R.max()])
            mean = f"mean return {R.mean():.1f} +- {R.std():.1f} over {args.episodes} episodes"
            spread = f"(min {R.min():.1f}, max {R.max():.1f})"
            print(f"{args.env}: {mean} {spread}, policy of generation {s['iteration']}", flush=True)
    finally:
        workers.pool.shutdown()
    if args.evaluate_snapshots:
        write_snapshots(run_dir, np.array(table), args.episodes)
    return R if args.play else table


def write_snapshots(run_dir: str, t: np.ndarray, episodes: int):  # snapshots.csv and .png
    from matplotlib.figure import Figure

    text = io.StringIO()
    header = "iteration,env_steps,return_mean,return_std,return_min,return_max"
    np.savetxt(text, t, delimiter=",", comments="", fmt="%.17g", header=header)
    write_file(os.path.join(run_dir, "snapshots.csv"), text.getvalue().encode())
    fig = Figure((7, 4))
    ax = fig.subplots(gridspec_kw=dict(left=0.12, right=0.97, bottom=0.12, top=0.92))
    ax.errorbar(t[:, 0], t[:, 2], yerr=t[:, 3], fmt="o-", capsize=3)
    ylabel = f"return over {episodes} episodes (+- std)"
    ax.set(xlabel="generation", ylabel=ylabel, title=os.path.basename(os.path.normpath(run_dir)))
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=90)
    write_file(os.path.join(run_dir, "snapshots.png"), image.getvalue())
    print(f"wrote {run_dir}/snapshots.csv and snapshots.png")


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else list(argv))
    if args.video:  # draw without a display, before MuJoCo loads its renderer
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame's
        if sys.platform == "linux":  # MuJoCo's (elsewhere, the system's own GL)
            os.environ.setdefault("MUJOCO_GL", "glfw" if os.environ.get("DISPLAY") else "egl")
    quiet_mujoco()  # its warnings on stderr, not in a file MUJOCO_LOG.TXT here
    stops = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        if args.play is not None or args.evaluate_snapshots is not None:
            return play(args)
        args = configure(args)  # Ray, if asked for, starts here: its own SIGTERM handler first
        STOP.clear()
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGTERM, on_stop)  # the stop a job scheduler sends
        result = train(args)
    except OSError as e:  # a folder that takes no file, a full disk (the checkpoints stay)
        check(False, f"cannot write {e.filename}: {e.strerror}")
    finally:  # a notebook's Ctrl-C works as before
        signal.signal(signal.SIGINT, stops[0])
        signal.signal(signal.SIGTERM, stops[1])
    if result["status"] == "interrupted":
        sys.exit(130)
    if result["status"] != "done" and result["status"] != "target":
        sys.exit(1)  # NaN or inf, or a worker process died
    return result


if __name__ == "__main__":
    main()
