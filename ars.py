"""Augmented Random Search (ARS V1, V2, V1-t, V2-t) for continuous control.

Mania, Guy & Recht (2018), "Simple random search provides a competitive approach to
reinforcement learning", https://arxiv.org/abs/1803.07055. The math, line by line, is in
docs/ars.md; comments below cite its equations as "Eq. (n)".

    python ars.py --env BipedalWalker-v3          # train with the environment's preset
    python ars.py --play runs/<run-dir> --episodes 100 --video
"""
import argparse
import csv
import datetime
import difflib
import errno
import functools
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
from typing import NamedTuple

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one BLAS thread per process: workers own the cores
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
import numpy as np  # noqa: E402

# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------

# alpha: step size, nu: exploration noise, N: directions, b: top directions, shift: survival bonus
# subtracted from every training reward, version: 1 (M x) or 2 (M (x - mu) / sigma).
# MuJoCo rows: RL Baselines3 Zoo's ARS settings and the official ARS code's Humanoid defaults
# (docs/ars.md, "Presets", gives each source), with an iteration budget of several times the
# paper's average to the threshold.
PRESETS = {
    "Swimmer-v5": dict(alpha=0.02, nu=0.01, n_directions=1, top_b=1, shift=0.0, version=1, iterations=1000),
    "Hopper-v5": dict(alpha=0.01, nu=0.025, n_directions=8, top_b=4, shift=1.0, version=2, iterations=1000),
    "HalfCheetah-v5": dict(alpha=0.02, nu=0.03, n_directions=32, top_b=4, shift=0.0, version=2, iterations=300),
    "Walker2d-v5": dict(alpha=0.03, nu=0.025, n_directions=40, top_b=30, shift=1.0, version=2, iterations=1500),
    "Ant-v5": dict(alpha=0.015, nu=0.025, n_directions=60, top_b=20, shift=1.0, version=2, iterations=1000),
    "Humanoid-v5": dict(alpha=0.02, nu=0.0075, n_directions=230, top_b=230, shift=5.0, version=2,
                        iterations=1000),
    # Tuned in this repository (docs/ars.md, "BipedalWalker-v3"). Every reward is clipped to
    # [-10, 10]: only a fall (-100) is touched, and costs 10. Clipping at 1 (the trick of C. Skow's
    # ARS tutorial, github.com/colinskow/move37) makes falls nearly free, and walkers that still fall
    # now and then stall below 300; without clipping, falls dominate sigma_R and it learns to stand.
    # N = 32, b = 16 (not 16, 8): one rollout's chance fall weighs half as much in Eq. (5), which
    # shortened the plateau at 220-290 where the walker still falls in some episodes.
    # The run stops once a 20-episode evaluation reaches 300 (a screen) and 100 fresh episodes
    # confirm gymnasium's "solved": a mean of at least 300 over 100 episodes. The screen only
    # decides when to ask; a screen at 310 skipped policies that pass (docs/ars.md, "Why the screen is at 300").
    "BipedalWalker-v3": dict(alpha=0.02, nu=0.03, n_directions=32, top_b=16, shift=0.0, version=2,
                             reward_clip=10.0, iterations=1000, eval_every=10, eval_episodes=20,
                             target_return=300.0, confirm_episodes=100, confirm_return=300.0),
}
GENERIC = dict(alpha=0.02, nu=0.03, n_directions=16, top_b=8, shift=0.0, version=2,
               reward_clip=0.0, actions="clipped", iterations=300, eval_every=10, eval_episodes=10, confirm_episodes=0,
               nu_late=0.0, nu_late_from=0.0)


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
        prog="ars.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Augmented Random Search (Mania et al. 2018) with a linear policy.",
        epilog="presets (any flag overrides its preset; other environments use the generic row):\n"
        + "\n".join(f"  {k:17s} " + ", ".join(f"{a}={v}" for a, v in d.items())
                    for k, d in list(PRESETS.items()) + [("(generic)", GENERIC)]))
    a = p.add_argument
    a("--env", default="BipedalWalker-v3", help="gymnasium id with a Box action space")
    a("--seed", type=int, default=0, help="decides every random number of the run")
    a("--iterations", type=int, help="T, number of updates of M (preset)")
    a("--alpha", type=float, help="α, step size (typ. 0.01-0.03)")
    a("--nu", type=float, help="ν, std of the exploration noise (typ. 0.0075-0.03)")
    a("--nu-late", type=float, help="ν from the first evaluation whose mean reaches --nu-late-from on "
      "(0: --nu throughout, the paper's way)")
    a("--nu-late-from", type=float, help="R, the evaluation mean that switches ν to --nu-late (default 0)")
    a("--n-directions", type=int, help="N, directions sampled per iteration (typ. 1-230)")
    a("--top-b", type=int, help="b, best directions kept, b <= N (b = N: V1/V2, b < N: -t)")
    a("--version", type=int, choices=(1, 2), help="1: a = M x; 2: a = M (x - mu) / sigma")
    a("--shift", type=float, help="survival bonus subtracted from training rewards (typ. 0-5)")
    a("--reward-clip", type=float, help="clip training rewards to [-c, c]; 0 turns it off")
    a("--actions", choices=("clipped", "raw"), help="clipped: a = M x clipped to the action space "
      "(default); raw: sent unclipped, as the official code (MuJoCo clamps the control but charges "
      "its control cost on the raw action)")
    a("--episode-length", type=int, help="H, steps per episode (default: the env's time limit)")
    a("--workers", type=int, help="rollout processes (default: all cores; with --ray, the cluster's CPUs)")
    a("--out-dir", default="runs", help="where run directories are created")
    a("--eval-every", type=int, help="evaluate the noiseless policy every K iterations (preset)")
    a("--eval-episodes", type=int, help="episodes per evaluation (preset)")
    a("--save-every", type=int, default=10, help="checkpoint every K iterations")
    a("--target-return", type=float, help="stop once the evaluation mean reaches R")
    a("--confirm-episodes", type=int, help="K: before stopping at the target, evaluate K fresh episodes "
      "(0: no confirmation)")
    a("--confirm-return", type=float, help="the mean the K episodes must reach (default: the target)")
    a("--resume", metavar="RUN_DIR", help="continue the run saved in RUN_DIR")
    a("--play", metavar="RUN_DIR", help="evaluate the policy saved in RUN_DIR and exit")
    a("--episodes", type=int, default=10, help="episodes for --play")
    a("--video", action="store_true", help="with --play: write RUN_DIR/video/<env>.gif of one episode")
    a("--ray", action="store_true", help="run the rollouts on Ray: start one on this machine, or join "
      "RAY_ADDRESS or --ray-address (pip install ray)")
    a("--ray-address", metavar="ADDRESS", help="with --ray: an existing cluster, e.g. 10.0.0.1:6379 or auto")
    return p


