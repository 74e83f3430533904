"""OpenAI evolution strategies with a NumPy MLP and a shared noise table. Salimans, Ho, Chen, Sidor
& Sutskever (2017), "Evolution Strategies as a Scalable Alternative to Reinforcement Learning",
https://arxiv.org/abs/1703.03864, Algorithm 2 and its tricks; docs/es_openai.md derives the math,
cited below as "Eq. (n)".

    python es_openai.py --env HalfCheetah-v5             # train with the environment's preset
    python es_openai.py --evaluate-snapshots runs/<run-dir> --episodes 5
"""

import argparse
import contextlib
import csv
import ctypes
import glob
import json
import math
import mmap
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, ProcessPoolExecutor, wait

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one BLAS thread per process: workers own the cores
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import gymnasium as gym  # noqa: E402 (after the thread settings, which numpy reads on import)
import numpy as np  # noqa: E402

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
GENERIC = dict(env="HalfCheetah-v5", seed=0, out_dir="runs", iterations=200, save_every=10)
GENERIC.update(hidden="64,64", activation="tanh", ac_bins=0, obs_norm=True, calc_obstat_prob=0.01)
GENERIC.update(sigma=0.02, alpha=0.01, l2coeff=0.005, population=40, min_timesteps=0, mirror=True)
GENERIC.update(optimizer="adam", momentum=0.9, beta1=0.9, beta2=0.999, fitness="centered_rank")
GENERIC.update(eval_every=10, eval_episodes=10, eval_prob=0.0, lockstep=4)
GENERIC.update(noise_size=250_000_000, noise_seed=123)
# What --resume takes again: where a run goes on, or its step sizes.
STEER = "iterations workers lockstep target_return save_every alpha sigma ray ray_address".split()


def build_parser() -> argparse.ArgumentParser:
    presets = "; ".join(f"{env}: {preset}" for env, preset in PRESETS.items())
    p = Parser(
        prog="es_openai.py",
        description=__doc__.split("\n")[0],
        epilog=f"presets: {presets}; else: {GENERIC}",
    )
    a = p.add_argument  # unset flags: the preset, then GENERIC
    n = at_least
    r = in_range
    a("--env", help="gymnasium id with Box or Discrete actions (default HalfCheetah-v5)")
    a("--seed", type=n(0), help="decides every random number of the run but the noise table")
    a("--iterations", type=n(0), help="generations, updates of theta (preset)")
    a("--population", type=n(2), help="n, population_size: training episodes per generation")
    a("--min-timesteps", type=n(0), help="timesteps_per_batch: env steps a generation also needs")
    a("--sigma", type=n(0, float), help="σ, noise_stdev of the parameter noise (typ. 0.01-0.05)")
    a("--optimizer", choices=("adam", "sgd", "plain"), help="adam, sgd with momentum, or plain")
    a("--alpha", type=n(0, float), help="α, the optimizer's step size (typ. 0.001-0.03)")
    a("--momentum", type=r(0, 1), help="γ, SGD momentum (default 0.9)")
    a("--beta1", type=r(0, 1), help="Adam β1 (default 0.9)")
    a("--beta2", type=r(0, 1), help="Adam β2 (default 0.999)")
    a("--l2coeff", type=r(0, math.inf), help="λ, L2 weight decay (starter 0.005)")
    modes = ("centered_rank", "sign", "centered_sign_rank", "none")
    a("--fitness", choices=modes, help="return_proc_mode: returns to weights (Eqs. 4-5)")
    a("--no-mirror", dest="mirror", action="store_false", default=None, help="no mirrored pairs")
    a("--hidden", help="hidden layer sizes, e.g. 64,64 (preset)")
    a("--activation", choices=("tanh", "relu", "lrelu", "elu"), help="hidden nonlinearity")
    a("--no-obs-norm", dest="obs_norm", action="store_false", default=None, help="raw observations")
    a("--calc-obstat-prob", type=r(0, 1, True), help="share of pairs that record observations")
    a("--ac-noise-std", type=r(0, math.inf), help="σ_a, training actions' noise (Box: 0.01)")
    a("--ac-bins", type=n(0), help="K uniform bins per action dimension (0: continuous)")
    a("--eval-prob", type=r(0, 1), help="share of jobs that are noiseless episodes (starter 0.003)")
    a("--noise-size", type=n(1), help="float32 numbers in the noise table (default 250M: 1 GB)")
    a("--noise-seed", type=n(0), help="seed of the noise table (default 123)")
    a("--episode-length", type=n(1), help="steps per episode (default: the time limit)")
    a("--workers", type=n(1), help="rollout processes (default: the cores, or Ray's CPUs)")
    a("--lockstep", type=n(1), metavar="P", help="pairs a worker steps at once (4; speed only)")
    a("--out-dir", help="where run directories are made (default runs)")
    a("--eval-every", type=n(1), help="evaluate the noiseless policy every K generations")
    a("--eval-episodes", type=n(1), help="episodes per evaluation")
    a("--save-every", type=n(0), help="snapshot_freq: a snapshot every K generations (0: none)")
    a("--target-return", type=r(-math.inf, math.inf, True), help="stop once an evaluation has it")
    a("--resume", metavar="RUN_DIR", help="continue the run saved in RUN_DIR")
    a("--play", metavar="RUN_DIR", help="evaluate RUN_DIR's policy (or a snapshot file)")
    a("--evaluate-snapshots", metavar="RUN_DIR", help="every snapshot of RUN_DIR: table, plot")
    a("--episodes", type=n(1), help="episodes for --play and --evaluate-snapshots (default 10)")
    a("--video", action="store_true", default=None, help="with --play: video/<env>.gif")
    a("--ray", action="store_true", default=None, help="rollouts on Ray: here, or RAY_ADDRESS")
    a("--ray-address", metavar="ADDRESS", help="with --ray: a cluster, e.g. 10.0.0.1:6379 or auto")
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


