"""Augmented Random Search (ARS V1, V2, V1-t, V2-t) for continuous control. Mania, Guy & Recht
(2018), "Simple random search provides a competitive approach to reinforcement learning",
https://arxiv.org/abs/1803.07055; docs/ars.md derives the math, cited below as "Eq. (n)".

    python ars.py --env BipedalWalker-v3                    # walks in 10-30 minutes on 2 cores
    python ars.py --play runs/<run-dir> --episodes 100 --video
"""

import argparse
import collections
import contextlib
import csv
import ctypes
import functools
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import BrokenExecutor, ProcessPoolExecutor

import gymnasium as gym
import numpy as np

# ---- configuration: presets, then the command line (a flag overrides its preset) ----
# MuJoCo: RL Baselines3 Zoo's and the official code's Humanoid. Unset: V2, no shift or clip, and
# GENERIC's evaluation; GENERIC's alpha, nu, N, b: tasks with no preset (docs/ars.md, "Presets").
PRESETS = {
    "Swimmer-v5": dict(alpha=0.02, nu=0.01, n_directions=1, top_b=1, version=1, iterations=1000),
    "Hopper-v5": dict(alpha=0.01, nu=0.025, n_directions=8, top_b=4, shift=1.0, iterations=1000),
    "HalfCheetah-v5": dict(alpha=0.02, nu=0.03, n_directions=32, top_b=4, iterations=300),
    "Walker2d-v5": dict(
        alpha=0.03, nu=0.025, n_directions=40, top_b=30, shift=1.0, iterations=1500
    ),
    "Ant-v5": dict(alpha=0.015, nu=0.025, n_directions=60, top_b=20, shift=1.0, iterations=1000),
    "Humanoid-v5": dict(
        alpha=0.02, nu=0.0075, n_directions=230, top_b=230, shift=5.0, iterations=1000
    ),
    "BipedalWalker-v3": dict(  # docs/ars.md, "BipedalWalker-v3"
        alpha=0.02, nu=0.03, n_directions=32, top_b=16, reward_clip=10.0, iterations=1000
    ),
}
PRESETS["BipedalWalker-v3"].update(eval_episodes=20, target_return=300.0, confirm_episodes=100)
GENERIC = dict(env="BipedalWalker-v3", seed=0, out_dir="runs", iterations=300, save_every=10)
GENERIC.update(alpha=0.05, nu=0.1, n_directions=32, top_b=16, version=2, actions="clipped")
GENERIC.update(shift=0.0, reward_clip=0.0, eval_every=10, eval_episodes=10, confirm_episodes=0)
# What --resume takes again: where a run goes on, or its step sizes.
STEER = "iterations workers target_return save_every video_every alpha nu ray ray_address".split()