MAX_EPISODES = 10**6  # per evaluation or iteration: more is a typo, and its bookkeeping would fill the memory
PLOT_EVERY = 10.0  # seconds: progress.png is redrawn at most this often during a run (a plot costs the master
#                    about 0.2 s while the workers wait), and once more at the end


class UserError(Exception):
    """A mistake in the command line or the files it names: one line, exit status 2."""


def resolve_config(args: argparse.Namespace) -> argparse.Namespace:
    """Fill unset flags from the environment's preset, then check that they make sense."""
    for key, value in {**GENERIC, **PRESETS.get(args.env, {})}.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    finite = all(math.isfinite(v) for v in (args.alpha, args.nu, args.shift, args.reward_clip, args.nu_late,
                                             args.nu_late_from))
    checks = [(finite, "--alpha, --nu, --nu-late, --nu-late-from, --shift and --reward-clip must be finite numbers"),
              (args.seed >= 0, "--seed must be 0 or more"),
              (args.alpha > 0, "--alpha must be positive"), (args.nu > 0, "--nu must be positive"),
              (args.n_directions >= 1, "--n-directions must be at least 1"),
              (1 <= args.top_b <= args.n_directions,
               f"--top-b must be between 1 and --n-directions ({args.n_directions}), got {args.top_b}"),
              (args.workers is None or args.workers >= 1, "--workers must be at least 1"),
              (args.ray or not args.ray_address, "--ray-address needs --ray"),
              (args.iterations >= 0, "--iterations must be at least 0"),
              (args.eval_every >= 1 and args.eval_episodes >= 1 and args.save_every >= 1,
               "--eval-every, --eval-episodes and --save-every must be at least 1"),
              (args.episodes >= 1, "--episodes must be at least 1"),
              (max(args.episodes, args.eval_episodes, args.confirm_episodes, args.n_directions) <= MAX_EPISODES,
               f"--episodes, --eval-episodes, --confirm-episodes and --n-directions must be at most {MAX_EPISODES:,}"),
              (args.confirm_episodes >= 0, "--confirm-episodes must be 0 or more"),
              (args.reward_clip >= 0, "--reward-clip must be 0 (off) or positive"),
              (args.nu_late >= 0, "--nu-late must be 0 (off) or positive"),
              (args.nu_late or not args.nu_late_from, "--nu-late-from goes with --nu-late"),
              (not any(v is not None and math.isnan(v) for v in (args.target_return, args.confirm_return)),
               "--target-return and --confirm-return must be numbers, not nan"),
              (args.episode_length is None or args.episode_length >= 1, "--episode-length must be at least 1")]
    for ok, message in checks:
        if not ok:
            raise UserError(message)
    if args.confirm_return is None:
        args.confirm_return = args.target_return
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


def exit_with_master():
    """In a worker: end this process when the master is gone, even killed with SIGKILL (then no
    'stop' comes, and a pipe end inherited by a sibling worker would keep recv() waiting forever)."""
    master = os.getppid()

    def watch():
        while os.getppid() == master:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def check_env(env_id: str, episode_length=None):
    """Return (obs_dim, act_dim) or raise UserError with what to do instead."""
    import gymnasium as gym
    if env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.5)
        raise UserError(f"unknown environment '{env_id}'" + (f"; did you mean {', '.join(close)}?" if close else
                        "; see gymnasium.registry for the registered ids"))
    try:
        env = gym.make(env_id)
    except Exception as e:  # a missing extra (box2d, mujoco) or a broken install
        raise UserError(f"cannot create '{env_id}': {str(e).splitlines()[0]}") from None
    obs_space, act_space = env.observation_space, env.action_space
    env.close()
    if not isinstance(act_space, gym.spaces.Box):
        raise UserError(f"'{env_id}' has {type(act_space).__name__} actions; ARS needs continuous (Box) "
                        "actions: try es_basic.py for discrete ones")
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise UserError(f"'{env_id}' observations must be a flat Box vector, got {obs_space}")
    if gym.spec(env_id).max_episode_steps is None and not episode_length:
        raise UserError(f"'{env_id}' has no time limit: give --episode-length")
    return obs_space.shape[0], act_space.shape[0]


# ----------------------------------------------------------------------------------------------
# The math (docs/ars.md, Eqs. 1-6)
# ----------------------------------------------------------------------------------------------

def stream(seed: int, *key: int) -> np.random.Generator:
    """An independent random stream named by what it is for: key = (purpose, iteration, index)."""
    return np.random.default_rng(np.random.SeedSequence([seed, *key]))


TRAIN, TRAIN_ENV, EVAL = 0, 1, 2  # first word of a stream key: what the stream is for


def sample_direction(seed: int, iteration: int, k: int, shape: tuple) -> np.ndarray:
    """delta_k ~ N(0, I) with the shape of M; master and worker regenerate it from its name
    (deviation: the official code reads it from a shared noise table instead)."""
    return stream(seed, TRAIN, iteration, k).standard_normal(shape)  # (p, n)