def tiled(values, last: float, B: int) -> np.ndarray:  # B copies of [*values, last], end to end
    return np.tile(np.append(values, last), B)


class Policy:
    """a = pi_theta(o) for B parameter vectors at once: normalize (Eq. 9), the MLP, the action of
    Eq. (11). Written for speed, as it runs every step: each bias is the last row of its layer and
    every input ends with a 1, so a layer is one product; B rows of (n_in + 1, n_out) layers make
    one batched product per layer (B = 1: plain vectors). Each row gives what it gives alone."""

    def __init__(self, thetas, sizes, activation, act, ac_bins, ob_mean, ob_std, ob_clip=True):
        B = len(thetas)
        lead = () if B == 1 else (B, 1)
        per_theta = [
            [np.vstack([W, b]).astype(np.float64) for W, b in unflatten(theta, sizes)]
            for theta in thetas
        ]
        self.layers = [Wb[0] if B == 1 else np.stack(Wb) for Wb in zip(*per_theta)]
        self.inputs = [np.ones((*lead, n + 1)) for n in sizes[:-1]]  # each input ends with the 1
        self.x0 = self.inputs[0].reshape(-1)
        self.obs = self.inputs[0][..., :-1].reshape(B, -1)
        self.hidden = [x[..., :-1] for x in self.inputs[1:]]  # where activations go
        self.B = B
        self.activation = activation
        self.discrete = isinstance(act, gym.spaces.Discrete)
        self.bins = ac_bins
        inv_std = 1.0 / np.asarray(ob_std, np.float64)  # Eq. (9) on all of x0: the 1s stay 1
        clip = 5.0 if ob_clip else np.inf  # without normalization the observations go in raw
        self.scale = tiled(inv_std, 1.0, B)
        self.shift = tiled(-np.asarray(ob_mean, np.float64) * inv_std, 0.0, B)
        self.clip_low = tiled(np.full(sizes[0], -clip), 1.0, B)
        self.clip_high = tiled(np.full(sizes[0], clip), 1.0, B)
        if not self.discrete:
            self.low = np.tile(act.low.astype(np.float64), (B, 1))
            self.high = np.tile(act.high.astype(np.float64), (B, 1))
            self.rows = np.arange(self.low.shape[1])  # bin k: low + k (high - low) / (K - 1)
            self.bin_values = np.linspace(self.low[0], self.high[0], ac_bins or 2, axis=1)

    def __call__(self, obs, noise=None):
        """obs: B observations; noise: (B, adim) or None. (B, adim) actions, or B ints."""
        v = self.x0
        self.obs[:] = obs
        np.multiply(v, self.scale, out=v)  # Eq. (9): clip((o - mean) / std, -5, 5)
        np.add(v, self.shift, out=v)
        np.maximum(v, self.clip_low, out=v)
        np.minimum(v, self.clip_high, out=v)
        for x, Wb, h in zip(self.inputs, self.layers[:-1], self.hidden):
            z = x @ Wb  # f([x, 1] @ [W; b]) = f(x @ W + b), every row at once,
            activate(z, self.activation)  # in place, then copied beside the 1s
            h[:] = z
        y = (self.inputs[-1] @ self.layers[-1]).reshape(self.B, -1)  # (B, n_out)
        if self.discrete:
            return np.argmax(y, axis=1).tolist()
        if self.bins:  # Eq. (11): per dimension, the value of the bin with the largest logit
            y = self.bin_values[self.rows, np.argmax(y.reshape(self.B, -1, self.bins), axis=2)]
        if noise is not None:  # action noise, training episodes only
            y += noise
        return np.minimum(np.maximum(y, self.low), self.high)  # deviation: clipped to the bounds


# ---- the noise table, the episodes, and the jobs a worker runs ----
def noise_table(size: int, seed: int) -> np.ndarray:
    """float32 N(0, 1) numbers shared with the workers forked later (no copy): eps_i is the slice
    table[idx_i : idx_i + dim]. Deviation: numpy's PCG64, not the starter's RandomState.randn."""
    table = np.frombuffer(mmap.mmap(-1, 4 * size), np.float32)  # anonymous: freed with the run
    rng = np.random.default_rng(seed)
    for start in range(0, size, 1 << 24):
        rng.standard_normal(out=table[start : start + (1 << 24)], dtype=np.float32)
    return table