def build_parser() -> argparse.ArgumentParser:
    presets = "; ".join(f"{env}: {preset}" for env, preset in PRESETS.items())
    p = Parser(
        prog="ars.py",
        description=__doc__.split("\n")[0],
        epilog=f"presets: {presets}; else: {GENERIC}",
    )
    a = p.add_argument  # unset flags come from the preset (below the banner)
    n = at_least
    a("--env", help="gymnasium id with Box actions (default BipedalWalker-v3)")
    a("--seed", type=n(0), help="decides every random number of the run (default 0)")
    a("--iterations", type=n(0), help="T, updates of M (preset)")
    a("--alpha", type=n(0, float), help="α, step size (typ. 0.01-0.05)")
    a("--nu", type=n(0, float), help="ν, std of the exploration noise (typ. 0.0075-0.1)")
    a("--n-directions", type=n(1), help="N, directions sampled per iteration (typ. 1-230)")
    a("--top-b", type=n(1), help="b <= N, best directions kept (b = N: V1/V2, b < N: -t)")
    a("--version", type=int, choices=(1, 2), help="1: a = M x; 2: a = M (x - mu) / sigma")
    a("--shift", type=float, help="survival bonus subtracted from training rewards (typ. 0-5)")
    a("--reward-clip", type=float, help="training rewards clipped to [-c, c]; 0: off")
    a("--actions", choices=("clipped", "raw"), help="clipped to the action space, or raw (Eq. 2)")
    a("--episode-length", type=n(1), help="H, steps per episode (default: the time limit)")
    a("--workers", type=n(1), help="rollout processes (default: the cores, or Ray's CPUs)")
    a("--out-dir", help="where run directories are made (default runs)")
    a("--eval-every", type=n(1), help="evaluate the noiseless policy every K iterations")
    a("--eval-episodes", type=n(1), help="episodes per evaluation")
    a("--save-every", type=n(1), help="checkpoint every K iterations (and at each evaluation)")
    a("--target-return", type=float, help="stop once an evaluation's mean reaches it")
    a("--confirm-episodes", type=n(0), help="K fresh episodes that must confirm the target")
    a("--video-every", type=n(1), help="K: video/iter_XXXXXX.gif of an evaluation every K")
    a("--resume", metavar="RUN_DIR", help="continue the run saved in RUN_DIR")
    a("--play", metavar="RUN_DIR", help="evaluate RUN_DIR's policy (or a checkpoint file)")
    a("--episodes", type=n(1), help="episodes for --play (default 10)")
    a("--video", action="store_true", default=None, help="with --play: RUN_DIR/video/<env>.gif")
    a("--ray", action="store_true", default=None, help="rollouts on Ray: here, or RAY_ADDRESS")
    a("--ray-address", metavar="ADDRESS", help="with --ray: a cluster, e.g. 10.0.0.1:6379 or auto")
    return p


# ---- the math (docs/ars.md, Eqs. 1-6) ----
# The first word of a random stream's name: what its numbers are for.
TRAIN = 0
TRAIN_ENV = 1
EVAL = 2


def stream(seed: int, *key: int) -> np.random.Generator:
    """An independent random stream named by what it is for: key = (purpose, iteration, index)."""
    return np.random.default_rng(np.random.SeedSequence([seed, *key]))


def sample_direction(seed: int, iteration: int, k: int, shape: tuple) -> np.ndarray:
    """delta_k ~ N(0, I), shaped as M, made again from its name (official code: a noise table)."""
    return stream(seed, TRAIN, iteration, k).standard_normal(shape)  # (p, n)


def select_top_b(r_plus: np.ndarray, r_minus: np.ndarray, b: int) -> np.ndarray:
    """Eq. (4): indices of the b directions with the largest max(r+, r-), best first (the official
    code keeps those above a percentile instead, which can keep more than b when returns tie)."""
    return np.argsort(-np.maximum(r_plus, r_minus), kind="stable")[:b]


def ars_update(M, direction, r_plus: np.ndarray, r_minus: np.ndarray, alpha: float, b: int):
    """Eqs. (4)-(5): M + alpha / (b sigma_R) sum_{k in top b} (r+_k - r-_k) delta_k. direction(k)
    gives delta_k, for the top b only: the master never holds all N. Returns (new M, sigma_R)."""
    top = select_top_b(r_plus, r_minus, b)
    sigma_R = float(np.concatenate([r_plus[top], r_minus[top]]).std())  # ddof 0, as official code
    if not sigma_R > 0:  # all 2b returns equal: no direction is better, take no step
        return M.copy(), sigma_R
    deltas = np.stack([direction(k) for k in top])  # (b, p, n), best first
    step = np.tensordot(r_plus[top] - r_minus[top], deltas, axes=1)  # (p, n)
    return M + alpha / (b * sigma_R) * step, sigma_R


def merge_stats(a: tuple, b: tuple) -> tuple:
    """Eq. (6): Chan et al.'s parallel merge of (count, mean, m2) where m2 = sum (x - mean)^2."""
    na, mean_a, m2_a = a
    nb, mean_b, m2_b = b
    n = na + nb  # nb > 0: an episode has a state
    d = mean_b - mean_a
    return n, mean_a + d * (nb / n), m2_a + m2_b + d * d * (na * nb / n)


