"""OpenAI evolution strategies with a NumPy MLP and a shared noise table. Salimans, Ho, Chen, Sidor
& Sutskever (2017), "Evolution Strategies as a Scalable Alternative to Reinforcement Learning",
https://arxiv.org/abs/1703.03864, Algorithm 2 and its tricks; docs/es_openai.md derives the math,
cited below as "Eq. (n)".

    python es_openai.py --env HalfCheetah-v5             # train with the environment's preset
    python es_openai.py --evaluate-snapshots runs/<run-dir> --episodes 5
"""

import argparse
import contextlib
import datetime
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
from multiprocessing.connection import wait

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one BLAS thread per process: workers own the cores
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

# ---- configuration: presets, then the command line (a flag overrides its preset) ----
# The paper's MuJoCo policy (2x64 tanh, 10 action bins for Hopper and Swimmer), the starter code's
# l2coeff and action noise; HalfCheetah's sigma and alpha tuned here (docs/es_openai.md, "Presets").
MUJOCO = dict(
    hidden="64,64",
    sigma=0.05,
    alpha=0.03,
    l2coeff=0.005,
    ac_noise_std=0.01,
    eval_every=5,
    eval_episodes=5,
)
PRESETS = {
    "HalfCheetah-v5": dict(MUJOCO, population=40, iterations=150, target_return=2385.79),
    "Swimmer-v5": dict(
        MUJOCO,
        sigma=0.02,
        alpha=0.01,
        population=40,
        ac_bins=10,
        iterations=100,
        target_return=128.25,
    ),
    "Hopper-v5": dict(
        MUJOCO,
        sigma=0.02,
        alpha=0.01,
        population=100,
        ac_bins=10,
        iterations=1000,
        target_return=3403.46,
    ),
    "CartPole-v1": dict(
        hidden="16",
        sigma=0.05,
        alpha=0.03,
        l2coeff=0.005,
        population=40,
        iterations=100,
        eval_every=5,
        eval_episodes=20,
        target_return=475.0,
    ),
}
GENERIC = dict(
    env="HalfCheetah-v5",
    seed=0,
    hidden="64,64",
    sigma=0.02,
    alpha=0.01,
    l2coeff=0.005,
    population=40,
    ac_bins=0,
    iterations=200,
    eval_every=10,
    eval_episodes=10,
    min_timesteps=0,
    optimizer="adam",
    momentum=0.9,
    beta1=0.9,
    beta2=0.999,
    fitness="centered_rank",
    mirror=True,
    activation="tanh",
    obs_norm=True,
    calc_obstat_prob=0.01,
    eval_prob=0.0,
    noise_size=250_000_000,
    noise_seed=123,
    lockstep=4,
    out_dir="runs",
    save_every=10,
)
STEER = (
    "iterations",
    "workers",
    "lockstep",
    "target_return",
    "save_every",
    "alpha",
    "sigma",
    "ray",
    "ray_address",
)  # what --resume takes again: where a run goes on, or its step sizes


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="es_openai.py",
        description=__doc__.split("\n")[0],
        epilog=(
            "presets: " + "; ".join(f"{e}: {d}" for e, d in PRESETS.items()) + f"; else: {GENERIC}"
        ),
    )
    p.error = lambda message: p.exit(2, f"es_openai.py: error: {message} (see --help)\n")
    a, n, r = p.add_argument, at_least, in_range  # unset flags: the preset, then GENERIC
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
    a(
        "--fitness",
        choices=("centered_rank", "sign", "centered_sign_rank", "none"),
        help="return_proc_mode: returns to weights (Eqs. 4-5)",
    )
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
TRAIN, EVAL, INIT = 0, 2, 3  # first word of a stream key: what the stream is for (as in ars.py)


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


def batched_weighted_sum(
    weights: np.ndarray, indices: np.ndarray, table: np.ndarray, dim: int, batch_size: int = 500
) -> np.ndarray:
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
    theta, m, v, t = state["theta"], state["opt_m"], state["opt_v"], state["opt_t"] + 1
    grad = -g * (1.0 / args.sigma if args.optimizer == "plain" else 1.0) + args.l2coeff * theta
    if args.optimizer == "adam":  # Eq. (7), the starter's form: the bias corrections in the step
        b1, b2 = args.beta1, args.beta2
        a = args.alpha * np.sqrt(1 - b2**t) / (1 - b1**t)
        m, v = b1 * m + (1 - b1) * grad, b2 * v + (1 - b2) * grad * grad
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
    return [obs_dim, *hidden, int(act.n) if hasattr(act, "n") else act.shape[0] * (ac_bins or 1)]


def unflatten(theta: np.ndarray, sizes: list) -> list:
    """Views [(W, b), ...] into theta, W of shape (n_in, n_out) as in the starter: h @ W + b."""
    layers, at = [], 0
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        layers.append(
            (
                theta[at : at + n_in * n_out].reshape(n_in, n_out),
                theta[at + n_in * n_out : at + n_in * n_out + n_out],
            )
        )
        at += n_in * n_out + n_out
    return layers


def normc_init(sizes: list, rng: np.random.Generator) -> np.ndarray:
    """Eq. (10): Gaussian columns rescaled to norm 1 (hidden layers) and 0.01 (output); biases 0."""
    theta = np.zeros(sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:])), np.float32)
    layers = unflatten(theta, sizes)
    for j, (W, _) in enumerate(layers):
        w, std = rng.standard_normal(W.shape), 0.01 if j == len(layers) - 1 else 1.0
        W[:] = w * std / np.sqrt(np.square(w).sum(axis=0, keepdims=True))
    return theta


def elu(z, out):  # a real ELU (the notebooks this grew from mapped elu to a leaky ReLU)
    out[:] = np.where(z > 0, z, np.expm1(np.minimum(z, 0.0)))


ACTIVATIONS = {
    "tanh": np.tanh,
    "relu": lambda z, out: np.maximum(z, 0.0, out=out),
    "elu": elu,
    "lrelu": lambda z, out: np.maximum(z, 0.01 * z, out=out),
}  # deviation: starter 0.2