def rollouts(
    envs: list, policy: Policy, env_seeds: list, rngs=None, ac_noise_std=0.0, keep_obs=None
):
    """The B = policy.B episodes of the jobs stepped together, one policy call per step; job j's
    share env_seeds[j], draw action noise from rngs[j] (Eq. 11) and keep their observations' sums
    if keep_obs[j]. ([(return, sign return, length, sums)] per episode, policy s, env.step s)."""
    B = policy.B
    per = B // len(env_seeds)  # 2 for a mirrored pair, else 1
    while len(envs) < B:
        envs.append(make_env(envs[0].spec.id, envs[0].spec.max_episode_steps))
    obs = [reset_env(envs[i], env_seeds[i // per])[0] for i in range(B)]
    total = [0.0] * B
    signs = [0.0] * B
    steps = [0] * B
    running = list(range(B))
    kept = [[ob] if keep_obs and keep_obs[i // per] else None for i, ob in enumerate(obs)]
    noisy = rngs is not None and ac_noise_std > 0
    noise = None
    t = 0
    t_policy = 0.0
    t_env = 0.0
    while running:
        t0 = time.perf_counter()
        if noisy and t % 256 == 0:  # (256, B, adim): each job's block from its own stream
            shape = (256, per, policy.low.shape[1])
            block = np.concatenate([ac_noise_std * rng.standard_normal(shape) for rng in rngs], 1)
        if noisy:
            noise = block[t % 256]
        actions = policy(obs, noise)
        t1 = time.perf_counter()
        results = [(i, *envs[i].step(actions[i])) for i in running]
        t_policy += t1 - t0
        t_env += time.perf_counter() - t1
        t += 1
        for i, ob, r, terminated, truncated, _ in results:
            r = float(r)
            total[i] += r
            signs[i] += (r > 0) - (r < 0)
            steps[i] += 1
            if terminated or truncated:
                running.remove(i)
                continue
            obs[i] = ob
            if kept[i] is not None:  # the states acted on; the terminal one is not
                kept[i].append(ob)
    sums = [None] * B
    for i, observed in enumerate(kept):
        if observed is not None:
            x = np.asarray(observed, np.float64)
            sums[i] = (x.sum(axis=0), np.square(x).sum(axis=0))
    return list(zip(total, signs, steps, sums)), t_policy, t_env


def run_jobs(envs: list, args, table, task: dict, jobs: list) -> list:
    """A worker's answer to a message of jobs (kind, generation, k): a population job is a mirrored
    pair (or one episode) of Eq. (6), unless it is a noiseless episode (--eval-prob); "eval" is an
    evaluation episode. Pairs are stepped together. Returns [(k, result)], a result a dict."""

    def policy(thetas):
        ob = (task["ob_mean"], task["ob_std"], task["ob_clip"])
        return Policy(thetas, args.sizes, args.activation, args.act, args.ac_bins, *ob)

    theta = task["theta"]
    signs = (1.0, -1.0) if args.mirror else (1.0,)
    out = {}
    perturbed = []  # the jobs of theta +- sigma eps_i (or theta + sigma eps_i)
    for i, (kind, t, k) in enumerate(jobs):  # the job's stream decides, in this order:
        t0 = time.perf_counter()
        rng = stream(args.seed, TRAIN if kind == "train" else EVAL, t, k)
        noiseless = kind == "eval" or rng.random() < args.eval_prob  # a noiseless episode or not,
        env_seed = int(rng.integers(2**31))  # the episodes' seed (deviation: the starter's differ),
        if noiseless:  # an evaluation episode, or one of --eval-prob
            episodes, _, _ = rollouts(envs, policy([theta]), [env_seed])
            R, _, L, _ = episodes[0]
            out[i] = dict(kind="noiseless" if kind == "train" else "eval", ret=R, length=L)
            continue
        idx = int(rng.integers(0, len(table) - theta.size + 1))  # the noise index,
        # whether to record observations (deviation: per pair; per episode in the starter)
        keep = bool(rng.random() < args.calc_obstat_prob * args.obs_norm)
        eps = table[idx : idx + theta.size]
        t1 = time.perf_counter()
        thetas = [theta + (s * args.sigma) * eps for s in signs]  # theta +- sigma eps_i
        t2 = time.perf_counter()  # then the action noise, in rollouts
        times = dict(noise=t1 - t0, set_params=t2 - t1, mutation=t2 - t0)
        job = dict(i=i, idx=idx, keep=keep, thetas=thetas, env_seed=env_seed, rng=rng, times=times)
        perturbed.append(job)
    batches = [[job] for job in perturbed]  # without mirroring, each episode alone (B = 1)
    if args.mirror and perturbed:  # the pairs of this message, stepped together
        batches = [perturbed]
    for batch in batches:
        t0 = time.perf_counter()
        thetas = [member for job in batch for member in job["thetas"]]  # theta +, theta -, ...
        env_seeds = [job["env_seed"] for job in batch]
        rngs = [job["rng"] for job in batch]
        keep = [job["keep"] for job in batch]
        episodes = rollouts(envs, policy(thetas), env_seeds, rngs, args.ac_noise_std, keep)
        out.update(result(batch, *episodes, time.perf_counter() - t0))
    return [(k, out[i]) for i, (_, _, k) in enumerate(jobs)]


def result(jobs: list, episodes: list, t_policy: float, t_env: float, seconds: float) -> dict:
    """{i: the pair's result}: its noise index, returns, sign returns, lengths, observation sums
    (None if not recorded), times."""
    per = len(episodes) // len(jobs)
    steps = sum(episode[2] for episode in episodes)
    out = {}
    for j, job in enumerate(jobs):
        returns, sign_returns, lengths, sums = zip(*episodes[per * j : per * j + per])
        ob_sum = None
        ob_sumsq = None
        if job["keep"]:
            ob_sum = sum(s[0] for s in sums)
            ob_sumsq = sum(s[1] for s in sums)
        times = dict(job["times"], mutation=job["times"]["mutation"] + seconds / len(jobs))
        times.update(policy_us=1e6 * t_policy / steps, env_us=1e6 * t_env / steps)
        pair = dict(kind="pair", idx=job["idx"], returns=returns, lengths=lengths, times=times)
        out[job["i"]] = dict(pair, sign_returns=sign_returns, ob_sum=ob_sum, ob_sumsq=ob_sumsq)
    return out


# ---- training: Algorithm 2 of the paper (docs/es_openai.md, "Pseudocode") ----
class Generation:
    """Jobs k = 0, 1, ... of generation t; it closes at the shortest prefix of finished jobs with
    --population training episodes and --min-timesteps steps: no worker's speed changes it."""

    def __init__(self, args, t: int):
        self.args = args
        self.t = t
        self.k = 0  # the next job's number
        self.handed = 0  # training episodes handed out
        self.closed_at = None  # the prefix of jobs it takes, once done

    def next_jobs(self, results: dict, lockstep: int, workers: int) -> list:
        """Up to --lockstep jobs, and no more than a worker's share of the jobs still needed."""
        a = self.args
        per = 2 if a.mirror else 1
        left = max(0, -(-(a.population - self.handed) // per))
        size = min(lockstep, max(1, -(-left // workers)))
        jobs = []
        while len(jobs) < size and self.closed_at is None:
            if self.handed >= a.population and env_steps(results.values()) >= a.min_timesteps:
                break
            jobs.append(("train", self.t, self.k))  # the master draws the job's first number too
            self.handed += per * (stream(a.seed, TRAIN, self.t, self.k).random() >= a.eval_prob)
            self.k += 1
        return jobs

    def done(self, results: dict) -> bool:
        n = 0
        n_steps = 0
        for k in range(self.k):
            if k not in results:
                return False
            if results[k]["kind"] == "pair":
                n += len(results[k]["returns"])
            n_steps += env_steps([results[k]])
            if n >= self.args.population and n_steps >= self.args.min_timesteps:
                self.closed_at = k + 1
                return True
        return False


class Evaluation:  # the jobs of an evaluation, handed out as a Generation's
    def __init__(self, key: int, episodes: int):
        self.todo = [("eval", key, i) for i in range(episodes)][::-1]
        self.n = episodes

    def next_jobs(self, results: dict, lockstep: int, workers: int) -> list:
        size = min(lockstep, -(-len(self.todo) // workers))
        return [self.todo.pop() for _ in range(size)]

    def done(self, results: dict) -> bool:
        return len(results) == self.n


def env_steps(results) -> int:  # env steps of population results: pairs' and noiseless episodes'
    total = 0
    for r in results:
        total += sum(r["lengths"]) if r["kind"] == "pair" else r["length"]
    return total


def task_of(state: dict, args) -> dict:  # theta and the statistics, frozen for a generation
    if args.obs_norm:
        mean, std = ob_mean_std(state)
    else:
        mean = np.zeros_like(state["ob_sum"])
        std = mean + 1.0
    return dict(theta=state["theta"], ob_mean=mean, ob_std=std, ob_clip=args.obs_norm)


def es_generation(workers, state: dict, args) -> tuple:
    """One generation: the population, shaped returns, g, the optimizer step, the new statistics.
    `state` is left whole, so a stop or a NaN at any moment leaves a state to checkpoint."""
    t0 = time.time()
    theta = state["theta"]  # (d,) float32
    gen = Generation(args, state["iteration"])
    results = workers.run(task_of(state, args), gen)
    stale = workers.take_stale()  # results of older tasks dropped since the last generation
    accepted = [results[k] for k in range(gen.closed_at)]
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
    skipped = stale + sum(k >= gen.closed_at for k in results)  # past the prefix, or older tasks
    new["iteration"] = gen.t + 1
    new["episodes"] = state["episodes"] + lengths.size + len(noiseless)
    new["env_steps"] = state["env_steps"] + n_steps
    checked = (new["theta"], returns, new["ob_sum"], new["ob_sumsq"])
    info = dict(returns=returns.ravel(), lengths=lengths.ravel(), noiseless=noiseless)
    info.update(steps=n_steps, skipped_frac=skipped / (skipped + len(accepted)))
    info.update(finite=all(np.isfinite(x).all() for x in checked), ob_count=ob_count)
    info.update(grad_norm=np.linalg.norm(g), update_norm=np.linalg.norm(new["theta"] - theta))
    info["times"] = {name: np.array([r["times"][name] for r in pairs]) for name in TIMERS}
    info.update(time_gen=time.time() - t0, time_update=time.time() - t1)
    return new, info


def evaluate(workers, state: dict, args, episodes: int, key=None) -> np.ndarray:  # noiseless
    evaluation = Evaluation(key or state["iteration"], episodes)
    results = workers.run(task_of(state, args), evaluation)
    return np.array([results[i]["ret"] for i in range(episodes)])


def train(args) -> dict:
    run = Run(args)  # theta_0 by normc (Eq. 10), or --resume's; the noise table; the workers
    state, reached = run.state, False
    try:
        while state["iteration"] < args.iterations:
            new, info = es_generation(run.workers, state, args)  # the population, Eqs. (4)-(9)
            if not info["finite"]:
                return run.end(state, "diverged")  # the last good state is checkpointed
            due = new["iteration"] % args.eval_every == 0 or new["iteration"] == args.iterations
            ev = evaluate(run.workers, new, args, args.eval_episodes) if due else None
            hit = due and args.target_return is not None and ev.mean() >= args.target_return
            run.log(new, info, ev)  # progress.csv, the progress line, the checkpoint
            state, reached = new, hit  # one statement: logged, a stop keeps this generation
            if reached:
                return run.end(state, "target")
        return run.end(state, "done")
    except (KeyboardInterrupt, WorkerDied) as e:  # Ctrl-C, SIGTERM, a dead worker: keep the last
        if reached:
            return run.end(state, "target")
        return run.end(state, f"stopped: {e}" if str(e) else "interrupted")


# ---- plumbing: checks, workers, Ray, run directory, snapshots, --play, main ----
class WorkerDied(Exception):
    """A rollout process died, or a rollout failed: the run stops with its last checkpoint."""


class Parser(argparse.ArgumentParser):
    """argparse, with a user's mistake in one line: 'SCRIPT: error: ... (see --help)', status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def check(ok: bool, message: str):  # a user's mistake: one line, exit status 2, nothing written
    if not ok:
        build_parser().error(str(message).partition("\n")[0])  # whatever raised it, one line


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


def configure(args) -> argparse.Namespace:
    """--resume's saved options, then the preset; what no one flag can check; the workers."""
    if args.resume is not None:
        given = {key for key, value in vars(args).items() if value is not None}
        fixed = sorted(given - {"resume", *STEER})  # given on the command line, and not in STEER
        fixed_flags = ", --".join(fixed).replace("_", "-")
        steer_flags = ", --".join(STEER).replace("_", "-")
        check(not fixed, f"--{fixed_flags} cannot change a resumed run; only --{steer_flags} can")
        for key, value in read_config(args.resume).items():
            if getattr(args, key, False) is None and key not in ("workers", "ray", "ray_address"):
                setattr(args, key, value)
    preset = {**GENERIC, **PRESETS.get(args.env or GENERIC["env"], {})}
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
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


ENVS = {}  # this process's environments, by id and episode length: rollouts adds as it needs


def envs_of(env_id: str, episode_length=None) -> list:  # (no functools.cache: Ray pickles it)
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


PR_SET_PDEATHSIG = 1  # Linux prctl: a signal for this process when the process that made it ends
STOPS = {signal.SIGINT, signal.SIGTERM}  # Ctrl-C, and the stop a job scheduler sends
SCRIPT = os.path.basename(__file__)  # this file, as its run directories name it


def init_worker():  # a worker process: Ctrl-C is its master's to act on; it ends with its master
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the pool's own stop, without a traceback
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)  # forked inside stops_held()
    if sys.platform == "linux":  # even a master killed with SIGKILL
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@contextlib.contextmanager
def stops_held():
    """Ctrl-C and SIGTERM wait while the workers' queues are in use (a KeyboardInterrupt raised
    inside them could leave a lock taken, and the run hang at its end), then raise as it ends."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


TABLE = None  # a local worker's noise table: its master's, shared through fork (init_table)


def init_table(table):  # a local worker: init_worker, and its master's table (fork: no copy)
    global TABLE
    init_worker()
    TABLE = table


def work(args, task: dict, jobs: list, table=None) -> list:
    """A worker's answer to a message of jobs (run_jobs). table: Ray's read-only copy of the noise
    table from its object store; a local worker reads its master's, TABLE."""
    if table is None:
        table = TABLE
    return run_jobs(envs_of(args.env, args.episode_length), args, table, task, jobs)


class Workers:
    """The jobs of a generation or an evaluation handed out to an executor's workers (local
    processes forked after the noise table, or Ray's): messages of up to --lockstep jobs, `depth`
    per worker at once. A message of an older task still running when its jobs were done ends
    during a later call: its results are dropped and counted (take_stale)."""

    def __init__(self, args, table):
        self.args = args
        self.running = {}  # future of each message handed out: the call that handed it out
        self.calls = 0
        self.stale = 0
        if args.ray:
            self.pool = RayExecutor(args.ray_address)
            self.depth = 2  # the next message is there when one ends
            self.table_ref = self.pool.ray.put(table)  # held for the run: a retried task maps it
            self.table = self.pool.ray.get(self.table_ref)  # the master reads the store's copy too
        else:
            fork = mp.get_context("fork")  # the workers share the table's pages: no copy
            self.pool = ProcessPoolExecutor(args.workers, fork, init_table, (table,))
            self.depth = 1
            self.table_ref = None
            self.table = table

    def run(self, task: dict, jobs) -> dict:
        """Hands out jobs.next_jobs() until jobs.done(results); returns {k: result}."""
        a = self.args
        self.calls += 1
        results = {}
        try:
            with stops_held():
                while not jobs.done(results):
                    while len(self.running) < self.depth * a.workers:
                        todo = jobs.next_jobs(results, a.lockstep, a.workers)
                        if not todo:
                            break
                        future = self.pool.submit(work, a, task, todo, self.table_ref)
                        self.running[future] = self.calls
                    finished, _ = wait(self.running, return_when=FIRST_COMPLETED)
                    for future in finished:
                        out = future.result()
                        if self.running.pop(future) == self.calls:
                            results.update(out)
                        else:  # of an older task: still running when its generation closed
                            self.stale += len(out)
        except BrokenExecutor:  # a worker process died
            raise WorkerDied("a worker process died") from None
        except Exception as e:  # raised in a worker: the environment failed, or Ray lost a worker
            reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise WorkerDied(f"a rollout failed: {type(e).__name__}: {reason}") from None
        return results

    def take_stale(self) -> int:  # results of older tasks dropped since the last call
        stale = self.stale
        self.stale = 0
        return stale

    def close(self):  # once the episodes under way are done
        self.pool.shutdown(cancel_futures=True)


def start_ray(address):  # Ray is imported only for --ray: it stays optional
    try:
        import ray
    except ImportError:
        check(False, "--ray needs Ray: pip install ray")
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS")
        host, _, port = (address or "").replace("ray://", "").rpartition(":")
        handler = signal.getsignal(signal.SIGTERM)  # ray.init's own would skip the checkpoint
        try:  # Ray itself would retry an address that does not answer for minutes
            if host and port.isdigit():
                socket.create_connection((host, int(port)), timeout=10).close()
            ray.init(address=address, log_to_driver=False, include_dashboard=False)
        except Exception as e:  # a closed port; no cluster for 'auto'; ...
            reason = getattr(e, "strerror", None) or e
            check(False, f"no Ray cluster answers at {address} ({reason})")
        signal.signal(signal.SIGTERM, handler)
    if __name__ != "__main__":  # imported (tests, notebooks): this file's code goes by value
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray


class RayExecutor:
    """Ray tasks behind the part of ProcessPoolExecutor's interface the run uses: submit(fn,
    *args) returns a Future. Tasks spread over the nodes; one whose worker is lost runs again, 3
    times at most, with the same result (a job names its own randomness)."""

    def __init__(self, address):
        self.ray = start_ray(address)
        self.remote = {}
        ENVS.clear()  # Ray takes this file's globals by value: this process's own would travel

    def submit(self, fn, *args):
        if fn not in self.remote:
            options = dict(num_cpus=1, max_retries=3, scheduling_strategy="SPREAD")
            self.remote[fn] = self.ray.remote(**options)(fn)
        return self.remote[fn].remote(*args).future()

    def shutdown(self, wait=True, cancel_futures=False):
        pass  # Ray's worker processes are Ray's


def write_config(run_dir: str, args, script: str):  # with everything the numbers depend on
    here = os.path.dirname(os.path.abspath(__file__))
    git = subprocess.run("git rev-parse HEAD", shell=True, capture_output=True, text=True, cwd=here)
    cpu = {}  # Linux: the first processor's "model name", "flags", ...
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            cpu.setdefault(key.strip(), value.strip())
    simd = [flag for flag in ("avx2", "avx512f") if flag in cpu.get("flags", "").split()]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    machine = dict(processor=cpu.get("model name", ""), simd=simd, cores=cores)  # bits: its SIMD
    versions = dict(python=sys.version.split()[0], numpy=np.__version__, gymnasium=gym.__version__)
    versions["mujoco"] = getattr(sys.modules.get("mujoco"), "__version__", None)  # if loaded
    config = dict(vars(args), script=script, git_commit=git.stdout.strip(), **versions, **machine)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(config, f, default=str)


# What a checkpoint holds, with the policy's shape.
STATE = "theta opt_m opt_v opt_t ob_sum ob_sumsq ob_count iteration episodes env_steps wall_time"
STATE = STATE.split()
TIMERS = ("mutation", "noise", "set_params", "policy_us", "env_us")
COLUMNS = (
    "iteration episodes env_steps wall_time_s return_mean return_std return_min return_max "
    "eval_return_mean eval_return_std steps_per_s length_mean noiseless_return_mean "
    "noiseless_return_std noiseless_length_mean noiseless_count episodes_this_gen "
    "timesteps_this_gen workers skipped_frac obs_count_this_gen obs_count theta_norm "
    "grad_norm update_norm time_gen_s time_update_s"
).split() + [f"time_{name}_{stat}" for name in TIMERS for stat in ("min", "max", "mean")]


def available_memory() -> float:  # bytes, from /proc/meminfo (Linux); elsewhere inf
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return math.inf


class Run:
    """The run directory, the progress line, the snapshots, the workers, how a run ends."""

    def __init__(self, args):
        theta = normc_init(args.sizes, stream(args.seed, INIT))
        table_size = f"{4 * args.noise_size / 2**30:.2f} GiB"
        too_small = f"--noise-size {args.noise_size} is smaller than the policy's {theta.size}"
        check(args.noise_size >= theta.size, f"{too_small} parameters")
        free = available_memory()
        needs = f"the noise table needs {table_size}, and {free / 2**30:.2f} GiB are free"
        check(4 * args.noise_size < free, f"{needs}: lower --noise-size")
        self.args = args
        self.ev = np.nan  # the last evaluation's mean, shown until the next one
        n = args.sizes[0]
        self.state = dict(theta=theta, opt_m=0 * theta, opt_v=0 * theta, opt_t=0, iteration=0)
        self.state.update(ob_sum=np.zeros(n), ob_sumsq=np.full(n, 1e-2), ob_count=1e-2)
        self.state.update(episodes=0, env_steps=0, wall_time=0.0)
        rows = []
        if args.resume:  # the log up to the checkpoint: a resumed run redoes what came after it
            self.dir = args.resume
            self.state = load_checkpoint(os.path.join(self.dir, "checkpoints", "latest.npz"), args)
            with open(os.path.join(self.dir, "progress.csv")) as f:
                rows = list(csv.DictReader(f))
            rows = [row for row in rows if int(row["iteration"]) <= self.state["iteration"]]
            for row in rows:  # the last evaluation, shown until the next one
                if row["eval_return_mean"] != "nan":
                    self.ev = float(row["eval_return_mean"])
        else:
            name = f"{args.env}__es_openai__{args.seed}__{time.strftime('%Y%m%d-%H%M%S')}"
            self.dir = os.path.join(args.out_dir, name)
        try:
            os.makedirs(os.path.join(self.dir, "checkpoints"), exist_ok=bool(args.resume))
            write_config(self.dir, args, SCRIPT)
            self.file = open(os.path.join(self.dir, "progress.csv"), "w")  # noqa: SIM115 (the run's)
            if not args.resume:  # generation 0 is a snapshot too
                save_checkpoint(self.dir, self.state, args, snapshot=True)
        except OSError as e:
            check(False, f"cannot write {e.filename}: {e.strerror} (choose another --out-dir)")
        self.csv = csv.DictWriter(self.file, COLUMNS, lineterminator="\n")
        self.csv.writeheader()
        self.csv.writerows(rows)
        self.file.flush()
        self.t0 = time.time() - self.state["wall_time"]
        import matplotlib.figure  # noqa: F401 (here: a stop that cut this import short breaks plots)

        size = f"{theta.size} parameters; the noise table: {table_size}"
        print(f"run directory: {self.dir}  ({size})", flush=True)
        self.workers = Workers(args, noise_table(args.noise_size, args.noise_seed))

    def log(self, state: dict, info: dict, ev):
        a = self.args
        it = state["iteration"]
        R = info["returns"]
        L = info["lengths"]
        nl = info["noiseless"]  # the noiseless episodes' (return, length) rows
        state["wall_time"] = time.time() - self.t0
        speed = info["steps"] / info["time_gen"]
        if ev is None:
            ev = np.array([np.nan])
        else:
            self.ev = ev.mean()
        row = dict(iteration=it, episodes=state["episodes"], env_steps=state["env_steps"])
        row.update(wall_time_s=round(state["wall_time"], 2), steps_per_s=round(speed, 1))
        row.update(return_mean=R.mean(), return_std=R.std(), return_min=R.min(), return_max=R.max())
        row.update(eval_return_mean=ev.mean(), eval_return_std=ev.std() if ev.size > 1 else np.nan)
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
        for name in TIMERS:
            times = info["times"][name]
            row.update({f"time_{name}_min": times.min(), f"time_{name}_max": times.max()})
            row[f"time_{name}_mean"] = times.mean()
        self.csv.writerow(row)
        self.file.flush()
        eta = (a.iterations - it) * state["wall_time"] / it / 60
        print(
            f"gen {it:5d} | eps {state['episodes']:7d} | steps {state['env_steps']:10,d} | "
            f"return {R.mean():8.1f} (max {R.max():7.1f}) | eval {self.ev:7.1f} | {speed:6.0f} "
            f"steps/s | {state['wall_time'] / 60:5.1f} min | ETA {eta:5.1f} min",
            flush=True,
        )
        snapshot = a.save_every > 0 and it % a.save_every == 0
        if snapshot or not np.isnan(ev).all():
            save_checkpoint(self.dir, state, a, snapshot)
            plot(self.dir, f"OpenAI ES on {a.env}")

    def end(self, state: dict, status: str) -> dict:
        """The last logged state checkpointed; the workers stopped; the plot; the last line."""
        self.file.close()
        a = self.args  # a finished run's last state is a snapshot too
        save_checkpoint(self.dir, state, a, snapshot=status in ("done", "target"))
        self.workers.close()
        best, at = np.nan, 0  # the best evaluation and its iteration, from the plot
        if state["iteration"]:
            best, at = plot(self.dir, f"OpenAI ES on {a.env}")
        done = f"{state['iteration']}: {state['episodes']} episodes, {state['env_steps']} env steps"
        if status == "target":
            message = f"target {a.target_return} reached at generation {done}"
        elif status == "done":
            message = f"done, generation {done}"
            if a.target_return is not None:
                message += f"; the target {a.target_return} was not reached: the best evaluation "
                message += f"was {best:.1f}, at generation {at:.0f}"
        elif status == "diverged":
            message = f"NaN or inf after generation {done}; its checkpoint is kept (a smaller "
            message += "--alpha or --sigma?)"
        else:
            message = f"{status}: resume with  python es_openai.py --resume {self.dir}"
        print(message, file=sys.stdout if status in ("target", "done") else sys.stderr)
        return dict(state, run_dir=self.dir, status=status)


def save_checkpoint(run_dir: str, state: dict, args, snapshot: bool):  # whole, then renamed
    names = ["latest.npz"]
    if snapshot and args.save_every:
        names.append(f"iter_{state['iteration']:06d}.npz")
    policy = dict(env=args.env, sizes=args.sizes, activation=args.activation)
    policy.update(ac_bins=args.ac_bins, obs_norm=args.obs_norm)
    tmp = os.path.join(run_dir, "checkpoints", "tmp.npz")
    with stops_held():  # a stop waits for the files
        for name in names:
            np.savez(tmp, **state, **policy)
            os.replace(tmp, os.path.join(run_dir, "checkpoints", name))


def load_checkpoint(path: str, args) -> dict:  # the state saved by save_checkpoint, checked
    n = args.sizes[0]
    fields = dict(theta=(None, "finite"), opt_m=(None, "finite"), opt_v=(None, "nonnegative"))
    fields.update(opt_t=((), "count"), ob_sum=((n,), "finite"), ob_sumsq=((n,), "nonnegative"))
    fields.update(ob_count=((), "nonnegative"), iteration=((), "count"), episodes=((), "count"))
    fields.update(env_steps=((), "count"), wall_time=((), "nonnegative"), env=((), "any"))
    fields.update(sizes=(None, "count"), activation=((), "any"), obs_norm=((), "any"))
    c = read_checkpoint(path, fields, args.env)
    saved = (c["sizes"].tolist(), str(c["activation"]), bool(c["obs_norm"]))
    wanted = (args.sizes, args.activation, args.obs_norm)
    what = "(layer sizes, activation, observation normalization)"
    check(saved == wanted, f"the checkpoint '{path}' is for {saved}, not {wanted} {what}")
    d = n_params(args.sizes)
    fits = c["theta"].shape == c["opt_m"].shape == c["opt_v"].shape == (d,)
    check(fits, f"the checkpoint '{path}' holds theta, opt_m or opt_v not of the policy's {d}")
    state = {key: c[key] for key in STATE}  # ob_sum and ob_sumsq as saved
    for key in ("theta", "opt_m", "opt_v"):
        state[key] = c[key].astype(np.float32)
    for key in ("opt_t", "ob_count", "iteration", "episodes", "env_steps", "wall_time"):
        state[key] = c[key].item()
    return state


def read_checkpoint(path: str, fields: dict, env_id=None) -> dict:
    """The arrays of the .npz file at path, checked: fields[name] = (shape, kind), shape None for
    any, kind "count" (integers >= 0), "finite", "nonnegative" (finite, >= 0) or "any"; env_id,
    if given, is the environment it must be for. Anything else is one line, exit status 2."""
    check(os.path.isfile(path), f"there is no file '{path}'")
    try:
        with np.load(path, allow_pickle=False) as f:
            saved = {name: f[name] for name in f.files}
    except Exception as e:  # empty, cut short, not a zip, a bad CRC, pickled: all one class
        reason = str(e).split(". ")[0]  # numpy's advice to unpickle an untrusted file left out
        check(False, f"cannot read the checkpoint '{path}': {type(e).__name__}: {reason}")
    missing = ", ".join(name for name in fields if name not in saved)
    check(not missing, f"'{path}' is no checkpoint of {SCRIPT}: it has no {missing}")
    if env_id is not None:
        env = saved["env"]
        check(env == env_id, f"the checkpoint '{path}' is for {env}, not {env_id}")
    for name, (shape, kind) in fields.items():
        x = saved[name]
        damaged = f"the checkpoint '{path}' is damaged: its {name}"
        check(shape is None or x.shape == shape, f"{damaged} has shape {x.shape}, not {shape}")
        if kind == "count":
            check(x.dtype.kind in "iu" and (x >= 0).all(), f"{damaged} is not an integer >= 0")
        if kind in ("finite", "nonnegative"):
            check(x.dtype.kind == "f" and np.isfinite(x).all(), f"{damaged} is not finite")
        if kind == "nonnegative":
            check((x >= 0).all(), f"{damaged} is negative")
    return saved


def read_config(run_dir: str) -> dict:  # config.json of a run directory of this script
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            config = json.load(f)
        by = config["script"]
    except (OSError, ValueError, LookupError, TypeError):  # no such file, not JSON, no "script"
        check(False, f"'{run_dir}' is not a run directory of {SCRIPT}")
    check(by == SCRIPT, f"'{run_dir}' is a run directory of {by}, not of {SCRIPT}; use python {by}")
    return config


def plot(run_dir: str, title: str) -> tuple:  # progress.png; returns the best evaluation
    from matplotlib.figure import Figure

    c = np.atleast_1d(np.genfromtxt(f"{run_dir}/progress.csv", delimiter=",", names=True))
    ev = c["eval_return_mean"]
    ok = ~np.isnan(ev)
    fig = Figure((7, 4))  # fixed margins: a tight layout costs as much as the drawing
    ax = fig.subplots(gridspec_kw=dict(left=0.12, right=0.97, bottom=0.12, top=0.92))
    ax.fill_between(c["env_steps"], c["return_min"], c["return_max"], alpha=0.2, label="range")
    ax.plot(c["env_steps"], c["return_mean"], label="training (mean)")
    ax.plot(c["env_steps"][ok], ev[ok], "o-", label="evaluation (mean)")
    ax.set(xlabel="environment steps", ylabel="return", title=title)
    ax.legend(loc="lower right")
    fig.savefig(os.path.join(run_dir, "progress.png"), dpi=90)
    if not ok.any():
        return np.nan, 0
    return np.nanmax(ev), c["iteration"][np.nanargmax(ev)]


def write_gif(args, state: dict, path: str) -> str:
    """--play's evaluation episode 0, the job ("eval", 10**6, 0), as a GIF of every second frame."""
    from PIL import Image  # comes with matplotlib

    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame draws without a display
    os.environ.setdefault("MUJOCO_GL", "glfw" if os.environ.get("DISPLAY") else "egl")
    env = gym.wrappers.RenderCollection(make_env(args.env, args.episode_length, render=True))
    run_jobs([env], args, None, task_of(state, args), [("eval", 10**6, 0)])  # no noise table
    # every second frame RenderCollection kept (one a step), at 12.5 frames per second
    images = [Image.fromarray(frame[::2, ::2]) for frame in env.render()[::2]]  # half size
    os.makedirs(os.path.dirname(path), exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=80, loop=0)
    return path


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
    args.episodes = args.episodes or 10
    configure(args)
    check(names, f"'{run_dir}' has no snapshots (checkpoints/iter_*.npz)")
    states = [load_checkpoint(name, args) for name in names]
    if args.video:
        print(f"video: {write_gif(args, states[0], f'{run_dir}/video/{args.env}.gif')}")
    workers = Workers(args, np.zeros(1, np.float32))
    table = []
    try:
        for s in states:  # the same episodes for every snapshot
            R = evaluate(workers, s, args, args.episodes, 10**6)
            table.append([s["iteration"], s["env_steps"], R.mean(), R.std(), R.min(), R.max()])
            mean = f"mean return {R.mean():.1f} +- {R.std():.1f} over {args.episodes} episodes"
            spread = f"(min {R.min():.1f}, max {R.max():.1f})"
            print(f"{args.env}: {mean} {spread}, policy of generation {s['iteration']}", flush=True)
    finally:
        workers.close()
    if args.evaluate_snapshots:
        from matplotlib.figure import Figure

        t = np.array(table)
        header = "iteration,env_steps,return_mean,return_std,return_min,return_max"
        path = f"{run_dir}/snapshots.csv"
        np.savetxt(path, t, delimiter=",", comments="", fmt="%.17g", header=header)
        fig = Figure((7, 4))
        ax = fig.subplots(gridspec_kw=dict(left=0.12, right=0.97, bottom=0.12, top=0.92))
        ax.errorbar(t[:, 0], t[:, 2], yerr=t[:, 3], fmt="o-", capsize=3)
        ylabel = f"return over {args.episodes} episodes (+- std)"
        title = os.path.basename(os.path.normpath(run_dir))
        ax.set(xlabel="generation", ylabel=ylabel, title=title)
        fig.savefig(f"{run_dir}/snapshots.png", dpi=90)
        print(f"wrote {run_dir}/snapshots.csv and snapshots.png")
    return R if args.play else table


def mujoco_warning(message: str):  # MuJoCo 3.3+ warns of gymnasium's settotalmass: not ours
    if "settotalmass" not in message:
        print(f"MuJoCo warning: {message.strip()}", file=sys.stderr)


def main(argv=None):
    with contextlib.suppress(ImportError):  # MuJoCo's warnings on stderr, not in a file here
        import mujoco

        mujoco.set_mju_user_warning(mujoco_warning)
    args = build_parser().parse_args(argv)
    modes = [m for m in ("resume", "play", "evaluate_snapshots") if getattr(args, m) is not None]
    check(len(modes) < 2, f"--{' and --'.join(modes).replace('_', '-')}: one at a time")
    playing = args.play is not None or args.evaluate_snapshots is not None
    check(args.play is not None or not args.video, "--video goes with --play RUN_DIR")
    check(playing or not args.episodes, "--episodes goes with --play or --evaluate-snapshots")
    check(not playing or not (args.ray or args.ray_address), "--ray is for training, not --play")
    try:
        if playing:
            return play(args)
        result = train(configure(args))
    except OSError as e:  # a --video folder that takes no file, a disk full (the checkpoints stay)
        check(False, f"cannot write {e.filename}: {e.strerror}")
    except KeyboardInterrupt:  # during --play, or while a run starts
        sys.exit(130)
    if result["status"] == "interrupted":
        sys.exit(130)
    if result["status"] not in ("done", "target"):
        sys.exit(1)
    return result


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops a run like Ctrl-C
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even in a job started with '&'
    main()