def batch_stats(x: np.ndarray) -> tuple:
    """(count, mean, m2) of the rows of x."""
    mean = x.mean(axis=0)
    return x.shape[0], mean, ((x - mean) ** 2).sum(axis=0)


def normalizer(stats: tuple, version: int):
    """(mu, 1/sigma) of Eq. (2); V1 and fewer than 2 states: the identity. Near-constant features
    get 1/sigma = 0 (the official code: sigma = inf below 1e-7, and the n - 1 variance)."""
    n, mean, m2 = stats
    if version == 1 or n < 2:
        return np.zeros_like(mean), np.ones_like(mean)
    std = np.sqrt(m2 / n)
    return mean, np.where(std < 1e-8, 0.0, 1.0 / np.maximum(std, 1e-8))


# ---- the policy, its rollouts, and the jobs a worker runs ----
def rollout(
    env, M, mu, inv_sigma, env_seed, shift=0.0, reward_clip=0.0, keep_obs=False, clip_actions=True
):
    """One episode of a = clip(M (x - mu) / sigma) (Eq. 2): (return, shaped return, length,
    statistics of the states acted on if keep_obs). clip_actions=False: --actions raw."""
    W = M * inv_sigma  # the normalization folded into the matrix: a = W x - W mu, one product
    offset = -W @ mu
    low, high = -np.inf, np.inf  # --actions raw, as official code (MuJoCo's control cost on them)
    if clip_actions:  # float64 bounds, as a is: np.maximum of float64 and float32 costs 2x more
        low = env.action_space.low.astype(np.float64)
        high = env.action_space.high.astype(np.float64)
    x, _ = reset_env(env, env_seed)
    observed = [x] if keep_obs else None
    total, shaped = 0.0, 0.0  # the return, and Eq. (3)'s shaped return
    steps = 0
    while True:  # the hot path: np.clip(W @ x + offset, low, high) in place, in fewer calls
        a = np.dot(W, x)
        np.add(a, offset, out=a)
        np.maximum(a, low, out=a)
        np.minimum(a, high, out=a)
        x, r, terminated, truncated, _ = env.step(a)
        steps += 1
        total += r
        # Eq. (3)'s shaped reward: the paper's shift; the clip is our option (deviation)
        shaped += (max(-reward_clip, min(reward_clip, r)) if reward_clip else r) - shift
        if terminated or truncated:
            break
        if keep_obs:  # the state the next action sees; the terminal one is never acted on
            observed.append(x)
    stats = batch_stats(np.asarray(observed, dtype=np.float64)) if keep_obs else None
    return float(total), float(shaped), steps, stats


# What rollout returns, as the master reads it (a worker sends the plain tuple).
Episode = collections.namedtuple("Episode", "R shaped length stats")


def job(args, params: tuple, kind: str, k: int) -> tuple:
    """("train", k): direction k's pair (Eq. 3) on one env seed, ((R+, ...), (R-, ...)); ("eval",
    k): evaluation episode k of the noiseless policy. Runs in a worker."""
    iteration, M, mu, inv_sigma, nu = params
    env = env_of(args.env, args.episode_length)
    clip = args.actions == "clipped"
    if kind == "eval":
        env_seed = int(stream(args.seed, EVAL, iteration, k).integers(2**31))
        return rollout(env, M, mu, inv_sigma, env_seed, clip_actions=clip)
    delta = sample_direction(args.seed, iteration, k, M.shape)
    env_seed = int(stream(args.seed, TRAIN_ENV, iteration, k).integers(2**31))
    shaping = dict(shift=args.shift, reward_clip=args.reward_clip, keep_obs=True, clip_actions=clip)
    plus = rollout(env, M + nu * delta, mu, inv_sigma, env_seed, **shaping)
    minus = rollout(env, M - nu * delta, mu, inv_sigma, env_seed, **shaping)
    return plus, minus