def select_top_b(r_plus: np.ndarray, r_minus: np.ndarray, b: int) -> np.ndarray:
    """Eq. (4): indices of the b directions with the largest max(r+, r-), best first (the official
    code keeps those above a percentile instead, which can keep more than b when returns tie)."""
    return np.argsort(-np.maximum(r_plus, r_minus), kind="stable")[:b]


def ars_update(M: np.ndarray, direction, r_plus: np.ndarray, r_minus: np.ndarray,
               alpha: float, b: int) -> tuple:
    """Eqs. (4)-(5): M + alpha / (b sigma_R) sum_{k in top b} (r+_k - r-_k) delta_k, Eq. (1)'s
    mirrored-difference estimate of the gradient with its changes. direction(k) gives delta_k; it
    is called for the top b only, so the master never holds all N directions (N may be far larger
    than b). Returns (new M, sigma_R)."""
    top = select_top_b(r_plus, r_minus, b)
    sigma_R = float(np.concatenate([r_plus[top], r_minus[top]]).std())  # ddof 0, as the official code
    if not sigma_R > 0:  # all 2b returns equal: no direction is better, take no step
        return M.copy(), sigma_R
    deltas = np.stack([direction(k) for k in top])  # (b, p, n), best first
    step = np.tensordot(r_plus[top] - r_minus[top], deltas, axes=1)  # (p, n)
    return M + alpha / (b * sigma_R) * step, sigma_R


def merge_stats(a: tuple, b: tuple) -> tuple:
    """Eq. (6): Chan et al.'s parallel merge of (count, mean, m2) where m2 = sum (x - mean)^2."""
    (na, mean_a, m2_a), (nb, mean_b, m2_b) = a, b
    n = na + nb
    if n == 0:
        return a
    d = mean_b - mean_a
    return n, mean_a + d * (nb / n), m2_a + m2_b + d * d * (na * nb / n)


def batch_stats(x: np.ndarray) -> tuple:
    """(count, mean, m2) of the rows of x."""
    mean = x.mean(axis=0)
    return x.shape[0], mean, ((x - mean) ** 2).sum(axis=0)


def normalizer(stats: tuple, version: int):
    """(mu, 1/sigma) of Eq. (2); V1 and fewer than 2 states give the identity. Near-constant
    features get 1/sigma = 0 instead of a huge gain (the official code does the same with
    sigma = inf below 1e-7; it also uses the n - 1 variance, a negligible difference)."""
    n, mean, m2 = stats
    if version == 1 or n < 2:
        return np.zeros_like(mean), np.ones_like(mean)
    std = np.sqrt(m2 / n)
    return mean, np.where(std < 1e-8, 0.0, 1.0 / np.maximum(std, 1e-8))


# ----------------------------------------------------------------------------------------------
# The policy and the rollouts
# ----------------------------------------------------------------------------------------------

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


class Episode(NamedTuple):
    """What a rollout returns: the shaped return (shift, clipping) is what the update sees; the
    plain return is what is reported. Workers send it as a plain tuple and the master names it
    again with Episode(*t): through Ray, a class of a script run as __main__ would travel with its
    whole definition, some 4 kB per result."""
    ret: float  # sum of the rewards
    shaped: float  # sum of the shaped rewards (Eq. 3)
    length: int  # env steps
    stats: tuple  # (count, mean, m2) of the states acted on (Eq. 6), or None


def rollout(env, M: np.ndarray, mu: np.ndarray, inv_sigma: np.ndarray, env_seed: int,
            shift: float = 0.0, reward_clip: float = 0.0, keep_obs: bool = False, frames=None,
            clip_actions: bool = True) -> Episode:
    """One episode of a = clip(M (x - mu) / sigma) (Eq. 2), with the statistics of its states if keep_obs;
    clip_actions=False sends M (x - mu) / sigma as it is (--actions raw)."""
    W = M * inv_sigma  # fold the normalization into the matrix: a = W x - W mu, one product per step
    offset = -W @ mu
    # The bounds in float64, as a is: gymnasium's are float32, and np.maximum of a float64 and a float32 array
    # costs nearly twice as much as of two float64 ones (docs/ars.md, Throughput).
    low, high = env.action_space.low.astype(np.float64), env.action_space.high.astype(np.float64)
    if not clip_actions:
        low, high = np.full_like(low, -np.inf), np.full_like(high, np.inf)
    dot, add, maximum, minimum, step = np.dot, np.add, np.maximum, np.minimum, env.step  # looked up once
    x, _ = reset_env(env, env_seed)
    observed = [x] if keep_obs else None
    total, shaped, steps = 0.0, 0.0, 0
    while True:
        # a = W x + offset, then clipped. Deviation: actions are clipped to the bounds; the official code
        # sends the raw action (MuJoCo clips it too, but charges its control cost on the unclipped
        # value), as --actions raw does with bounds of -inf, inf (docs/record/ars.md, "Clipped or raw actions").
        # This is the hot path: one new array per step, the rest written into it, the same values as
        # np.clip(W @ x + offset, low, high) in fewer calls (docs/ars.md, Throughput).
        a = dot(W, x)
        add(a, offset, out=a)
        maximum(a, low, out=a)
        minimum(a, high, out=a)
        x, r, terminated, truncated, _ = step(a)
        steps += 1
        total += r
        # Eq. (3)'s shaped reward. Deviation: the clip is this repository's option (the BipedalWalker
        # preset's); neither the paper nor the official code clips rewards. The shift is the paper's.
        shaped += (max(-reward_clip, min(reward_clip, r)) if reward_clip else r) - shift
        if frames is not None:
            frames.append(env.render())
        if terminated or truncated:
            break
        if keep_obs:  # the state the next action sees; the terminal one is never acted on (as the official code)
            observed.append(x)
    stats = batch_stats(np.asarray(observed, dtype=np.float64)) if keep_obs else None
    return Episode(float(total), float(shaped), steps, stats)