class Policy:
    """a = pi_theta(o) for B parameter vectors at once: normalize (Eq. 9), the MLP, the action of
    Eq. (11). Written for speed, as it runs every step: each bias is the last row of its layer and
    every input ends with a 1, so a layer is one product; B rows of (n_in + 1, n_out) layers make
    one batched product per layer (B = 1: plain vectors). Each row gives what it gives alone."""

    def __init__(self, thetas, sizes, activation, act, ac_bins, ob_mean, ob_std, ob_clip=True):
        B, lead = len(thetas), (() if len(thetas) == 1 else (len(thetas), 1))
        layers = [
            [np.vstack([W, b]).astype(np.float64) for W, b in unflatten(t, sizes)] for t in thetas
        ]
        self.layers = [Wb[0] if B == 1 else np.stack(Wb) for Wb in zip(*layers)]
        self.inputs = [np.ones((*lead, n + 1)) for n in sizes[:-1]]  # each input ends with the 1
        self.x0, self.obs = self.inputs[0].reshape(-1), self.inputs[0][..., :-1].reshape(B, -1)
        self.hidden, self.B = [x[..., :-1] for x in self.inputs[1:]], B  # where activations go
        self.act, self.discrete, self.bins = ACTIVATIONS[activation], hasattr(act, "n"), ac_bins
        inv_std = 1.0 / np.asarray(ob_std, np.float64)  # Eq. (9) on all of x0: the 1s stay 1
        clip = 5.0 if ob_clip else np.inf  # without normalization the observations go in raw
        rows = lambda a, one: np.tile(np.append(a, one), B)  # noqa: E731
        self.scale, self.shift = (
            rows(inv_std, 1.0),
            rows(-np.asarray(ob_mean, np.float64) * inv_std, 0.0),
        )
        self.clip_low, self.clip_high = (rows(np.full(sizes[0], c), 1.0) for c in (-clip, clip))
        if not self.discrete:
            self.low, self.high = (
                np.tile(x.astype(np.float64), (B, 1)) for x in (act.low, act.high)
            )
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
            self.act(z, z)  # in place, then copied beside the 1s
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
    envs: list,
    policy: Policy,
    env_seeds: list,
    rngs=None,
    ac_noise_std=0.0,
    keep_obs=None,
    frames=None,
) -> tuple:
    """The B = policy.B episodes of the jobs stepped together, one policy call per step; job j's
    share env_seeds[j], draw action noise from rngs[j] (Eq. 11) and keep their observations' sums
    if keep_obs[j]. ([(return, sign return, length, sums)] per episode, policy s, env.step s)."""
    B, per = policy.B, policy.B // len(env_seeds)  # per: 2 for a mirrored pair, else 1
    envs += [
        make_env(envs[0].spec.id, envs[0].spec.max_episode_steps) for _ in range(B - len(envs))
    ]
    obs = [reset_env(envs[i], env_seeds[i // per])[0] for i in range(B)]
    total, signs, steps, running = [0.0] * B, [0.0] * B, [0] * B, list(range(B))
    kept = [[ob] if keep_obs and keep_obs[i // per] else None for i, ob in enumerate(obs)]
    noisy, t, t_policy, t_env = rngs is not None and ac_noise_std > 0, 0, 0.0, 0.0
    while running:
        t0 = time.perf_counter()
        if noisy and t % 256 == 0:  # (256, B, adim): each job's block from its own stream
            block = np.concatenate(
                [
                    ac_noise_std * rng.standard_normal((256, per, policy.low.shape[1]))
                    for rng in rngs
                ],
                axis=1,
            )
        noise = block[t % 256] if noisy else None
        actions = policy(obs, noise)
        t1 = time.perf_counter()
        results = [(i, *envs[i].step(actions[i])) for i in running]
        t_policy, t_env, t = t_policy + t1 - t0, t_env + time.perf_counter() - t1, t + 1
        if frames is not None and t % 2 == 1:  # every other frame: rendering costs more than a step
            frames.append(envs[0].render())
        for i, ob, r, terminated, truncated, _ in results:
            r = float(r)
            total[i], signs[i], steps[i] = total[i] + r, signs[i] + (r > 0) - (r < 0), steps[i] + 1
            if terminated or truncated:
                running.remove(i)
                continue
            obs[i] = ob
            if kept[i] is not None:  # the states acted on; the terminal one is not
                kept[i].append(ob)
    sums = [
        None
        if o is None
        else (
            np.asarray(o, np.float64).sum(axis=0),
            np.square(np.asarray(o, np.float64)).sum(axis=0),
        )
        for o in kept
    ]
    return list(zip(total, signs, steps, sums)), t_policy, t_env


def run_jobs(envs: list, args, table, task: dict, jobs: list) -> list:
    """A worker's answer to a message of jobs (kind, generation, k): a population job is a mirrored
    pair (or one episode) of Eq. (6), unless it is a noiseless episode (--eval-prob); "eval" is an
    evaluation episode. Pairs are stepped together. Returns [(k, scalars and sums)]."""
    policy = lambda thetas: Policy(
        thetas,
        args.sizes,
        args.activation,
        args.act,  # noqa: E731
        args.ac_bins,
        task["ob_mean"],
        task["ob_std"],
        task["ob_clip"],
    )
    theta, out, pairs, signs = task["theta"], {}, [], (1.0, -1.0) if args.mirror else (1.0,)
    for i, (kind, t, k) in enumerate(jobs):  # the job's stream decides, in this order:
        rng, t0 = stream(args.seed, TRAIN if kind == "train" else EVAL, t, k), time.perf_counter()
        noiseless = kind == "eval" or rng.random() < args.eval_prob  # a noiseless episode or not,
        env_seed = int(rng.integers(2**31))  # the episodes' seed (deviation: the starter's differ),
        if noiseless:  # an evaluation episode, or one of --eval-prob
            ((R, _, L, _),) = rollouts(envs, policy([theta]), [env_seed])[0]
            out[i] = (R, L) if kind == "eval" else ("noiseless", R, L)
            continue
        idx = int(rng.integers(0, len(table) - theta.size + 1))  # the noise index,
        keep = bool(rng.random() < args.calc_obstat_prob * args.obs_norm)  # record (deviation: per
        eps, t1 = table[idx : idx + theta.size], time.perf_counter()  # pair: per episode in the
        thetas = [theta + (s * args.sigma) * eps for s in signs]  # starter); theta +- sigma eps_i
        t2 = time.perf_counter()  # then the action noise, in rollouts
        job = (
            i,
            idx,
            keep,
            thetas,
            env_seed,
            rng,
            dict(noise=t1 - t0, set_params=t2 - t1, mutation=t2 - t0),
        )
        if args.mirror:
            pairs.append(job)  # stepped below, with the other pairs of this message
        else:
            out.update(
                result(
                    [job],
                    *rollouts(envs, policy(thetas), [env_seed], [rng], args.ac_noise_std, [keep]),
                    time.perf_counter() - t2,
                )
            )
    if pairs:
        t0 = time.perf_counter()
        episodes = rollouts(
            envs,
            policy([th for j in pairs for th in j[3]]),
            [j[4] for j in pairs],
            [j[5] for j in pairs],
            args.ac_noise_std,
            [j[2] for j in pairs],
        )
        out.update(result(pairs, *episodes, time.perf_counter() - t0))
    return [(k, out[i]) for i, (_, _, k) in enumerate(jobs)]


def result(jobs: list, episodes: list, t_policy: float, t_env: float, seconds: float):
    """Population results ("pair", idx, returns, sign returns, lengths, ob_sum, ob_sumsq, times)."""
    per, steps, out = len(episodes) // len(jobs), sum(e[2] for e in episodes), {}
    for j, (i, idx, keep, _, _, _, times) in enumerate(jobs):
        mine = episodes[per * j : per * j + per]
        sums = [sum(e[3][c] for e in mine) for c in (0, 1)] if keep else [None, None]  # S, S2
        out[i] = (
            "pair",
            idx,
            [e[0] for e in mine],
            [e[1] for e in mine],
            [e[2] for e in mine],
            *sums,
            dict(
                times,
                mutation=times["mutation"] + seconds / len(jobs),
                policy_us=1e6 * t_policy / steps,
                env_us=1e6 * t_env / steps,
            ),
        )
    return out


# ---- training: Algorithm 2 of the paper (docs/es_openai.md, "Pseudocode") ----
class Generation:
    """Jobs k = 0, 1, ... of generation t; it closes at the shortest prefix of finished jobs with
    --population training episodes and --min-timesteps steps: no worker's speed changes it."""

    def __init__(self, args, t: int):
        self.args, self.t, self.k, self.handed, self.closed_at = args, t, 0, 0, None

    def next_jobs(self, results: dict, lockstep: int, workers: int) -> list:
        """Up to --lockstep jobs, and no more than a worker's share of the jobs still needed."""
        a, per, jobs = self.args, 2 if self.args.mirror else 1, []
        left = max(0, -(-(a.population - self.handed) // per))
        while (
            len(jobs) < min(lockstep, max(1, -(-left // workers)))
            and self.closed_at is None
            and (self.handed < a.population or env_steps(results.values()) < a.min_timesteps)
        ):
            jobs.append(("train", self.t, self.k))  # the master draws the job's first number too
            self.handed += per * (stream(a.seed, TRAIN, self.t, self.k).random() >= a.eval_prob)
            self.k += 1
        return jobs

    def done(self, results: dict) -> bool:
        n = n_steps = 0
        for k in range(self.k):
            if k not in results:
                return False
            n += len(results[k][2]) if results[k][0] == "pair" else 0
            n_steps += env_steps([results[k]])
            if n >= self.args.population and n_steps >= self.args.min_timesteps:
                self.closed_at = k + 1
                return True
        return False


def env_steps(results) -> int:  # env steps of population results: pairs' and noiseless episodes'
    return sum(sum(r[4]) if r[0] == "pair" else r[2] for r in results)


def task_of(state: dict, args) -> dict:  # theta and the statistics, frozen for a generation
    zeros = np.zeros_like(state["ob_sum"])
    mean, std = ob_mean_std(state) if args.obs_norm else (zeros, zeros + 1.0)
    return dict(theta=state["theta"], ob_mean=mean, ob_std=std, ob_clip=args.obs_norm)


def es_generation(pool, state: dict, args) -> tuple:
    """One generation: the population, shaped returns, g, the optimizer step, the new statistics.
    `state` is left whole, so a stop or a NaN at any moment leaves a state to checkpoint."""
    t0, gen = time.time(), Generation(args, state["iteration"])
    results = pool.run(task_of(state, args), gen)
    stale, pool.logged = pool.stale - pool.logged, pool.stale  # since the last generation's
    accepted = [results[k] for k in range(gen.closed_at)]
    pairs = [r for r in accepted if r[0] == "pair"]
    noiseless = np.array([r[1:] for r in accepted if r[0] == "noiseless"]).reshape(-1, 2)  # R, L
    indices, returns, sign_returns, lengths = (np.array([r[i] for r in pairs]) for i in range(1, 5))
    F, t1 = shape_fitness(returns, sign_returns, args.fitness), time.time()  # Eqs. (4)-(5)
    g = es_gradient(F, indices, pool.table, state["theta"].size)  # Eq. (6)
    new = dict(state, **update(state, g, args))  # Eq. (7), (8) or (3)
    ob_count = 0.0
    for r in pairs:  # Eq. (9): the new observations count from the next generation on
        if r[5] is not None:
            new.update(
                ob_sum=new["ob_sum"] + r[5],
                ob_sumsq=new["ob_sumsq"] + r[6],
                ob_count=new["ob_count"] + float(sum(r[4])),
            )
            ob_count += float(sum(r[4]))
    n_steps = int(lengths.sum() + noiseless[:, 1].sum())
    skipped = stale + sum(k >= gen.closed_at for k in results)  # past the prefix, or older tasks
    new.update(
        iteration=gen.t + 1,
        episodes=state["episodes"] + lengths.size + len(noiseless),
        env_steps=state["env_steps"] + n_steps,
    )
    finite = all(
        np.isfinite(x).all() for x in (new["theta"], returns, new["ob_sum"], new["ob_sumsq"])
    )
    return new, dict(
        returns=returns.ravel(),
        lengths=lengths.ravel(),
        noiseless=noiseless,
        steps=n_steps,
        skipped_frac=skipped / (skipped + len(accepted)),
        finite=finite,
        ob_count=ob_count,
        grad_norm=np.linalg.norm(g),
        time_gen=time.time() - t0,
        update_norm=np.linalg.norm(new["theta"] - state["theta"]),
        times={n: np.array([r[7][n] for r in pairs]) for n in TIMERS},
        time_update=time.time() - t1,
    )


def evaluate(pool, state: dict, args, episodes: int, key=None) -> np.ndarray:  # noiseless
    results = pool.run(task_of(state, args), Evaluation(key or state["iteration"], episodes))
    return np.array([results[i][0] for i in range(episodes)])


def train(args) -> dict:
    run = Run(args)  # theta_0 by normc (Eq. 10), or --resume's; the noise table; the workers
    state, reached = run.state, False
    try:
        while state["iteration"] < args.iterations:
            new, info = es_generation(run.pool, state, args)  # the population, Eqs. (4)-(9)
            if not info["finite"]:
                return run.end(state, "diverged")  # the last good state is checkpointed
            due = new["iteration"] % args.eval_every == 0 or new["iteration"] == args.iterations
            ev = evaluate(run.pool, new, args, args.eval_episodes) if due else None
            hit = due and args.target_return is not None and ev.mean() >= args.target_return
            run.log(new, info, ev)  # progress.csv, the progress line, the checkpoint
            state, reached = new, hit  # logged: from here on a stop keeps this generation
            if reached:
                return run.end(state, "target")
        return run.end(state, "done")
    except (KeyboardInterrupt, WorkerDied) as e:  # Ctrl-C, SIGTERM, a dead worker: keep the last
        return run.end(state, "target" if reached else f"stopped: {e}" if str(e) else "interrupted")


# ---- plumbing: checks, workers, Ray, run directory, snapshots, --play, main ----
class WorkerDied(Exception):
    """A rollout process or Ray actor is gone, or failed: the run stops with its checkpoint."""


def check(ok: bool, message: str):  # a user's mistake: one line, exit status 2, nothing written
    if not ok:
        build_parser().error(str(message).partition("\n")[0])  # whatever raised it, one line


def at_least(low, kind=int):  # an argparse type: an int >= low, or a finite float > low
    def number(text: str):
        value = kind(text)
        if not (value >= low if kind is int else low < value < math.inf):
            raise argparse.ArgumentTypeError(f"must be {'>=' if kind is int else '>'} {low}")
        return value

    return number


def in_range(low, high, closed=False):  # an argparse type: a float in [low, high), or [low, high]
    def number(text: str):
        if not (low <= (value := float(text)) < high or closed and value == high):
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}{']' if closed else ')'}")
        return value

    return number


def configure(args) -> argparse.Namespace:
    """--resume's saved options, then the preset; what no one flag can check; the workers."""
    if args.resume is not None:
        fixed = sorted({k for k, v in vars(args).items() if v is not None} - {"resume", *STEER})
        check(
            not fixed,
            f"--{', --'.join(fixed).replace('_', '-')} cannot change a resumed run; "
            f"only --{', --'.join(STEER).replace('_', '-')} can",
        )
        for key, value in read_config(args.resume).items():
            if getattr(args, key, False) is None and key not in ("workers", "ray", "ray_address"):
                setattr(args, key, value)
    for key, value in {**GENERIC, **PRESETS.get(args.env or GENERIC["env"], {})}.items():
        setattr(args, key, value if getattr(args, key) is None else getattr(args, key))
    check(
        all(h.strip().isdigit() and int(h) > 0 for h in args.hidden.split(",")),
        f"--hidden takes sizes like 64 or 64,64, not '{args.hidden}'",
    )
    check(
        not args.mirror or args.population % 2 == 0,
        f"--population must be even with mirrored "
        f"sampling, got {args.population} (or add --no-mirror)",
    )
    check(
        args.mirror or "sign" not in args.fitness,
        f"--fitness {args.fitness} needs mirrored "
        "sampling: the starter code defines the sign modes on mirrored pairs only",
    )
    check(
        not args.obs_norm or args.calc_obstat_prob > 0,
        "--calc-obstat-prob must be > 0 with observation normalization (or add --no-obs-norm)",
    )
    try:
        obs, act = (env := gym.make(args.env)).observation_space, env.action_space
    except (gym.error.Error, ImportError) as e:  # an unknown id, a missing extra, a retired version
        check(False, e)
    check(
        isinstance(obs, gym.spaces.Box) and len(obs.shape) == 1,
        f"{args.env}: observations must be a flat Box, not {obs}",
    )
    check(
        env.spec.max_episode_steps or args.episode_length,
        f"{args.env} has no time limit: give --episode-length",
    )
    discrete = isinstance(act, gym.spaces.Discrete)
    check(
        discrete or isinstance(act, gym.spaces.Box) and len(act.shape) == 1,
        f"{args.env} has {act} actions; es_openai.py takes Discrete and flat Box actions",
    )
    check(
        not discrete or not args.ac_bins and not args.ac_noise_std,
        f"{args.env} has discrete actions: --ac-bins and --ac-noise-std are for Box actions",
    )
    check(args.ac_bins != 1, "--ac-bins must be 0 (continuous) or at least 2")
    check(
        discrete or not args.ac_bins or np.isfinite([act.low, act.high]).all(),
        f"{args.env} has unbounded actions: --ac-bins needs finite bounds",
    )
    args.ac_noise_std = (
        (0.0 if discrete else 0.01) if args.ac_noise_std is None else args.ac_noise_std
    )
    args.act, args.sizes = (
        act,
        layer_sizes(obs.shape[0], [int(h) for h in args.hidden.split(",")], act, args.ac_bins),
    )
    args.ray = args.ray or bool(args.ray_address)  # an address says where Ray is: it means --ray
    ray = args.ray and start_ray(args.ray_address)  # found, or refused, before anything is written
    args.workers = args.workers or (int(ray.cluster_resources()["CPU"]) if ray else os.cpu_count())
    return args


def make_env(env_id: str, episode_length=None, render=False):
    kw = dict(max_episode_steps=episode_length) if episode_length else {}
    env = gym.make(env_id, **kw, **({"render_mode": "rgb_array"} if render else {}))
    if (
        render
        and (m := getattr(env.unwrapped, "model", None))
        and "track"
        in [  # MuJoCo: the
            m.camera(i).name for i in range(m.ncam)
        ]
    ):  # camera that follows the body
        env = gym.make(env_id, camera_name="track", render_mode="rgb_array", **kw)
    return env


def reset_env(env, seed: int):
    """env.reset(seed); BipedalWalker's old Box2D world would change the episode: a new one."""
    if type(walker := env.unwrapped).__name__ == "BipedalWalker" and walker.terrain:
        walker._destroy()
        walker.world = type(walker.world)()
    return env.reset(seed=seed)


def worker(conn, args, table):  # a rollout process: the latest task, then its jobs
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches every process: the master acts
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform == "linux":  # PR_SET_PDEATHSIG: end with the master, even one killed -9
        __import__("ctypes").CDLL(None).prctl(1, signal.SIGKILL)
    envs, task = [make_env(args.env, args.episode_length)], None
    while msg := conn.recv():
        if msg[0] == "task":
            task = msg[1]
            continue
        try:
            conn.send((msg[1], run_jobs(envs, args, table, task, msg[2])))
        except Exception as e:  # the environment failed: one line from the master, not a hang
            conn.send(("error", f"a rollout failed: {type(e).__name__}: {e}"))


class Evaluation:  # the jobs of an evaluation, for Workers.run as a Generation's
    def __init__(self, key: int, episodes: int):
        self.todo, self.n = [("eval", key, i) for i in range(episodes)][::-1], episodes

    def next_jobs(self, results: dict, lockstep: int, workers: int) -> list:
        return [self.todo.pop() for _ in range(min(lockstep, -(-len(self.todo) // workers)))]

    def done(self, results: dict) -> bool:
        return len(results) == self.n


class Workers:
    """Processes forked after the table: they read its pages, no copy. A task (theta, statistics)
    goes once to each, then jobs to whichever is free; an older task's results are dropped."""

    depth = 1  # messages queued per worker

    def __init__(self, args, table):
        ctx, self.table, self.stale, self.logged, self.key = mp.get_context("fork"), table, 0, 0, 0
        self.conns, self.procs, self.lockstep, self.load = [], [], args.lockstep, [0] * args.workers
        for _ in range(args.workers):  # the worker's end closed here before the next fork:
            parent, child = ctx.Pipe()  # if the worker dies, its pipe ends (EOFError)
            (p := ctx.Process(target=worker, args=(child, args, table), daemon=True)).start()
            child.close()
            self.conns, self.procs = self.conns + [parent], self.procs + [p]

    def publish(self, task: dict):
        [c.send(("task", task)) for c in self.conns]

    def submit(self, i: int, jobs: list):
        self.conns[i].send(("jobs", self.key, jobs))

    def collect(self) -> list:  # [(worker, key, results)] of the messages back
        return [
            (i, *self.conns[i].recv())
            for i in [
                self.conns.index(c) for c in wait([c for c, n in zip(self.conns, self.load) if n])
            ]
        ]

    def run(self, task: dict, jobs) -> dict:
        """Hands out jobs.next_jobs() until jobs.done(results); returns {k: result}."""
        self.key, results, n = self.key + 1, {}, len(self.load)
        try:
            self.publish(task)
            while not jobs.done(results):
                for i in range(n):
                    while self.load[i] < self.depth and (
                        todo := jobs.next_jobs(results, self.lockstep, n)
                    ):
                        self.submit(i, todo)
                        self.load[i] += 1
                for i, key, out in self.collect():
                    self.load[i] -= 1
                    if key == "error":
                        raise WorkerDied(out)
                    if key == self.key:
                        results.update(out)
                    else:  # of an older task: a job still running when its generation closed
                        self.stale += len(out)
        except (EOFError, OSError):  # a closed pipe: the process at its other end died
            raise WorkerDied("a worker process died") from None
        return results

    def close(self):  # the episodes under way, if any, are not needed any more
        for p in self.procs:
            p.kill()
            p.join()


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
            check(False, f"no Ray cluster answers at {address} ({getattr(e, 'strerror', 0) or e})")
        signal.signal(signal.SIGTERM, handler)
    if __name__ != "__main__":  # imported (tests, notebooks): this file's code goes by value
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray


class RayWorker:  # a Ray actor: its node's read-only copy of the table, the task fetched once
    def __init__(self, args, table):
        self.args, self.table, self.envs, self.key = args, table, None, None

    def run(self, key: int, ref: list, jobs: list) -> tuple:
        if self.key != key:  # ref = [reference]: a bare one would be fetched for every message
            self.key, self.task = key, __import__("ray").get(ref[0])
        self.envs = self.envs or [make_env(self.args.env, self.args.episode_length)]
        return key, run_jobs(self.envs, self.args, self.table, self.task, jobs)


class RayPool(Workers):
    """Workers on Ray actors spread over the nodes, the table once in the object store (the master
    reads it there too). A lost actor is restarted and its jobs rerun: the same results."""

    depth = 2  # the next message is there when one ends

    def __init__(self, args, table):
        self.ray = ray = start_ray(args.ray_address)
        self.ref = ray.put(table)  # held for the run: a restarted actor maps it again
        self.table, self.lockstep, self.inflight = ray.get(self.ref), args.lockstep, {}
        self.stale = self.logged = self.key = 0
        self.load = [0] * args.workers
        actor = ray.remote(num_cpus=1, max_restarts=3, max_task_retries=3)(RayWorker)
        self.actors = [
            actor.options(scheduling_strategy="SPREAD").remote(args, self.ref)
            for _ in range(args.workers)
        ]

    def publish(self, task: dict):
        self.task = [self.ray.put(task)]

    def submit(self, i: int, jobs: list):
        self.inflight[self.actors[i].run.remote(self.key, self.task, jobs)] = i

    def collect(self) -> list:
        ray, (done, _) = self.ray, self.ray.wait(list(self.inflight), num_returns=1, timeout=300)
        if not done:
            raise WorkerDied("no result from the Ray workers in 300 s")
        try:
            return [(self.inflight.pop(done[0]), *ray.get(done[0]))]
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
            raise WorkerDied(f"a Ray worker failed ({str(e).strip().splitlines()[0][:200]})")

    def close(self):
        [self.ray.kill(actor, no_restart=True) for actor in self.actors]


STATE = (
    "theta",
    "opt_m",
    "opt_v",
    "opt_t",
    "ob_sum",
    "ob_sumsq",
    "ob_count",
    "iteration",
    "episodes",
    "env_steps",
    "wall_time",
)  # what a checkpoint holds, with the policy's shape
TIMERS = ("mutation", "noise", "set_params", "policy_us", "env_us")
COLUMNS = (
    "iteration episodes env_steps wall_time_s return_mean return_std return_min return_max "
    "eval_return_mean eval_return_std steps_per_s length_mean noiseless_return_mean "
    "noiseless_return_std noiseless_length_mean noiseless_count episodes_this_gen "
    "timesteps_this_gen workers skipped_frac obs_count_this_gen obs_count theta_norm "
    "grad_norm update_norm time_gen_s time_update_s"
).split() + [f"time_{name}_{stat}" for name in TIMERS for stat in ("min", "max", "mean")]


class Run:
    """The run directory, the progress line, the snapshots, the workers, how a run ends."""

    def __init__(self, args):
        theta = normc_init(args.sizes, stream(args.seed, INIT))
        check(
            args.noise_size >= theta.size,
            f"--noise-size {args.noise_size} is smaller than the policy's {theta.size} parameters",
        )
        mem = open("/proc/meminfo").read().split() if os.path.exists("/proc/meminfo") else []
        free = (
            int(mem[mem.index("MemAvailable:") + 1]) * 1024 if "MemAvailable:" in mem else math.inf
        )
        check(
            4 * args.noise_size < free,
            f"the noise table needs {4 * args.noise_size / 2**30:.2f}"
            f" GiB and memory has {free / 2**30:.2f} GiB available: lower --noise-size",
        )
        self.state = dict(
            theta=theta,
            opt_m=0 * theta,
            opt_v=0 * theta,
            opt_t=0,
            iteration=0,
            ob_sum=np.zeros(args.sizes[0]),
            ob_sumsq=np.full(args.sizes[0], 1e-2),
            ob_count=1e-2,
            episodes=0,
            env_steps=0,
            wall_time=0.0,
        )
        self.dir, self.args, self.ev, rows = args.resume, args, np.nan, []
        if args.resume:  # the log up to the checkpoint: a resumed run redoes what came after it
            self.state = load_checkpoint(os.path.join(self.dir, "checkpoints", "latest.npz"), args)
            rows = [
                r
                for r in open(os.path.join(self.dir, "progress.csv")).read().splitlines()[1:]
                if int(r.split(",")[0]) <= self.state["iteration"]
            ]
            self.ev = next(
                (float(r.split(",")[8]) for r in rows[::-1] if r.split(",")[8] != "nan"), np.nan
            )  # the last evaluation, shown until the next one
        try:
            if not args.resume:
                self.dir = os.path.join(
                    args.out_dir,
                    f"{args.env}__es_openai__{args.seed}__{datetime.datetime.now():%Y%m%d-%H%M%S}",
                )
                os.makedirs(os.path.join(self.dir, "checkpoints"))
            git = subprocess.run(
                "git rev-parse HEAD",
                shell=True,
                capture_output=True,
                text=True,
                cwd=os.path.dirname(os.path.abspath(__file__)),
            ).stdout.strip()
            cpu = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
            with open(os.path.join(self.dir, "config.json"), "w") as f:
                json.dump(
                    {
                        **vars(args),
                        "script": "es_openai.py",
                        "git_commit": git,
                        "avx512": "avx512f" in cpu,
                        "numpy": np.__version__,
                        "gymnasium": gym.__version__,
                    },
                    f,
                    default=str,
                )  # args.act: its repr
            with open(os.path.join(self.dir, "progress.csv"), "w") as f:
                f.write("\n".join([",".join(COLUMNS), *rows]) + "\n")
            if not args.resume:  # generation 0 is a snapshot too
                save_checkpoint(self.dir, self.state, args, snapshot=True)
        except OSError as e:
            check(False, f"cannot write {e.filename}: {e.strerror} (choose another --out-dir)")
        self.csv, self.t0 = open(f.name, "a"), time.time() - self.state["wall_time"]
        __import__("matplotlib.figure")  # here: a stop that cut this import short breaks every plot
        print(
            f"run directory: {self.dir}  ({theta.size} parameters; the noise table: "
            f"{4 * args.noise_size / 2**30:.2f} GiB)",
            flush=True,
        )
        self.pool = (RayPool if args.ray else Workers)(
            args, noise_table(args.noise_size, args.noise_seed)
        )

    def log(self, state: dict, info: dict, ev):
        a, it, R, L = self.args, state["iteration"], info["returns"], info["lengths"]
        nl, nan = info["noiseless"], np.nan  # nl: the noiseless episodes' (return, length) rows
        ev, state["wall_time"] = np.array([nan]) if ev is None else ev, time.time() - self.t0
        self.ev = self.ev if np.isnan(ev).all() else ev.mean()
        speed = info["steps"] / info["time_gen"]
        print(
            it,
            state["episodes"],
            state["env_steps"],
            round(state["wall_time"], 2),
            R.mean(),
            R.std(),
            R.min(),
            R.max(),
            ev.mean(),
            ev.std() if ev.size > 1 else nan,
            round(speed, 1),
            L.mean(),
            *((nl[:, 0].mean(), nl[:, 0].std(), nl[:, 1].mean()) if len(nl) else (nan,) * 3),
            len(nl),
            L.size + len(nl),
            info["steps"],
            a.workers,
            info["skipped_frac"],
            info["ob_count"],
            state["ob_count"],
            np.linalg.norm(state["theta"]),
            info["grad_norm"],
            info["update_norm"],
            info["time_gen"],
            info["time_update"],
            *(f(info["times"][n]) for n in TIMERS for f in (np.min, np.max, np.mean)),
            sep=",",
            file=self.csv,
            flush=True,
        )
        eta = (a.iterations - it) * state["wall_time"] / it / 60
        print(
            f"gen {it:5d} | eps {state['episodes']:7d} | steps {state['env_steps']:10,d} | "
            f"return {R.mean():8.1f} (max {R.max():7.1f}) | eval {self.ev:7.1f} | {speed:6.0f} "
            f"steps/s | {state['wall_time'] / 60:5.1f} min | ETA {eta:5.1f} min",
            flush=True,
        )
        if (snapshot := it % (a.save_every or math.inf) == 0) or not np.isnan(ev).all():
            save_checkpoint(self.dir, state, a, snapshot)
            plot(self.dir, f"OpenAI ES on {a.env}")

    def end(self, state: dict, status: str) -> dict:
        """The last logged state checkpointed; the workers stopped; the plot; the last line."""
        self.csv.close()
        c, a = state, self.args  # a finished run's last state is a snapshot too
        save_checkpoint(self.dir, state, a, snapshot=status in ("done", "target"))
        self.pool.close()
        best, at = plot(self.dir, f"OpenAI ES on {a.env}") if c["iteration"] else (np.nan, 0)
        done = f"{c['iteration']}: {c['episodes']} episodes, {c['env_steps']} env steps"
        print(
            {
                "target": f"target {a.target_return} reached at generation {done}",
                "done": (
                    f"done, generation {done}"
                    + (
                        f"; the target {a.target_return} was not reached: the "
                        f"best evaluation was {best:.1f}, at generation {at:.0f}"
                        if a.target_return is not None
                        else ""
                    )
                ),
                "diverged": f"NaN or inf after generation {done}; its checkpoint is kept "
                "(a smaller --alpha or --sigma?)",
            }.get(status, f"{status}: resume with  python es_openai.py --resume {self.dir}"),
            file=sys.stdout if status in ("target", "done") else sys.stderr,
        )
        return dict(state, run_dir=self.dir, status=status)


def save_checkpoint(run_dir: str, state: dict, args, snapshot: bool):  # whole, then renamed
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # a stop
    try:  # waits for the files
        for name in ["latest.npz"] + [f"iter_{state['iteration']:06d}.npz"] * (
            snapshot and bool(args.save_every)
        ):
            np.savez(
                tmp := os.path.join(run_dir, "checkpoints", "tmp.npz"),
                **state,
                env=args.env,
                sizes=args.sizes,
                activation=args.activation,
                ac_bins=args.ac_bins,
                obs_norm=args.obs_norm,
            )
            os.replace(tmp, os.path.join(run_dir, "checkpoints", name))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def load_checkpoint(path: str, args) -> dict:  # the state saved by save_checkpoint, checked
    n = args.sizes[0]
    c = read_checkpoint(
        path,
        dict(
            theta=(None, "finite"),
            opt_m=(None, "finite"),
            opt_v=(None, "nonnegative"),
            opt_t=((), "count"),
            ob_sum=((n,), "finite"),
            ob_sumsq=((n,), "nonnegative"),
            ob_count=((), "nonnegative"),
            iteration=((), "count"),
            episodes=((), "count"),
            env_steps=((), "count"),
            wall_time=((), "nonnegative"),
            env=((), "any"),
            sizes=(None, "count"),
            activation=((), "any"),
            obs_norm=((), "any"),
        ),
        args.env,
    )
    saved = (c["sizes"].tolist(), str(c["activation"]), bool(c["obs_norm"]))
    check(
        saved == (args.sizes, args.activation, args.obs_norm),
        f"the checkpoint '{path}' is "
        f"for {saved}, not {(args.sizes, args.activation, args.obs_norm)} (layer sizes, "
        "activation, observation normalization)",
    )
    d = sum(n_in * n_out + n_out for n_in, n_out in zip(args.sizes[:-1], args.sizes[1:]))
    check(
        c["theta"].shape == c["opt_m"].shape == c["opt_v"].shape == (d,),
        f"the checkpoint '{path}' holds theta, opt_m or opt_v not of the policy's {d} parameters",
    )
    return {
        k: c[k].astype(np.float32)
        if k.startswith(("theta", "opt_m", "opt_v"))
        else c[k]
        if k.startswith("ob_s")
        else c[k].item()
        for k in STATE
    }


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
    missing = [name for name in fields if name not in saved]
    check(
        not missing,
        f"'{path}' is no checkpoint of {os.path.basename(__file__)}: it has no "
        + ", ".join(missing),
    )
    check(
        env_id in (None, str(saved["env"])),
        f"the checkpoint '{path}' is for {saved['env']}, not {env_id}",
    )
    for name, (shape, kind) in fields.items():
        x, damaged = saved[name], f"the checkpoint '{path}' is damaged: its {name}"
        check(shape is None or x.shape == shape, f"{damaged} has shape {x.shape}, not {shape}")
        if kind == "count":
            check(x.dtype.kind in "iu" and (x >= 0).all(), f"{damaged} is not an integer >= 0")
        elif kind == "finite":
            check(x.dtype.kind == "f" and np.isfinite(x).all(), f"{damaged} is not finite")
        elif kind == "nonnegative":
            check(
                x.dtype.kind == "f" and np.isfinite(x).all() and (x >= 0).all(),
                f"{damaged} is not finite and >= 0",
            )
    return saved


def read_config(run_dir: str) -> dict:  # config.json of a run directory of es_openai.py
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            by = (cfg := json.load(f)).get("script")
    except (OSError, ValueError, AttributeError):
        by = None
    check(
        by == "es_openai.py",
        f"'{run_dir}' is not a run directory of es_openai.py"
        + (f" but of {by}: use python {by} with it" if by else ""),
    )
    return cfg


def plot(run_dir: str, title: str) -> tuple:  # progress.png; returns the best evaluation
    from matplotlib.figure import Figure

    c = np.atleast_1d(np.genfromtxt(f"{run_dir}/progress.csv", delimiter=",", names=True))
    ev, ax = c["eval_return_mean"], (fig := Figure((7, 4), layout="tight")).subplots()
    ok = ~np.isnan(ev)
    ax.fill_between(c["env_steps"], c["return_min"], c["return_max"], alpha=0.2, label="range")
    ax.plot(c["env_steps"], c["return_mean"], label="training (mean)")
    ax.plot(c["env_steps"][ok], ev[ok], "o-", label="evaluation (mean)")
    ax.set(xlabel="environment steps", ylabel="return", title=title)
    ax.legend(loc="lower right")
    fig.savefig(os.path.join(run_dir, "progress.png"), dpi=90)
    return (np.nanmax(ev), c["iteration"][np.nanargmax(ev)]) if ok.any() else (np.nan, 0)


def write_gif(args, state: dict, path: str) -> str:
    """Evaluation episode 0 of --play as a GIF, every second frame at half size."""
    from PIL import Image  # comes with matplotlib

    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame draws without a display
    os.environ.setdefault("MUJOCO_GL", "glfw" if os.environ.get("DISPLAY") else "egl")
    task, frames = task_of(state, args), []
    policy = Policy(
        [task["theta"]],
        args.sizes,
        args.activation,
        args.act,
        args.ac_bins,
        task["ob_mean"],
        task["ob_std"],
        task["ob_clip"],
    )
    rollouts(
        [make_env(args.env, args.episode_length, render=True)],
        policy,
        [int(stream(args.seed, EVAL, 10**6, 0).integers(2**31))],
        frames=frames,
    )
    images = [Image.fromarray(f[::2, ::2]) for f in frames]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=80, loop=0)
    return path


def play(args):  # --play RUN_DIR or one snapshot file, --evaluate-snapshots RUN_DIR
    path = args.evaluate_snapshots if args.play is None else args.play  # its options, policies
    run_dir = os.path.abspath(os.path.join(path, "../..")) if path.endswith(".npz") else path
    vars(args).update(
        {
            k: v
            for k, v in read_config(run_dir).items()
            if k in ("env", "hidden", "activation", "ac_bins", "obs_norm", "episode_length")
        }
    )
    args.ac_noise_std, args.episodes = 0.0, args.episodes or 10
    configure(args)
    folder = os.path.join(run_dir, "checkpoints")
    names = (
        [path]
        if path.endswith(".npz")
        else [os.path.join(folder, "latest.npz")]
        if args.play
        else sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.startswith("iter_"))
        if os.path.isdir(folder)
        else []
    )
    check(names, f"'{run_dir}' has no snapshots (checkpoints/iter_*.npz)")
    states = [load_checkpoint(name, args) for name in names]
    if args.video:
        print(f"video: {write_gif(args, states[0], f'{run_dir}/video/{args.env}.gif')}")
    pool, table = Workers(args, np.zeros(1, np.float32)), []
    try:
        for s in states:  # the same episodes for every snapshot
            R = evaluate(pool, s, args, args.episodes, 10**6)
            table.append([s["iteration"], s["env_steps"], R.mean(), R.std(), R.min(), R.max()])
            print(
                f"{args.env}: mean return {R.mean():.1f} +- {R.std():.1f} over {args.episodes} "
                f"episodes (min {R.min():.1f}, max {R.max():.1f}), policy of generation "
                f"{s['iteration']}",
                flush=True,
            )
    finally:
        pool.close()
    if args.evaluate_snapshots:
        from matplotlib.figure import Figure

        t = np.array(table)
        np.savetxt(
            f"{run_dir}/snapshots.csv",
            t,
            delimiter=",",
            comments="",
            fmt="%.17g",
            header="iteration,env_steps,return_mean,return_std,return_min,return_max",
        )
        ax = (fig := Figure((7, 4), layout="tight")).subplots()
        ax.errorbar(t[:, 0], t[:, 2], yerr=t[:, 3], fmt="o-", capsize=3)
        ax.set(
            xlabel="generation",
            ylabel=f"return over {args.episodes} episodes (+- std)",
            title=os.path.basename(os.path.normpath(run_dir)),
        )
        fig.savefig(f"{run_dir}/snapshots.png", dpi=90)
        print(f"wrote {run_dir}/snapshots.csv and snapshots.png")
    return R if args.play else table


def main(argv=None):
    with contextlib.suppress(ImportError):  # MuJoCo 3.3+ warns of gymnasium's settotalmass, into
        __import__("mujoco").set_mju_user_warning(
            lambda m: (
                "settotalmass" in m
                or print(  # a file
                    f"MuJoCo warning: {m.strip()}", file=sys.stderr
                )
            )
        )  # in the current folder too
    args = build_parser().parse_args(argv)
    modes = [m for m in ("resume", "play", "evaluate_snapshots") if getattr(args, m) is not None]
    check(len(modes) < 2, f"--{' and --'.join(modes).replace('_', '-')}: one at a time")
    playing = args.play is not None or args.evaluate_snapshots is not None
    check(args.play is not None or not args.video, "--video goes with --play RUN_DIR")
    check(playing or not args.episodes, "--episodes goes with --play or --evaluate-snapshots")
    check(not playing or not (args.ray or args.ray_address), "--ray is for training, not --play")
    try:
        result = play(args) if playing else train(configure(args))
    except OSError as e:  # a --video folder that takes no file, a disk full (the checkpoints stay)
        check(False, f"cannot write {e.filename}: {e.strerror}")
    except KeyboardInterrupt:  # during --play, or while a run starts
        sys.exit(130)
    if playing or result["status"] in ("done", "target"):
        return result
    sys.exit(130 if result["status"] == "interrupted" else 1)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops a run like Ctrl-C
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even in a job started with '&'
    main()