def run_jobs(pool, args, params: tuple, jobs: list) -> list:
    """The results of jobs [(kind, k), ...] in their order, whichever worker ran each."""
    try:
        with stops_held():
            futures = [pool.submit(job, args, params, kind, k) for kind, k in jobs]
            return [future.result() for future in futures]
    except BrokenExecutor:  # a worker process died
        raise WorkerDied("a worker process died") from None
    except Exception as e:  # raised in a worker: the environment failed, or Ray lost a worker
        reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise WorkerDied(f"a rollout failed: {type(e).__name__}: {reason}") from None


# ---- training: Algorithm 2 of the paper (docs/ars.md, "Pseudocode") ----
def ars_iteration(pool, state: dict, args) -> tuple:
    """N mirrored pairs, the update of M from the top b, the merge of the statistics."""
    j = state["iteration"]
    M = state["M"]
    stats = state["stats"]
    N = args.n_directions
    t0 = time.time()
    mu, inv_sigma = normalizer(stats, args.version)  # frozen all along the iteration (Eq. 2)
    pairs = run_jobs(pool, args, (j, M, mu, inv_sigma, args.nu), [("train", k) for k in range(N)])
    plus = [Episode(*pair[0]) for pair in pairs]  # the episodes of M + nu delta_k, k = 0..N-1
    minus = [Episode(*pair[1]) for pair in pairs]
    r_plus = np.array([episode.shaped for episode in plus])  # Eq. (3): the shaped returns
    r_minus = np.array([episode.shaped for episode in minus])
    direction = functools.partial(sample_direction, args.seed, j, shape=M.shape)  # delta_k again
    M_new, sigma_R = ars_update(M, direction, r_plus, r_minus, args.alpha, args.top_b)  # (4)-(5)
    for k in range(N):  # Eq. (6), in direction order: any worker count gives the same bits
        stats = merge_stats(merge_stats(stats, plus[k].stats), minus[k].stats)
    returns = np.array([episode.R for episode in plus + minus])  # (2N,)
    lengths = np.array([episode.length for episode in plus + minus])  # (2N,)
    new = dict(M=M_new, iteration=j + 1, episodes=state["episodes"] + 2 * N, stats=stats)
    new["env_steps"] = state["env_steps"] + int(lengths.sum())
    finite = all(np.isfinite(x).all() for x in (returns, M_new, stats[1], stats[2]))
    info = dict(returns=returns, lengths=lengths, sigma_R=sigma_R, finite=finite)
    info.update(seconds=time.time() - t0, step_norm=np.linalg.norm(M_new - M))
    return new, info


def evaluate(pool, state: dict, args, episodes: range) -> np.ndarray:  # the noiseless policy
    mu, inv_sigma = normalizer(state["stats"], args.version)
    params = (state["iteration"], state["M"], mu, inv_sigma, args.nu)
    results = run_jobs(pool, args, params, [("eval", i) for i in episodes])
    return np.array([Episode(*episode).R for episode in results])


def train(args) -> dict:
    run = Run(args)  # M_0 = 0 and stats (0, 0, 0), or both from --resume; the workers start
    state, reached = run.state, False
    try:
        while state["iteration"] < args.iterations:
            new, info = ars_iteration(run.pool, state, args)  # N pairs, Eqs. (3)-(6)
            if not info["finite"]:
                return run.end(state, "diverged")  # the last good state is checkpointed
            due = new["iteration"] % args.eval_every == 0 or new["iteration"] == args.iterations
            ev = evaluate(run.pool, new, args, range(args.eval_episodes)) if due else None
            screen = due and args.target_return is not None and ev.mean() >= args.target_return
            E = args.eval_episodes  # K fresh episodes confirm the screen
            K = args.confirm_episodes
            confirm = evaluate(run.pool, new, args, range(E, E + K)) if screen and K else None
            run.log(new, info, ev, confirm)  # progress.csv, the progress line, the checkpoint
            confirmed = confirm is None or confirm.mean() >= args.target_return
            state, reached = new, screen and confirmed  # one statement: no stop between them
            if reached:  # logged: from here on a stop keeps this iteration, and its target
                return run.end(state, "target")
        return run.end(state, "done")
    except (KeyboardInterrupt, WorkerDied) as e:  # Ctrl-C, SIGTERM, a dead worker: keep the last
        if reached:
            return run.end(state, "target")
        return run.end(state, f"stopped: {e}" if str(e) else "interrupted")