class Rollouts:
    """What every worker holds, a local process or a Ray actor: one environment and the current
    iteration's parameters. Jobs are named (kind, index) and regenerate their own randomness, so
    any worker computes the same result for the same job."""

    def __init__(self, env_id: str, episode_length, seed: int, shift: float, reward_clip: float,
                 clip_actions: bool = True):
        self.env_id, self.episode_length, self.seed = env_id, episode_length, seed
        self.shift, self.reward_clip, self.env, self.params = shift, reward_clip, None, None
        self.clip_actions = clip_actions

    def set_params(self, iteration: int, M, mu, inv_sigma, nu: float):
        self.params = (iteration, M, mu, inv_sigma, nu)

    def job(self, kind: str, index: int) -> tuple:
        """("train", k): the mirrored pair of direction k (Eq. 3); ("eval", i): evaluation episode i,
        noiseless, unshifted, unclipped, and never seen by the normalizer. Returns scalars and
        statistics only."""
        iteration, M, mu, inv_sigma, nu = self.params
        self.env = self.env or make_env(self.env_id, self.episode_length)
        if kind == "train":
            delta = sample_direction(self.seed, iteration, index, M.shape)
            env_seed = int(stream(self.seed, TRAIN_ENV, iteration, index).integers(2**31))
            # Both rollouts of the pair on the same env_seed (Eq. 3; the official code does not reseed).
            plus = rollout(self.env, M + nu * delta, mu, inv_sigma, env_seed, self.shift, self.reward_clip,
                           keep_obs=True, clip_actions=self.clip_actions)
            minus = rollout(self.env, M - nu * delta, mu, inv_sigma, env_seed, self.shift, self.reward_clip,
                            keep_obs=True, clip_actions=self.clip_actions)
            return "train", index, tuple(plus), tuple(minus)  # plain tuples: see Episode
        env_seed = int(stream(self.seed, EVAL, iteration, index).integers(2**31))
        return "eval", index, tuple(rollout(self.env, M, mu, inv_sigma, env_seed, clip_actions=self.clip_actions))


