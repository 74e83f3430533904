"""Augmented Random Search (ARS V1, V2, V1-t, V2-t) for continuous control. Mania, Guy & Recht
(2018), "Simple random search provides a competitive approach to reinforcement learning",
https://arxiv.org/abs/1803.07055; docs/ars.md derives the math, cited below as "Eq. (n)".

    python ars.py --env BipedalWalker-v3                    # walks in 10-30 minutes on 2 cores
    python ars.py --play runs/<run-dir> --episodes 100 --video
"""

import os
import signal

if __name__ in ("__main__", "__mp_main__"):  # Ctrl-C as the modules below load: status 130
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))

import argparse
import collections
import contextlib
import csv
import functools
import io
import json
import math
import multiprocessing
import multiprocessing.connection
import shlex
import socket
import sys
import threading
import time
from concurrent.futures import BrokenExecutor, ProcessPoolExecutor

import gymnasium as gym
import numpy as np

# ---- configuration: presets, then the command line (a flag overrides its preset) ----
# MuJoCo: RL Baselines3 Zoo's, and Humanoid's from the paper (shift 5: the official code);
# GENERIC: V2, no shift or clip, and the alpha, nu, N, b of tasks with no preset (docs/ars.md,
# "Presets").
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
GENERIC = dict(alpha=0.05, nu=0.1, n_directions=32, top_b=16, version=2, shift=0.0)
GENERIC.update(reward_clip=0.0, iterations=300, eval_episodes=10, target_return=None)
GENERIC.update(confirm_episodes=0)


def preset(env_id: str) -> dict:  # the defaults of the flags a preset sets
    return {**GENERIC, **PRESETS.get(env_id, {})}