# ---- plumbing: checks, workers, Ray, run directory, checkpoints, --play, main ----
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
    check(args.top_b <= args.n_directions, f"--top-b must be <= --n-directions {args.n_directions}")
    try:
        env = gym.make(args.env)
    except (gym.error.Error, ImportError) as e:  # an unknown id, a missing extra, a retired version
        check(False, e)
    obs, act = env.observation_space, env.action_space
    takes = "ARS takes a flat Box of observations and Box actions (discrete: es_basic.py)"
    ok = isinstance(act, gym.spaces.Box) and len(obs.shape or ()) == 1
    check(ok, f"{args.env} has {act} actions: {takes}")
    limited = env.spec.max_episode_steps or args.episode_length
    check(limited, f"{args.env} has no time limit: give --episode-length")
    args.dims = [act.shape[0], obs.shape[0]]  # M: (p, n)
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


ENVS = {}  # this process's environments, by id and episode length: each made once


def env_of(env_id: str, episode_length=None):  # (not functools.cache: Ray pickles it by value)
    if (env_id, episode_length) not in ENVS:
        ENVS[env_id, episode_length] = make_env(env_id, episode_length)
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


def make_pool(args):  # the workers: processes started at the first job, or Ray's
    if args.ray:
        return RayExecutor(args.ray_address)
    return ProcessPoolExecutor(args.workers, initializer=init_worker)


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


COLUMNS = (
    "iteration episodes env_steps wall_time_s return_mean return_std return_min return_max "
    "eval_return_mean eval_return_std steps_per_s sigma_R step_norm M_norm mean_length "
    "obs_count confirm_return_mean"
).split()