def worker_main(conn, *config):
    """A persistent rollout process: receives the matrix and normalizer once per iteration, then
    direction indices or evaluation episode numbers; sends back scalars and statistics only."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the master's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the master's SIGTERM handler is not for workers
    exit_with_master()
    worker = Rollouts(*config)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the master closed the pipe
            return
        if msg[0] == "stop":
            return
        if msg[0] == "params":
            worker.set_params(*msg[1:])
            continue
        try:
            conn.send(worker.job(*msg))
        except Exception as e:  # the environment failed: tell the master instead of dying silently
            conn.send(("error", msg[1], f"{type(e).__name__}: {e}"))


class WorkerPool:
    """Worker processes started once per run; jobs are handed out one at a time to whichever
    worker is free, so long and short episodes balance out across cores."""

    def __init__(self, workers: int, env_id: str, episode_length, seed: int, shift: float, reward_clip: float,
                 clip_actions: bool = True):
        ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        self.conns, self.procs = [], []
        for _ in range(workers):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker_main, daemon=True,
                               args=(child, env_id, episode_length, seed, shift, reward_clip, clip_actions))
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)

    @staticmethod
    def send(conn, msg: tuple):
        try:
            conn.send(msg)
        except (BrokenPipeError, ConnectionResetError):  # a worker that died while it waited
            raise RuntimeError("a worker process died; the run stops (resume from the last "
                               "checkpoint with --resume)") from None

    def run(self, iteration: int, M, mu, inv_sigma, nu: float, jobs: list) -> dict:
        """Broadcast the parameters, run every (kind, index) job, return {index: result}."""
        for conn in self.conns:
            self.send(conn, ("params", iteration, M, mu, inv_sigma, nu))
        pending, results, busy = list(reversed(jobs)), {}, 0
        for conn in self.conns:
            if pending:
                self.send(conn, pending.pop())
                busy += 1
        while busy:
            for conn in mp.connection.wait(self.conns):
                try:
                    kind, index, *out = conn.recv()
                except (EOFError, ConnectionResetError):
                    raise RuntimeError("a worker process died; the run stops (resume from the last "
                                       "checkpoint with --resume)") from None
                if kind == "error":
                    raise RuntimeError(f"a rollout failed in a worker: {out[0]}")
                results[index] = out
                busy -= 1
                if pending:
                    self.send(conn, pending.pop())
                    busy += 1
        return results

    def close(self):
        for conn, proc in zip(self.conns, self.procs):
            try:
                conn.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
            proc.join(timeout=1)
            if proc.is_alive():
                proc.terminate()
                proc.join()


# ----------------------------------------------------------------------------------------------
# Ray: the same rollouts on a cluster (--ray; docs/ars.md, "Scaling out")
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


class RayRollouts(Rollouts):
    """The Ray actor: Rollouts whose parameters travel by reference with every job and are fetched
    from the node's object store once per publication. An actor that Ray restarted after a crash
    has none yet and fetches them again."""

    def __init__(self, *config):
        super().__init__(*config)
        self.published = None  # which publication of the parameters this actor holds

    def run(self, published: int, params: list, kind: str, index: int) -> tuple:
        if self.published != published:
            import ray
            self.set_params(*ray.get(params[0]))  # params = [ref]: a bare ref would be fetched per job
            self.published = published
        return self.job(kind, index)

    def where(self) -> tuple:
        """(process id, node id) of this actor: for the tests."""
        import ray
        return os.getpid(), ray.get_runtime_context().get_node_id()


class RayPool:
    """The WorkerPool's interface on Ray actors: one actor per worker, started once per run and
    spread over the nodes. Each iteration puts the parameters into the object store once; a job
    sends (publication, reference, kind, index) and gets back what a local worker sends. Ray
    restarts an actor whose process or node is lost and runs its unfinished jobs again: every job
    names its own randomness, so the results do not change."""

    retries = 3  # restarts per actor, and retries per job, before the run stops with an error
    timeout = 300.0  # seconds without any result (e.g. a lost node and no free CPU to replace it)

    def __init__(self, workers: int, env_id: str, episode_length, seed: int, shift: float, reward_clip: float,
                 clip_actions: bool = True):
        self.ray = ray = start_ray()
        actor = ray.remote(num_cpus=1, max_restarts=self.retries, max_task_retries=self.retries)(RayRollouts)
        self.actors = [actor.options(scheduling_strategy="SPREAD").remote(env_id, episode_length, seed, shift,
                                                                          reward_clip, clip_actions)
                       for _ in range(workers)]
        self.published = 0

    def run(self, iteration: int, M, mu, inv_sigma, nu: float, jobs: list) -> dict:
        """Same as WorkerPool.run: every (kind, index) job, returned as {index: result}."""
        ray, self.published = self.ray, self.published + 1
        params, pending, inflight, results = [ray.put((iteration, M, mu, inv_sigma, nu))], list(reversed(jobs)), {}, {}

        def submit(actor):
            inflight[actor.run.remote(self.published, params, *pending.pop())] = actor

        for actor in self.actors * 2:  # two jobs queued per actor hide the round trip between them
            if pending:
                submit(actor)
        while inflight:
            done, _ = ray.wait(list(inflight), num_returns=1, timeout=self.timeout)
            if not done:
                raise RuntimeError(f"no result from the Ray workers in {self.timeout:.0f} s (a node lost and no "
                                   "free CPU to restart its workers?); resume with --resume")
            actor = inflight.pop(done[0])
            try:
                kind, index, *out = ray.get(done[0])
            except ray.exceptions.RayActorError as e:
                raise RuntimeError(f"a Ray worker was lost and its {self.retries} restarts are used up ("
                                   f"{str(e).strip().splitlines()[0][:200]}); the run stops (resume from the last "
                                   "checkpoint with --resume)") from None
            except ray.exceptions.RayTaskError as e:
                raise RuntimeError(f"a rollout failed in a Ray worker: {type(e.cause).__name__}: {e.cause}") from None
            results[index] = out
            if pending:
                submit(actor)
        return results

    def close(self):
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)


# ----------------------------------------------------------------------------------------------
# Run directory: config, progress.csv, checkpoints, plot (shared with the other scripts)
# ----------------------------------------------------------------------------------------------

SHARED_COLUMNS = ["iteration", "episodes", "env_steps", "wall_time_s", "return_mean", "return_std",
                  "return_min", "return_max", "eval_return_mean", "eval_return_std", "steps_per_s"]
COLUMNS = SHARED_COLUMNS + ["sigma_R", "step_norm", "M_norm", "mean_length", "obs_count", "confirm_return_mean"]


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

def evaluate(pool: WorkerPool, iteration: int, M, stats, args, episodes: range) -> np.ndarray:
    """Plain returns of the noiseless policy on evaluation episodes `episodes` of this iteration."""
    mu, inv_sigma = normalizer(stats, args.version)
    out = pool.run(iteration, M, mu, inv_sigma, args.nu, [("eval", i) for i in episodes])
    return np.array([Episode(*out[i][0]).ret for i in episodes])


def target_reached(pool: WorkerPool, state: dict, ev: np.ndarray, args) -> tuple:
    """(reached, confirmation returns): the evaluation mean reached --target-return and, with
    --confirm-episodes K, K fresh evaluation episodes reach --confirm-return too."""
    confirm = np.array([np.nan])
    if args.target_return is None or np.isnan(ev).all() or ev.mean() < args.target_return:
        return False, confirm
    if not args.confirm_episodes:
        return True, confirm
    first = args.eval_episodes  # fresh episodes: the luck that passed the screen does not count twice
    confirm = evaluate(pool, state["iteration"], state["M"], state["stats"], args,
                       range(first, first + args.confirm_episodes))
    print(f"confirmation at iteration {state['iteration']}: {confirm.mean():.1f} +- {confirm.std():.1f} over "
          f"{args.confirm_episodes} fresh episodes (needs {args.confirm_return})", flush=True)
    return confirm.mean() >= args.confirm_return, confirm


def checkpoint(run_dir: str, state: dict, args):
    arrays = dict(state, env=np.array(args.env), obs_count=np.array(state["stats"][0]),
                  obs_mean=state["stats"][1], obs_m2=state["stats"][2])
    del arrays["stats"]
    name = os.path.join(run_dir, "checkpoints", f"iter_{state['iteration']:06d}.npz")
    save_npz_atomic(name, **arrays)
    save_npz_atomic(os.path.join(run_dir, "checkpoints", "latest.npz"), **arrays)


def load_state(run_dir: str, args, obs_dim: int, act_dim: int) -> dict:
    ck = load_npz(os.path.join(run_dir, "checkpoints", "latest.npz"))
    need = {"M", "env", "iteration", "episodes", "env_steps", "wall_time", "obs_count", "obs_mean", "obs_m2"}
    if not need <= set(ck):
        raise UserError(f"'{run_dir}' checkpoint lacks {sorted(need - set(ck))}; it is not from ars.py")
    if str(ck["env"]) != args.env:
        raise UserError(f"the checkpoint in '{run_dir}' is for {ck['env']}, not {args.env}")
    if ck["M"].shape != (act_dim, obs_dim) or ck["obs_mean"].shape != (obs_dim,):
        raise UserError(f"the checkpoint's policy has shape {ck['M'].shape}, {args.env} needs {(act_dim, obs_dim)}")
    if ck["obs_m2"].shape != (obs_dim,) or any(ck[k].size != 1 for k in need - {"M", "obs_mean", "obs_m2"}):
        raise UserError(f"the checkpoint in '{run_dir}' is corrupt (its statistics or counters have the wrong shape)")
    if not all(np.isfinite(ck[k]).all() for k in ("M", "obs_mean", "obs_m2", "wall_time")):
        raise UserError(f"the checkpoint in '{run_dir}' holds NaN or inf, which no run saves: it is damaged")
    return {"M": ck["M"], "iteration": int(ck["iteration"]), "episodes": int(ck["episodes"]),
            "env_steps": int(ck["env_steps"]), "wall_time": float(ck["wall_time"]),
            "stats": (int(ck["obs_count"]), ck["obs_mean"], ck["obs_m2"])}


def ars_iteration(pool: WorkerPool, state: dict, args, nu: float = None) -> tuple:
    """One iteration of Algorithm 2 (docs/ars.md, "Pseudocode"): N mirrored pairs, the update of
    M from the top b, then the merge of the observation statistics. Returns (new state, info).
    nu: the ν of Eq. (3) for this iteration (default --nu; see Run.nu for --nu-late)."""
    j, M, stats, N = state["iteration"], state["M"], state["stats"], args.n_directions
    nu = args.nu if nu is None else nu
    t0 = time.time()
    mu, inv_sigma = normalizer(stats, args.version)  # frozen for the whole iteration (Eq. 2)
    out = pool.run(j, M, mu, inv_sigma, nu, [("train", k) for k in range(N)])  # Eq. (3)
    plus, minus = [Episode(*out[k][0]) for k in range(N)], [Episode(*out[k][1]) for k in range(N)]
    direction = functools.partial(sample_direction, args.seed, j, shape=M.shape)  # k -> delta_k, regenerated
    r_plus, r_minus = np.array([e.shaped for e in plus]), np.array([e.shaped for e in minus])
    M_new, sigma_R = ars_update(M, direction, r_plus, r_minus, args.alpha, args.top_b)  # Eqs. (4)-(5)
    for k in range(N):  # Eq. (6), in direction order: any worker count gives the same bits
        stats = merge_stats(merge_stats(stats, plus[k].stats), minus[k].stats)
    returns = np.array([e.ret for e in plus + minus])  # plain returns, for the log
    lengths = np.array([e.length for e in plus + minus])
    new = {"M": M_new, "iteration": j + 1, "episodes": state["episodes"] + 2 * N,
           "env_steps": state["env_steps"] + int(lengths.sum()), "stats": stats}
    finite = all(np.isfinite(a).all() for a in (returns, M_new, stats[1], stats[2]))
    return new, dict(returns=returns, lengths=lengths, sigma_R=sigma_R, step_norm=np.linalg.norm(M_new - M),
                     train_time=time.time() - t0, finite=finite)


def start_run(args, obs_dim: int, act_dim: int) -> tuple:
    """A new run directory with M_0 = 0, or the state and log of the run to resume."""
    if args.resume is not None:
        state = load_state(args.resume, args, obs_dim, act_dim)
        try:
            rows = [r for r in read_csv_rows(os.path.join(args.resume, "progress.csv"), COLUMNS)
                    if int(r[0]) <= state["iteration"]]
        except (OSError, ValueError):
            raise UserError(f"the progress.csv of '{args.resume}' is missing or damaged") from None
        return args.resume, state, rows
    state = {"M": np.zeros((act_dim, obs_dim)), "iteration": 0, "episodes": 0, "env_steps": 0,
             "wall_time": 0.0, "stats": (0, np.zeros(obs_dim), np.zeros(obs_dim))}
    return make_run_dir(args.out_dir, args.env, "ars", args.seed), state, []


def evaluate_if_due(pool: WorkerPool, state: dict, args) -> np.ndarray:
    """Every --eval-every iterations and at the last one: evaluate(); otherwise [nan]."""
    if state["iteration"] % args.eval_every and state["iteration"] != args.iterations:
        return np.array([np.nan])
    return evaluate(pool, state["iteration"], state["M"], state["stats"], args, range(args.eval_episodes))


class Run:
    """The bookkeeping around the algorithm: the run directory (config.json, progress.csv,
    checkpoints, progress.png), the progress line, the worker processes, and how a run ends."""

    def __init__(self, args):
        obs_dim, act_dim = check_env(args.env, args.episode_length)
        self.args, self.held = args, {}  # held: signal handlers set aside while a stopped run saves itself
        self.plotted, self.next_plot = 0, time.monotonic() + PLOT_EVERY  # rows in progress.png, and when next
        self.dir, self.start_state, self.rows = start_run(args, obs_dim, act_dim)
        try:
            if args.resume is not None:  # first: a resumed run writes into a folder it did not make
                probe_writable(os.path.join(self.dir, "checkpoints"))
            write_json(os.path.join(self.dir, "config.json"),
                       {**vars(args), "script": "ars.py", "run_dir": self.dir, "versions": versions()})
        except OSError as e:  # a resumed run's folder that cannot be written
            raise UserError(f"cannot write to the run directory '{self.dir}': {e.strerror}") from None
        if args.resume is None:
            checkpoint(self.dir, self.start_state, args)  # iteration 0: a run that fails early can still be resumed
        write_csv_rows(os.path.join(self.dir, "progress.csv"), self.rows, COLUMNS)
        self.csv = open(os.path.join(self.dir, "progress.csv"), "a", newline="")
        print(f"run directory: {self.dir}", flush=True)
        self.title = f"ARS V{args.version}{'-t' if args.top_b < args.n_directions else ''} on {args.env}"
        self.pool = (RayPool if args.ray else WorkerPool)(args.workers, args.env, args.episode_length, args.seed,
                                                          args.shift, args.reward_clip, args.actions == "clipped")
        col = COLUMNS.index("eval_return_mean")  # a resumed run shows its last evaluation until the next one
        evals = [float(r[col]) for r in self.rows if r[col] not in ("", "nan")]
        self.last_eval = evals[-1] if evals else np.nan
        self.late = any(self.switches(int(r[0]), float(r[col])) for r in self.rows if r[col] not in ("", "nan"))
        self.t_start = time.time() - self.start_state["wall_time"]

    def elapsed(self) -> float:
        """Seconds of training, over all the sessions of a resumed run."""
        return time.time() - self.t_start

    def switches(self, iteration: int, eval_mean: float) -> bool:
        """Whether this evaluation puts --nu-late in force: a scheduled one (every --eval-every
        iterations, not the extra one at a run's last iteration) whose mean reaches --nu-late-from."""
        args = self.args
        return bool(args.nu_late) and iteration % args.eval_every == 0 and eval_mean >= args.nu_late_from

    def nu(self) -> float:
        """ν of Eq. (3) for the next iteration: --nu, then --nu-late from the first evaluation whose
        mean reached --nu-late-from. Deviation: the paper keeps ν fixed; this switch is this
        repository's option (docs/record/ars.md, "A larger ν until it walks"). The evaluations that count
        (see switches) are logged, so a resumed run, which reads them back from progress.csv,
        switches where the uninterrupted one does."""
        return self.args.nu_late if self.late else self.args.nu

    def log(self, new: dict, info: dict, ev: np.ndarray, confirm: np.ndarray) -> str:
        """Writes a row of progress.csv (flushed); returns the progress line (two lines when this
        evaluation switches ν to --nu-late)."""
        self.last_eval = self.last_eval if np.isnan(ev).all() else ev.mean()
        row, line = log_iteration(self.csv, new, info, ev, self.last_eval, confirm, self.args)
        self.rows.append(row)
        if not self.late and not np.isnan(ev).all() and self.switches(new["iteration"], ev.mean()):
            self.late = True
            line += (f"\nnu = {self.args.nu_late} from iteration {new['iteration'] + 1} on: the evaluation "
                     f"({ev.mean():.1f}) reached --nu-late-from {self.args.nu_late_from}")
        return line

    def save_if_due(self, state: dict, ev: np.ndarray):
        """A checkpoint every --save-every iterations and after every evaluation, and progress.png
        redrawn with it if the last plot is PLOT_EVERY seconds old."""
        if state["iteration"] % self.args.save_every == 0 or not np.isnan(ev).all():
            checkpoint(self.dir, state, self.args)
            self.plot()

    def plot(self, final: bool = False):
        """Redraws progress.png if rows came since the last plot: during the run at most every
        PLOT_EVERY seconds, at the end (final) always."""
        if len(self.rows) > self.plotted and (final or time.monotonic() >= self.next_plot):
            plot_progress(self.dir, self.rows, self.title)
            self.plotted, self.next_plot = len(self.rows), time.monotonic() + PLOT_EVERY

    def hold_stops(self):
        """From here on a stop would only interrupt the final save: Ctrl-C and SIGTERM wait for it."""
        self.held = hold_stops()

    def interrupted(self, status: str) -> str:
        """Ctrl-C or SIGTERM: a second one (a shell or `timeout` often sends one) waits until the
        state is saved. A stop after the target or a divergence was logged changes nothing."""
        self.hold_stops()
        if status in ("target", "diverged"):
            return status
        print(f"\ninterrupted: resume with  python ars.py --resume {self.dir}", file=sys.stderr)
        return "interrupted"

    def close(self):
        """Stops the workers and closes progress.csv, whatever ended the run; saves nothing (finish does)."""
        self.pool.close()
        self.csv.close()

    def finish(self, state: dict, status: str) -> dict:
        """The final checkpoint (the last good state: a diverged update never enters it), plot and report."""
        checkpoint(self.dir, state, self.args)
        self.plot(final=True)
        if status == "target":
            print(f"target {self.args.target_return} reached at iteration {state['iteration']}: "
                  f"{state['episodes']} episodes, {state['env_steps']} env steps, "
                  f"{fmt_time(state['wall_time'])}", flush=True)
        for signum, handler in self.held.items():
            signal.signal(signum, handler)
        return dict(state, run_dir=self.dir, status=status)


def train(args) -> dict:
    """The run, line by line as the pseudocode of docs/ars.md: iterations of Algorithm 2
    (ars_iteration), evaluations, the log and checkpoints (Run). Returns the final state."""
    run = Run(args)  # M_0 = 0 and stats = (0, 0, 0), or both loaded by --resume; the workers start
    state, status = run.start_state, "done"
    try:
        while state["iteration"] < args.iterations:
            new, info = ars_iteration(run.pool, state, args, run.nu())  # N pairs, Eqs. (3)-(6)
            if not info["finite"]:
                status = "diverged"
                print(f"NaN or inf at iteration {new['iteration']}: the run stops; the last good checkpoint "
                      "is kept (try a smaller --alpha or --nu)", file=sys.stderr)
                break
            ev = evaluate_if_due(run.pool, new, args)
            reached, confirm = target_reached(run.pool, new, ev, args)  # plays the confirmation episodes, if any
            new = dict(new, wall_time=run.elapsed())
            line = run.log(new, info, ev, confirm)  # a row of progress.csv
            # Logged: only now may `state`, and so a checkpoint, hold it. An interrupt before this
            # leaves `state` at the last logged iteration, and --resume redoes this one (its row dropped).
            state, status = new, ("target" if reached else status)
            print(line, flush=True)  # an iteration shown is an iteration saved, whenever the run stops
            run.save_if_due(state, ev)
            if status == "target":
                break
        run.hold_stops()  # the run is over
    except KeyboardInterrupt:
        status = run.interrupted(status)
    except RuntimeError:  # a worker died: keep the last finished iteration to resume from
        checkpoint(run.dir, state, args)
        raise
    finally:
        run.close()
    return run.finish(state, status)


def log_iteration(csv_file, state: dict, info: dict, ev: np.ndarray, last_eval: float, confirm: np.ndarray,
                  args) -> tuple:
    """Writes one row of progress.csv (flushed); returns it and the progress line to print."""
    returns, lengths = info["returns"], info["lengths"]
    steps_per_s = lengths.sum() / info["train_time"]
    row = [state["iteration"], state["episodes"], state["env_steps"], round(state["wall_time"], 2),
           returns.mean(), returns.std(), returns.min(), returns.max(), ev.mean(),
           ev.std() if ev.size > 1 else np.nan, round(steps_per_s, 1), info["sigma_R"], info["step_norm"],
           np.linalg.norm(state["M"]), lengths.mean(), state["stats"][0], confirm.mean()]
    csv.writer(csv_file).writerow(row)
    csv_file.flush()
    eta = (args.iterations - state["iteration"]) * state["wall_time"] / state["iteration"]
    line = (f"it {state['iteration']:5d} | eps {state['episodes']:7d} | steps {state['env_steps']:10,d} | "
            f"return {returns.mean():8.1f} (max {returns.max():7.1f}) | eval {last_eval:7.1f} | "
            f"{steps_per_s:6.0f} steps/s | {fmt_time(state['wall_time'])} | ETA {fmt_time(eta)}")
    return [str(v) for v in row], line


# ----------------------------------------------------------------------------------------------
# Playing a saved policy
# ----------------------------------------------------------------------------------------------

def play(args):
    cfg = read_config(args.play, "ars.py", ("env", "version", "episode_length"))
    args.env, args.version, args.episode_length = cfg["env"], cfg["version"], cfg["episode_length"]
    args.actions = cfg.get("actions") or "clipped"  # runs saved before --actions existed were clipped
    try:
        resolve_config(args)  # the saved values checked as the command line's are (a hand-edited file)
    except UserError as e:
        raise UserError(f"the config.json of '{args.play}': {e}") from None
    obs_dim, act_dim = check_env(args.env, args.episode_length)
    state = load_state(args.play, args, obs_dim, act_dim)
    if args.video:
        check_video_folder(args.play, args.env)
    mu, inv_sigma = normalizer(state["stats"], args.version)
    env = make_env(args.env, args.episode_length)
    seeds = [int(stream(args.seed, EVAL, 10**6, i).integers(2**31)) for i in range(args.episodes)]
    clip = args.actions == "clipped"
    returns = np.array([rollout(env, state["M"], mu, inv_sigma, env_seed, clip_actions=clip).ret
                        for env_seed in seeds])
    print(f"{args.env}: mean return {returns.mean():.1f} +- {returns.std():.1f} over {args.episodes} episodes "
          f"(min {returns.min():.1f}, max {returns.max():.1f}), policy of iteration {state['iteration']}")
    if args.video:
        path = write_gif(args, state["M"], mu, inv_sigma)
        print(f"video: {path}")
    return returns


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


def write_gif(args, M, mu, inv_sigma, every: int = 2) -> str:
    """One evaluation episode as a GIF through Pillow (brought by matplotlib)."""
    if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"  # headless MuJoCo rendering
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame's frames (Box2D, classic control) need no window
    from PIL import Image
    frames = []
    try:
        env = make_env(args.env, args.episode_length, render=True)
        rollout(env, M, mu, inv_sigma, int(stream(args.seed, EVAL, 10**6, 0).integers(2**31)), frames=frames,
                clip_actions=args.actions == "clipped")
        images = [Image.fromarray(f).resize((f.shape[1] // 2, f.shape[0] // 2)) for f in frames[::every]]
    except Exception as e:
        raise UserError(f"cannot render {args.env}: {str(e).splitlines()[0]} (MuJoCo needs MUJOCO_GL=egl "
                        "or osmesa without a display; Box2D needs pygame)") from None
    path = check_video_folder(args.play, args.env)  # checked before the episodes; again, as it is used
    try:
        images[0].save(path + ".tmp.gif", save_all=True, append_images=images[1:], duration=40 * every, loop=0)
        os.replace(path + ".tmp.gif", path)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror}") from None
    return path


# Flags that may be given again with --resume: they steer the run (or, alpha, nu and nu_late with
# nu_late_from, rescue a diverged one); every other option keeps its saved value. --workers, --ray
# and --ray-address always come from the command line: they say where the run goes on, not what
# it computes (--workers defaults to this machine's cores, not the saved count).
RESUME_OVERRIDES = ("workers", "iterations", "target_return", "save_every", "alpha", "nu", "nu_late", "nu_late_from")


def resume_config(args: argparse.Namespace, argv) -> None:
    """On --resume the saved configuration wins, except RESUME_OVERRIDES given again; without
    alpha, nu or nu_late among them the resumed run computes what the first one would have."""
    refuse_fixed_flags(argv)
    saved = read_config(args.resume, "ars.py", ("env", "seed", "version", "alpha", "nu", "n_directions", "top_b"))
    saved.setdefault("actions", "clipped")  # runs saved before --actions
    words = flags_given(argv)
    given = {key for key in RESUME_OVERRIDES if f"--{key.replace('_', '-')}" in words}
    for key, value in saved.items():
        if key in vars(args) and key not in ("resume", "workers", "ray", "ray_address") and key not in given:
            setattr(args, key, value)
    if "target_return" in given and saved.get("confirm_return") == saved.get("target_return"):
        args.confirm_return = None  # it followed the target, its default: it follows the new one


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
        if args.play is not None:  # an empty RUN_DIR is a mistake, not "no --play"
            resolve_config(args)
            return play(args)
        if args.resume is not None:
            resume_config(args, argv)
        resolve_config(args)  # read_config checked the saved values' types, this checks the values
        result = train(args)
    except UserError as e:
        print(f"ars.py: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # before the first iteration, or during --play
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
    except MemoryError:
        print("ars.py: error: not enough memory for this configuration", file=sys.stderr)
        sys.exit(2)
    except RuntimeError as e:
        print(f"ars.py: error: {e}", file=sys.stderr)
        sys.exit(1)
    except OSError as e:  # the run directory stopped taking files (a full disk): checkpoints are atomic
        where = f" '{e.filename}'" if e.filename else ""
        print(f"ars.py: error: cannot write{where}: {e.strerror or e}; the last checkpoint is kept",
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