def build_parser(env_id: str = "BipedalWalker-v3") -> argparse.ArgumentParser:
    p = Parser(
        prog="ars.py",
        description=f"Augmented Random Search. The defaults shown are {env_id}'s preset.",
        epilog=preset_table(),
        formatter_class=HelpFormatter,
    )
    a = p.add_argument  # the types (below the banner) refuse impossible values in one line
    n = at_least
    a("--env", default="BipedalWalker-v3", help="gymnasium id with Box actions")
    a("--seed", type=n(0), default=0, help="decides every random number of the run")
    a("--iterations", type=n(0), help="T, updates of M")
    a("--alpha", type=n(0, float), help="α, step size (typ. 0.01-0.05)")
    a("--nu", type=n(0, float), help="ν, std of the exploration noise (typ. 0.0075-0.1)")
    a("--n-directions", type=n(1), help="N, directions sampled per iteration (typ. 1-230)")
    a("--top-b", type=n(1), help="b <= N, best directions kept (b = N: V1/V2, b < N: -t)")
    a("--version", type=int, choices=(1, 2), help="1: a = M x; 2: a = M (x - mu) / sigma")
    a("--shift", type=float, help="survival bonus subtracted from training rewards (typ. 0-5)")
    a("--reward-clip", type=float, help="training rewards clipped to [-c, c]; 0: off")
    a("--actions", choices=("clipped", "raw"), default="clipped", help="raw: Eq. (2) unclipped")
    a("--episode-length", type=n(1), help="H, steps per episode (None: the time limit)")
    a("--workers", type=n(1), help="rollout processes (None: the cores, or Ray's CPUs)")
    a("--out-dir", default="runs", help="where run directories are made")
    a("--eval-every", type=n(1), default=10, help="evaluate the noiseless policy every K")
    a("--eval-episodes", type=n(1), help="episodes per evaluation")
    a("--save-every", type=n(1), default=10, help="checkpoint every K (and at each evaluation)")
    a("--target-return", type=float, help="stop once an evaluation's mean reaches it")
    a("--confirm-episodes", type=n(0), help="K fresh episodes that must confirm the target")
    a("--video-every", type=n(1), help="K: video/iter_XXXXXX.gif of an evaluation every K")
    a("--resume", metavar="RUN_DIR", help="continue the run saved in RUN_DIR")
    a("--play", metavar="RUN_DIR", help="evaluate RUN_DIR's policy (or a checkpoint file)")
    a("--episodes", type=n(1), default=10, help="episodes for --play")
    a("--video", action="store_true", help="with --play: RUN_DIR/video/<env>.gif")
    a("--ray", action="store_true", help="rollouts on Ray: a new one here, or RAY_ADDRESS's")
    a("--ray-address", metavar="ADDRESS", help="with --ray: a cluster, e.g. 10.0.0.1:6379 or auto")
    p.set_defaults(**preset(env_id))
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
    get 1/sigma = 0 (the paper: variance below 1e-8; the official code: sigma = inf below 1e-7,
    and the n - 1 variance)."""
    n, mean, m2 = stats
    if version == 1 or n < 2:
        return np.zeros_like(mean), np.ones_like(mean)
    std = np.sqrt(m2 / n)
    return mean, np.where(std < 1e-8, 0.0, 1.0 / np.maximum(std, 1e-8))


# ---- the policy, its rollouts, and the jobs a worker runs ----
def rollout(
    env, M, mu, inv_sigma, env_seed, shift=0.0, reward_clip=0.0, keep_obs=False, clip_actions=True
):
    """One episode of a = M (x - mu) / sigma (Eq. 2), clipped to the action box (a deviation from
    the paper, which sends Eq. 2 as it is): (return, shaped return, length,
    statistics of the states acted on if keep_obs). clip_actions=False: --actions raw."""
    W = M * inv_sigma  # (p, n): M (x - mu) / sigma = W x - W mu, one matrix product a step
    W_mu = W @ mu
    low, high = -np.inf, np.inf  # --actions raw, as official code (MuJoCo's control cost on them)
    if clip_actions:  # float64 bounds, as a is: np.clip of float64 and float32 costs 2x more
        low = env.action_space.low.astype(np.float64)
        high = env.action_space.high.astype(np.float64)
    x, _ = reset_env(env, env_seed)
    observed = [x] if keep_obs else None
    total, shaped = 0.0, 0.0  # the return, and Eq. (3)'s shaped return
    steps = 0
    while True:
        a = np.clip(W @ x - W_mu, low, high)  # Eq. (2), then the clip (the paper has none)
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
    run = Run(args)  # M_0 = 0 and stats (0, 0, 0), or both from --resume; the workers
    state = run.state
    target = args.target_return
    try:
        while state["iteration"] < args.iterations:
            if STOP.is_set():  # Ctrl-C or SIGTERM: the run ends with what it logged
                return run.end(state, "interrupted")
            new, info = ars_iteration(run.pool, state, args)  # N pairs, Eqs. (3)-(6)
            if not info["finite"]:
                return run.end(state, "diverged")  # the last good state is checkpointed
            ev = confirm = None
            if new["iteration"] % args.eval_every == 0 or new["iteration"] == args.iterations:
                ev = evaluate(run.pool, new, args, range(args.eval_episodes))
            reached = ev is not None and target is not None and ev.mean() >= target
            if reached and args.confirm_episodes:  # K fresh episodes must confirm the screen
                E = args.eval_episodes
                confirm = evaluate(run.pool, new, args, range(E, E + args.confirm_episodes))
                reached = confirm.mean() >= target
            state = new
            run.log(state, info, ev, confirm)  # progress.csv, the progress line, the checkpoint
            if reached:
                return run.end(state, "target")
        return run.end(state, "done")
    except WorkerDied as e:  # the run ends with its last logged iteration
        return run.end(state, "interrupted" if STOP.is_set() else f"stopped: {e}")
    finally:
        run.close()  # however it ends, the workers stop


# ---- plumbing: the command line, stops, workers, Ray, run directory, --play (not the math) ----
class Parser(argparse.ArgumentParser):
    """argparse, with a user's mistake in one line: 'SCRIPT: error: ... (see --help)', status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help shows every flag's default, and the presets as the table written below."""


def preset_table() -> str:  # --help's epilog: a row per preset, the flags by their symbols
    symbols = dict(alpha="α", nu="ν", n_directions="N", top_b="b", version="V", shift="shift")
    symbols.update(
        reward_clip="clip", iterations="T", eval_episodes="evals", target_return="target"
    )
    symbols.update(confirm_episodes="confirm")
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


def check(ok: bool, message: str):  # a user's mistake: one line, exit status 2, nothing written
    if not ok:
        build_parser().error(str(message).partition("\n")[0])  # whatever raised it, one line


# What a resumed run takes from its config.json; of these, only STEER may be given new values.
SAVED = "env seed iterations alpha nu n_directions top_b version shift reward_clip actions "
SAVED += "episode_length out_dir eval_every eval_episodes save_every target_return "
SAVED = (SAVED + "confirm_episodes video_every").split()
STEER = "iterations alpha nu target_return save_every video_every".split()  # and the workers


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
    check(args.top_b <= args.n_directions, f"--top-b must be <= --n-directions {args.n_directions}")
    try:
        env = gym.make(args.env)
    except (gym.error.Error, ImportError) as e:  # an unknown id, a missing extra, a retired version
        check(False, e)
    obs = env.observation_space
    act = env.action_space
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


def mujoco_warning(message: str):  # MuJoCo 3.3+ warns of gymnasium's settotalmass: not ours
    if "settotalmass" not in message:
        print(f"MuJoCo warning: {message.strip()}", file=sys.stderr)


def quiet_mujoco():  # MuJoCo's warnings through mujoco_warning, in the master and each worker
    with contextlib.suppress(ImportError):
        import mujoco

        mujoco.set_mju_user_warning(mujoco_warning)


SCRIPT = "ars.py"  # as its run directories name it
STOP = threading.Event()  # set by Ctrl-C or SIGTERM; train() ends the run after the iteration


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


class WorkerDied(Exception):
    """A worker process died, or a rollout failed: the run ends with its last logged iteration."""


def run_jobs(pool, args, params: tuple, jobs: list) -> list:
    """The results of jobs [(kind, k), ...] in their order, whichever worker ran each."""
    try:
        futures = [pool.submit(job, args, params, kind, k) for kind, k in jobs]
        return [future.result() for future in futures]
    except Exception as e:  # a worker died, or a rollout failed: one line, never a hang
        raise worker_died(e) from None


def worker_died(e: Exception) -> WorkerDied:  # what a worker's failure says, in one line
    if isinstance(e, (BrokenExecutor, EOFError, OSError)):
        # A worker, or the forkserver, died. The others end now: a pool that breaks while it is
        # still starting workers can miss one, and then wait for it forever.
        for worker in multiprocessing.active_children():
            worker.terminate()
        return WorkerDied("a worker process died")
    reason = str(e).strip().splitlines()[0] if str(e).strip() else ""  # raised in a worker,
    return WorkerDied(f"a rollout failed: {type(e).__name__}: {reason}")  # or Ray lost one


def make_pool(args):  # the workers: processes started at the first job, or Ray's
    if args.ray:
        return RayExecutor(args.ray_address)
    return ProcessPoolExecutor(args.workers, initializer=init_worker)


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


COLUMNS = (
    "iteration episodes env_steps wall_time_s return_mean return_std return_min return_max "
    "eval_return_mean eval_return_std steps_per_s sigma_R step_norm M_norm mean_length "
    "obs_count confirm_return_mean"
).split()


class Run:
    """The run directory and its files, the progress line, the workers, how a run ends."""

    def __init__(self, args):
        self.args = args
        p, n = args.dims
        stats = (0, np.zeros(n), np.zeros(n))  # (count, mean, m2) of no state yet
        self.state = dict(M=np.zeros((p, n)), iteration=0, episodes=0, env_steps=0, stats=stats)
        self.state["wall_time"] = 0.0
        self.rows = []  # progress.csv: a dict per iteration
        if args.resume is None:
            name = f"{args.env}__ars__{args.seed}__{time.strftime('%Y%m%d-%H%M%S')}"
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
        config = dict(vars(args), script="ars.py", **versions)
        write_file(os.path.join(self.dir, "config.json"), json.dumps(config, indent=1).encode())
        self.write_progress()
        variant = f"V{args.version}-t" if args.top_b < args.n_directions else f"V{args.version}"
        self.title = f"ARS {variant} on {args.env}"  # of progress.png
        self.t0 = time.time() - self.state["wall_time"]
        self.pool = make_pool(args)
        print(f"run directory: {self.dir}", flush=True)

    def close(self):  # the workers stop, once the episodes under way are done; the lock is lifted
        self.pool.shutdown(cancel_futures=True)
        self.lock.close()

    def write_progress(self):  # progress.csv, a row per iteration logged
        text = io.StringIO()
        table = csv.DictWriter(text, COLUMNS, lineterminator="\n")
        table.writeheader()
        table.writerows(self.rows)
        write_file(os.path.join(self.dir, "progress.csv"), text.getvalue().encode())

    def evaluations(self) -> list:  # (mean, iteration) of each evaluation logged so far
        means = [(float(row["eval_return_mean"]), int(row["iteration"])) for row in self.rows]
        return [(mean, it) for mean, it in means if not math.isnan(mean)]

    def log(self, state: dict, info: dict, ev, confirm):
        a = self.args
        it = state["iteration"]
        R, L = info["returns"], info["lengths"]  # of the 2N training episodes
        state["wall_time"] = time.time() - self.t0
        speed = L.sum() / info["seconds"]
        shown = ev if ev is not None else np.array([np.nan])
        row = dict(iteration=it, episodes=state["episodes"], env_steps=state["env_steps"])
        row.update(wall_time_s=round(state["wall_time"], 2), steps_per_s=round(speed, 1))
        row.update(return_mean=R.mean(), return_std=R.std(), return_min=R.min(), return_max=R.max())
        row.update(eval_return_mean=shown.mean())
        row.update(eval_return_std=shown.std() if shown.size > 1 else np.nan)
        row.update(sigma_R=info["sigma_R"], step_norm=info["step_norm"])
        row.update(M_norm=np.linalg.norm(state["M"]), mean_length=L.mean())
        confirmed = np.nan if confirm is None else confirm.mean()
        row.update(obs_count=state["stats"][0], confirm_return_mean=confirmed)
        self.rows.append(row)
        self.write_progress()
        evals = self.evaluations()
        evaluation = f"eval {evals[-1][0]:7.1f}" if evals else "eval       -"
        eta = (a.iterations - it) * state["wall_time"] / it / 60
        left = f"ETA {eta:5.1f} min"
        if a.target_return is not None:  # a run that reaches its target stops before the cap
            best = f"{max(mean for mean, _ in evals):.1f}" if evals else "-"
            evaluation += f" (best {best} of {a.target_return:g})"
            left = f"cap {a.iterations} in {eta:.1f} min"
        print(
            f"it {it:5d} | eps {state['episodes']:7d} | steps {state['env_steps']:10,d} | "
            f"return {R.mean():8.1f} (max {R.max():7.1f}) | {evaluation} | {speed:6.0f} "
            f"steps/s | {state['wall_time'] / 60:5.1f} min | {left}",
            flush=True,
        )
        if confirm is not None and confirm.mean() < a.target_return:
            print(
                f"  the evaluation {ev.mean():.1f} reached {a.target_return:g}, but its "
                f"{confirm.size} fresh episodes gave {confirm.mean():.1f}: the run goes on",
                flush=True,
            )
        if it % a.save_every == 0 or ev is not None:
            save_checkpoint(self.dir, state, a.env)
            write_file(os.path.join(self.dir, "progress.png"), plot(self.rows, self.title))
        if a.video_every and it % a.video_every == 0:
            os.makedirs(os.path.join(self.dir, "video"), exist_ok=True)
            write_file(os.path.join(self.dir, "video", f"iter_{it:06d}.gif"), film(a, state, it))

    def end(self, state: dict, status: str) -> dict:  # the checkpoint, the plot, the last line
        a = self.args
        save_checkpoint(self.dir, state, a.env)
        if self.rows:
            write_file(os.path.join(self.dir, "progress.png"), plot(self.rows, self.title))
        done = f"{state['iteration']}: {state['episodes']} episodes, {state['env_steps']} env steps"
        if status == "target":
            message = f"target {a.target_return} reached at iteration {done}"
        elif status == "done":
            message = f"done, iteration {done}"
            evals = self.evaluations()
            if a.target_return is not None and evals:
                best, at = max(evals, key=lambda evaluation: evaluation[0])  # the first best
                message += f"; the target {a.target_return} was not reached: the best evaluation "
                message += f"was {best:.1f}, at iteration {at}"
        elif status == "diverged":
            message = f"NaN or inf after iteration {done}; its checkpoint is kept (a smaller "
            message += "--alpha or --nu?)"
        else:
            again = shlex.join(["python", "ars.py", "--resume", self.dir])
            message = f"{status}: resume with  {again}"
        print(message, file=sys.stdout if status in ("target", "done") else sys.stderr)
        return dict(state, run_dir=self.dir, status=status)


def save_checkpoint(run_dir: str, state: dict, env_id: str):  # what --resume and --play read
    count, mean, m2 = state["stats"]
    saved = {key: value for key, value in state.items() if key != "stats"}
    data = io.BytesIO()
    np.savez(data, env=env_id, obs_count=count, obs_mean=mean, obs_m2=m2, **saved)
    for name in (f"iter_{state['iteration']:06d}.npz", "latest.npz"):
        write_file(os.path.join(run_dir, "checkpoints", name), data.getvalue())


def load_checkpoint(path: str, args) -> dict:  # the state save_checkpoint wrote, for args.env
    try:
        with np.load(path, allow_pickle=False) as f:
            c = {name: f[name] for name in f.files}
        stats = (int(c["obs_count"]), c["obs_mean"], c["obs_m2"])
        state = dict(M=c["M"], iteration=int(c["iteration"]), episodes=int(c["episodes"]))
        state.update(env_steps=int(c["env_steps"]), wall_time=float(c["wall_time"]), stats=stats)
        env = str(c["env"])
    except Exception as e:  # missing, not a zip, cut short, pickled, not ars.py's
        check(False, f"cannot read the checkpoint '{path}' ({type(e).__name__}: {e})")
    check(env == args.env, f"the checkpoint '{path}' is for {env}, not {args.env}")
    shape = tuple(args.dims)
    check(state["M"].shape == shape, f"the checkpoint '{path}' has no M of shape {shape}")
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


def film(args, state: dict, key: int) -> bytes:  # evaluation episode 0 of iteration `key`
    mu, inv_sigma = normalizer(state["stats"], args.version)
    env = gym.wrappers.RenderCollection(make_env(args.env, args.episode_length, render=True))
    env_seed = int(stream(args.seed, EVAL, key, 0).integers(2**31))
    rollout(env, state["M"], mu, inv_sigma, env_seed, clip_actions=args.actions == "clipped")
    return gif(env.render())


def gif(frames: list) -> bytes:  # every second frame (one a step), at half size, 12.5 per second
    from PIL import Image  # comes with matplotlib

    images = [Image.fromarray(frame[::2, ::2]) for frame in frames[::2]]
    data = io.BytesIO()
    images[0].save(data, format="GIF", save_all=True, append_images=images[1:], duration=80, loop=0)
    return data.getvalue()


def play(args) -> np.ndarray:  # --play RUN_DIR or RUN_DIR/checkpoints/iter_XXXXXX.npz
    run_dir = args.play
    checkpoint = os.path.join(run_dir, "checkpoints", "latest.npz")
    if args.play.endswith(".npz"):  # a checkpoint of a run directory
        checkpoint = args.play
        run_dir = os.path.abspath(os.path.join(checkpoint, "../.."))
    config = read_config(run_dir)
    for key in ("env", "version", "episode_length", "actions", "dims"):
        setattr(args, key, config[key])
    state = load_checkpoint(checkpoint, args)
    if args.video:
        os.makedirs(os.path.join(run_dir, "video"), exist_ok=True)
        path = os.path.join(run_dir, "video", f"{args.env}.gif")
        write_file(path, film(args, state, 10**6))
        print(f"video: {path}", flush=True)
    mu, inv_sigma = normalizer(state["stats"], args.version)
    params = (10**6, state["M"], mu, inv_sigma, 0.0)  # evaluation seeds no run uses
    R = np.array([job(args, params, "eval", i)[0] for i in range(args.episodes)])
    mean = f"mean return {R.mean():.1f} +- {R.std():.1f} over {args.episodes} episodes"
    spread = f"(min {R.min():.1f}, max {R.max():.1f})"
    print(f"{args.env}: {mean} {spread}, policy of iteration {state['iteration']}")
    return R


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else list(argv))
    if args.video or args.video_every:  # draw without a display, before MuJoCo loads its renderer
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame's
        if sys.platform == "linux":  # MuJoCo's (elsewhere, the system's own GL)
            os.environ.setdefault("MUJOCO_GL", "glfw" if os.environ.get("DISPLAY") else "egl")
    quiet_mujoco()  # its warnings on stderr, not in a file MUJOCO_LOG.TXT here
    stops = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        if args.play is not None:
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