class Run:
    """The run directory, the progress line, the checkpoints, the workers, how a run ends."""

    def __init__(self, args):
        self.args = args
        self.ev = np.nan  # the last evaluation's mean, shown until the next one
        self.best = np.nan  # the best evaluation's mean so far, shown beside a target
        variant = f"V{args.version}-t" if args.top_b < args.n_directions else f"V{args.version}"
        self.title = f"ARS {variant} on {args.env}"  # of progress.png
        p, n = args.dims
        stats = (0, np.zeros(n), np.zeros(n))  # (count, mean, m2) of no state yet
        self.state = dict(M=np.zeros((p, n)), iteration=0, episodes=0, env_steps=0, stats=stats)
        self.state["wall_time"] = 0.0
        rows = []
        if args.resume:  # the log up to the checkpoint: a resumed run redoes what came after it
            self.dir = args.resume
            self.state = load_checkpoint(os.path.join(self.dir, "checkpoints", "latest.npz"), args)
            with open(os.path.join(self.dir, "progress.csv")) as f:
                rows = list(csv.DictReader(f))
            rows = [row for row in rows if int(row["iteration"]) <= self.state["iteration"]]
            for row in rows:  # the evaluations so far, for the progress line
                if row["eval_return_mean"] != "nan":
                    self.ev = float(row["eval_return_mean"])
                    self.best = np.fmax(self.best, self.ev)
        else:
            name = f"{args.env}__ars__{args.seed}__{time.strftime('%Y%m%d-%H%M%S')}"
            self.dir = os.path.join(args.out_dir, name)
        try:
            os.makedirs(os.path.join(self.dir, "checkpoints"), exist_ok=bool(args.resume))
            write_config(self.dir, args, SCRIPT)
            self.file = open(os.path.join(self.dir, "progress.csv"), "w")  # noqa: SIM115 (the run's)
        except OSError as e:
            check(False, f"cannot write {e.filename}: {e.strerror} (choose another --out-dir)")
        self.csv = csv.DictWriter(self.file, COLUMNS, lineterminator="\n")
        self.csv.writeheader()
        self.csv.writerows(rows)
        self.file.flush()
        self.t0 = time.time() - self.state["wall_time"]
        import matplotlib.figure  # noqa: F401 (here: a stop that cut this import short breaks plots)

        self.pool = make_pool(args)
        print(f"run directory: {self.dir}", flush=True)

    def log(self, state: dict, info: dict, ev, confirm):
        a = self.args
        it = state["iteration"]
        R, L = info["returns"], info["lengths"]  # of the 2N training episodes
        state["wall_time"] = time.time() - self.t0
        speed = L.sum() / info["seconds"]
        if ev is None:
            ev = np.array([np.nan])
        else:
            self.ev = ev.mean()
            self.best = np.fmax(self.best, self.ev)
        row = dict(iteration=it, episodes=state["episodes"], env_steps=state["env_steps"])
        row.update(wall_time_s=round(state["wall_time"], 2), steps_per_s=round(speed, 1))
        row.update(return_mean=R.mean(), return_std=R.std(), return_min=R.min(), return_max=R.max())
        row.update(eval_return_mean=ev.mean(), eval_return_std=ev.std() if ev.size > 1 else np.nan)
        row.update(sigma_R=info["sigma_R"], step_norm=info["step_norm"])
        row.update(M_norm=np.linalg.norm(state["M"]), mean_length=L.mean())
        confirmed = np.nan if confirm is None else confirm.mean()
        row.update(obs_count=state["stats"][0], confirm_return_mean=confirmed)
        self.csv.writerow(row)
        self.file.flush()
        eta = (a.iterations - it) * state["wall_time"] / it / 60
        evaluation = f"eval {self.ev:7.1f}"
        left = f"ETA {eta:5.1f} min"
        if a.target_return is not None:  # a run that reaches its target stops before the cap
            evaluation += f" (best {self.best:.1f} of {a.target_return:g})"
            left = f"cap {a.iterations} in {eta:.1f} min"
        print(
            f"it {it:5d} | eps {state['episodes']:7d} | steps {state['env_steps']:10,d} | "
            f"return {R.mean():8.1f} (max {R.max():7.1f}) | {evaluation} | {speed:6.0f} "
            f"steps/s | {state['wall_time'] / 60:5.1f} min | {left}",
            flush=True,
        )
        if it % a.save_every == 0 or not np.isnan(ev).all():
            save_checkpoint(self.dir, state, a.env)
            plot(self.dir, self.title)
        if a.video_every and it % a.video_every == 0:
            write_gif(a, state, os.path.join(self.dir, "video", f"iter_{it:06d}.gif"), it)

    def end(self, state: dict, status: str) -> dict:
        """Stops the workers; the last logged state checkpointed and plotted; the last line."""
        self.pool.shutdown(cancel_futures=True)  # once the episodes under way are done
        self.file.close()
        a = self.args
        save_checkpoint(self.dir, state, a.env)
        best, at = np.nan, 0  # the best evaluation and its iteration, from the plot
        if state["iteration"]:
            best, at = plot(self.dir, self.title)
        done = f"{state['iteration']}: {state['episodes']} episodes, {state['env_steps']} env steps"
        if status == "target":
            message = f"target {a.target_return} reached at iteration {done}"
        elif status == "done":
            message = f"done, iteration {done}"
            if a.target_return is not None:
                message += f"; the target {a.target_return} was not reached: the best evaluation "
                message += f"was {best:.1f}, at iteration {at:.0f}"
        elif status == "diverged":
            message = f"NaN or inf after iteration {done}; its checkpoint is kept (a smaller "
            message += "--alpha or --nu?)"
        else:
            message = f"{status}: resume with  python ars.py --resume {self.dir}"
        print(message, file=sys.stdout if status in ("target", "done") else sys.stderr)
        return dict(state, run_dir=self.dir, status=status)


def save_checkpoint(run_dir: str, state: dict, env_id: str):
    count, mean, m2 = state["stats"]
    saved = {key: value for key, value in state.items() if key != "stats"}
    saved.update(env=env_id, obs_count=count, obs_mean=mean, obs_m2=m2)
    tmp = os.path.join(run_dir, "checkpoints", "tmp.npz")
    with stops_held():  # a stop waits for the files
        for name in (f"iter_{state['iteration']:06d}.npz", "latest.npz"):
            np.savez(tmp, **saved)  # written whole, then renamed
            os.replace(tmp, os.path.join(run_dir, "checkpoints", name))


def load_checkpoint(path: str, args) -> dict:  # the state saved by save_checkpoint, checked
    p, n = args.dims
    fields = dict(M=((p, n), "finite"), obs_mean=((n,), "finite"), obs_m2=((n,), "nonnegative"))
    fields.update(obs_count=((), "count"), iteration=((), "count"), episodes=((), "count"))
    fields.update(env_steps=((), "count"), wall_time=((), "nonnegative"), env=((), "any"))
    c = read_checkpoint(path, fields, args.env)
    stats = (int(c["obs_count"]), c["obs_mean"], c["obs_m2"])
    state = dict(M=c["M"], iteration=int(c["iteration"]), episodes=int(c["episodes"]))
    state.update(env_steps=int(c["env_steps"]), wall_time=float(c["wall_time"]), stats=stats)
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


def write_gif(args, state: dict, path: str, key: int = 10**6) -> str:
    """Evaluation episode 0 of iteration `key` as a GIF of every second frame."""
    from PIL import Image  # comes with matplotlib

    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame draws without a display
    os.environ.setdefault("MUJOCO_GL", "glfw" if os.environ.get("DISPLAY") else "egl")
    mu, inv_sigma = normalizer(state["stats"], args.version)
    env = gym.wrappers.RenderCollection(make_env(args.env, args.episode_length, render=True))
    env_seed = int(stream(args.seed, EVAL, key, 0).integers(2**31))
    rollout(env, state["M"], mu, inv_sigma, env_seed, clip_actions=args.actions == "clipped")
    # every second frame RenderCollection kept (one a step), at 12.5 frames per second
    images = [Image.fromarray(frame[::2, ::2]) for frame in env.render()[::2]]  # half size
    os.makedirs(os.path.dirname(path), exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=80, loop=0)
    return path


def play(args) -> np.ndarray:  # --play RUN_DIR or RUN_DIR/checkpoints/iter_XXXXXX.npz
    run_dir = args.play
    checkpoint = os.path.join(run_dir, "checkpoints", "latest.npz")
    if args.play.endswith(".npz"):  # a checkpoint of a run directory
        checkpoint = args.play
        run_dir = os.path.abspath(os.path.join(checkpoint, "../.."))
    config = read_config(run_dir)
    for key in ("env", "version", "episode_length", "actions", "dims"):
        setattr(args, key, config[key])
    args.seed = args.seed or 0
    episodes = args.episodes or 10
    state = load_checkpoint(checkpoint, args)
    if args.video:
        print(f"video: {write_gif(args, state, os.path.join(run_dir, 'video', f'{args.env}.gif'))}")
    mu, inv_sigma = normalizer(state["stats"], args.version)
    params = (10**6, state["M"], mu, inv_sigma, 0.0)  # evaluation seeds no run uses
    R = np.array([job(args, params, "eval", i)[0] for i in range(episodes)])
    mean = f"mean return {R.mean():.1f} +- {R.std():.1f} over {episodes} episodes"
    spread = f"(min {R.min():.1f}, max {R.max():.1f})"
    print(f"{args.env}: {mean} {spread}, policy of iteration {state['iteration']}")
    return R


def mujoco_warning(message: str):  # MuJoCo 3.3+ warns of gymnasium's settotalmass: not ours
    if "settotalmass" not in message:
        print(f"MuJoCo warning: {message.strip()}", file=sys.stderr)


def main(argv=None):
    with contextlib.suppress(ImportError):  # MuJoCo's warnings on stderr, not in a file here
        import mujoco

        mujoco.set_mju_user_warning(mujoco_warning)
    args = build_parser().parse_args(argv)
    playing = args.play is not None
    check(playing or not (args.video or args.episodes), "--video and --episodes go with --play")
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
