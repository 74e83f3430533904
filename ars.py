"""Augmented Random Search (ARS V1, V2, V1-t, V2-t) for continuous control. Mania, Guy & Recht
(2018), "Simple random search provides a competitive approach to reinforcement learning",
https://arxiv.org/abs/1803.07055; docs/ars.md derives the math, cited below as "Eq. (n)".

    python ars.py --env BipedalWalker-v3                    # walks in about 30 minutes on 2 cores
    python ars.py --play runs/<run-dir> --episodes 100 --video
"""

import argparse
import contextlib
import datetime
import functools
import json
import math
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import wait

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
    "BipedalWalker-v3": dict(
        alpha=0.02,
        nu=0.03,
        n_directions=32,
        top_b=16,
        reward_clip=10.0,
        iterations=1000,
        eval_episodes=20,
        target_return=300.0,
        confirm_episodes=100,
    ),  # docs/ars.md, "BipedalWalker-v3"
}
GENERIC = dict(
    env="BipedalWalker-v3",
    seed=0,
    alpha=0.05,
    nu=0.1,
    n_directions=32,
    top_b=16,
    shift=0.0,
    version=2,
    reward_clip=0.0,
    actions="clipped",
    iterations=300,
    eval_every=10,
    eval_episodes=10,
    save_every=10,
    confirm_episodes=0,
    out_dir="runs",
)
STEER = (
    "iterations",
    "workers",
    "target_return",
    "save_every",
    "video_every",
    "alpha",
    "nu",
    "ray",
    "ray_address",
)  # what --resume takes again: where a run goes on, or its step sizes


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ars.py",
        description=__doc__.split("\n")[0],
        epilog=(
            "presets: " + "; ".join(f"{e}: {d}" for e, d in PRESETS.items()) + f"; else: {GENERIC}"
        ),
    )
    p.error = lambda message: p.exit(2, f"ars.py: error: {message} (see --help)\n")
    a, n = p.add_argument, at_least  # unset flags come from the preset (below the banner)
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
    a("--video", action="store_true", help="with --play: RUN_DIR/video/<env>.gif of one episode")
    a("--ray", action="store_true", help="rollouts on Ray: a local instance, or RAY_ADDRESS")
    a("--ray-address", metavar="ADDRESS", help="with --ray: a cluster, e.g. 10.0.0.1:6379 or auto")
    return p


# ---- the math (docs/ars.md, Eqs. 1-6) ----
TRAIN, TRAIN_ENV, EVAL = 0, 1, 2  # first word of a stream key: what the stream is for


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
    (na, mean_a, m2_a), (nb, mean_b, m2_b) = a, b
    if (n := na + nb) == 0:
        return a
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
    env,
    M,
    mu,
    inv_sigma,
    env_seed: int,
    shift=0.0,
    reward_clip=0.0,
    keep_obs=False,
    frames=None,
    clip_actions=True,
) -> tuple:
    """One episode of a = clip(M (x - mu) / sigma) (Eq. 2): (return, shaped return, length,
    statistics of the states acted on if keep_obs). clip_actions=False: --actions raw."""
    W = M * inv_sigma  # the normalization folded into the matrix: a = W x - W mu, one product
    offset = -W @ mu
    # float64 bounds, as a is: np.maximum of float64 and float32 arrays costs nearly twice as much
    low, high = env.action_space.low.astype(np.float64), env.action_space.high.astype(np.float64)
    if not clip_actions:  # the official code's raw actions (MuJoCo charges control on them)
        low, high = np.full_like(low, -np.inf), np.full_like(high, np.inf)
    dot, add, maximum, minimum, step = np.dot, np.add, np.maximum, np.minimum, env.step
    x, _ = reset_env(env, env_seed)
    observed = [x] if keep_obs else None
    total, shaped, steps = 0.0, 0.0, 0
    while True:  # the hot path: np.clip(W @ x + offset, low, high) in place, in fewer calls
        a = dot(W, x)
        add(a, offset, out=a)
        maximum(a, low, out=a)
        minimum(a, high, out=a)
        x, r, terminated, truncated, _ = step(a)
        steps += 1
        total += r
        # Eq. (3)'s shaped reward: the paper's shift; the clip is our option (deviation)
        shaped += (max(-reward_clip, min(reward_clip, r)) if reward_clip else r) - shift
        if frames is not None:
            frames.append(env.render())
        if terminated or truncated:
            break
        if keep_obs:  # the state the next action sees; the terminal one is never acted on
            observed.append(x)
    stats = batch_stats(np.asarray(observed, dtype=np.float64)) if keep_obs else None
    return float(total), float(shaped), steps, stats


def job(env, args, params: tuple, kind: str, k: int) -> tuple:
    """("train", k): direction k's pair (Eq. 3) on one env seed; ("eval", k): noiseless, raw."""
    (iteration, M, mu, inv_sigma, nu), clip = params, args.actions == "clipped"
    if kind == "train":
        delta = sample_direction(args.seed, iteration, k, M.shape)
        env_seed = int(stream(args.seed, TRAIN_ENV, iteration, k).integers(2**31))
        return k, tuple(
            rollout(
                env,
                M + sign * nu * delta,
                mu,
                inv_sigma,
                env_seed,
                args.shift,
                args.reward_clip,
                True,
                clip_actions=clip,
            )
            for sign in (1, -1)
        )
    env_seed = int(stream(args.seed, EVAL, iteration, k).integers(2**31))
    return k, rollout(env, M, mu, inv_sigma, env_seed, clip_actions=clip)


# ---- training: Algorithm 2 of the paper (docs/ars.md, "Pseudocode") ----
def ars_iteration(pool, state: dict, args) -> tuple:
    """N mirrored pairs, the update of M from the top b, the merge of the statistics."""
    j, M, stats, N = state["iteration"], state["M"], state["stats"], args.n_directions
    mu, inv_sigma, t0 = *normalizer(stats, args.version), time.time()  # frozen all along (Eq. 2)
    out = pool.run((j, M, mu, inv_sigma, args.nu), [("train", k) for k in range(N)])  # Eq. (3)
    plus, minus = [out[k][0] for k in range(N)], [out[k][1] for k in range(N)]  # (R, shaped, L, s)
    direction = functools.partial(sample_direction, args.seed, j, shape=M.shape)  # delta_k again
    r_plus, r_minus = np.array([e[1] for e in plus]), np.array([e[1] for e in minus])
    M_new, sigma_R = ars_update(M, direction, r_plus, r_minus, args.alpha, args.top_b)  # (4)-(5)
    for k in range(N):  # Eq. (6), in direction order: any worker count gives the same bits
        stats = merge_stats(merge_stats(stats, plus[k][3]), minus[k][3])
    returns, lengths = (np.array([e[i] for e in plus + minus]) for i in (0, 2))  # (2N,) each
    new = dict(
        M=M_new,
        iteration=j + 1,
        episodes=state["episodes"] + 2 * N,
        stats=stats,
        env_steps=state["env_steps"] + int(lengths.sum()),
    )
    return new, dict(
        returns=returns,
        lengths=lengths,
        sigma_R=sigma_R,
        seconds=time.time() - t0,
        step_norm=np.linalg.norm(M_new - M),
        finite=all(np.isfinite(a).all() for a in (returns, M_new, stats[1], stats[2])),
    )


def evaluate(pool, state: dict, args, episodes: range) -> np.ndarray:  # the noiseless policy
    params = (state["iteration"], state["M"], *normalizer(state["stats"], args.version), args.nu)
    out = pool.run(params, [("eval", i) for i in episodes])
    return np.array([out[i][0] for i in episodes])


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
            E, K = args.eval_episodes, args.confirm_episodes  # fresh episodes confirm the screen
            confirm = evaluate(run.pool, new, args, range(E, E + K)) if screen and K else None
            run.log(new, info, ev, confirm)  # progress.csv, the progress line, the checkpoint
            confirmed = confirm is None or confirm.mean() >= args.target_return
            state, reached = new, screen and confirmed
            if reached:  # logged: from here on a stop keeps this iteration, and its target
                return run.end(state, "target")
        return run.end(state, "done")
    except (KeyboardInterrupt, WorkerDied) as e:  # Ctrl-C, SIGTERM, a dead worker: keep the last
        return run.end(state, "target" if reached else f"stopped: {e}" if str(e) else "interrupted")


# ---- plumbing: checks, workers, Ray, run directory, checkpoints, --play, main ----
class WorkerDied(Exception):
    """A rollout process or Ray actor is gone: the run stops with its last checkpoint."""


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


def configure(args) -> argparse.Namespace:
    """--resume's saved options, then the preset; what no one flag can check; the workers."""
    if args.resume is not None:
        fixed = {k for k, v in vars(args).items() if v is not None and v is not False}
        fixed = sorted(fixed - {"resume", *STEER})  # given on the command line, and not in STEER
        check(
            not fixed,
            f"--{', --'.join(fixed).replace('_', '-')} cannot change a resumed run; "
            f"only --{', --'.join(STEER).replace('_', '-')} can",
        )
        for key, value in read_config(args.resume).items():
            if getattr(args, key, False) is None and key not in ("workers", "ray_address"):
                setattr(args, key, value)
    for key, value in {**GENERIC, **PRESETS.get(args.env or GENERIC["env"], {})}.items():
        setattr(args, key, value if getattr(args, key) is None else getattr(args, key))
    check(args.top_b <= args.n_directions, f"--top-b must be <= --n-directions {args.n_directions}")
    try:
        obs, act = (env := gym.make(args.env)).observation_space, env.action_space
    except (gym.error.Error, ImportError) as e:  # an unknown id, a missing extra, a retired version
        check(False, e)
    check(
        isinstance(act, gym.spaces.Box) and len(obs.shape or ()) == 1,
        f"{args.env} has {act} "
        "actions: ARS takes a flat Box of observations and Box actions (discrete: es_basic.py)",
    )
    check(
        env.spec.max_episode_steps or args.episode_length,
        f"{args.env} has no time limit: give --episode-length",
    )
    args.dims = [act.shape[0], obs.shape[0]]  # M: (p, n)
    args.ray = args.ray or bool(args.ray_address)  # an address says where Ray is: it means --ray
    ray = args.ray and start_ray(args.ray_address)  # found, or refused, before anything is written
    args.workers = args.workers or (int(ray.cluster_resources()["CPU"]) if ray else os.cpu_count())
    return args


def make_env(args, render=False):
    kw = dict(max_episode_steps=args.episode_length) if args.episode_length else {}
    env = gym.make(args.env, **kw, **({"render_mode": "rgb_array"} if render else {}))
    if (
        render
        and (m := getattr(env.unwrapped, "model", None))
        and "track"
        in [  # MuJoCo: the
            m.camera(i).name for i in range(m.ncam)
        ]
    ):  # camera that follows the body
        env = gym.make(args.env, camera_name="track", render_mode="rgb_array", **kw)
    return env


def reset_env(env, seed: int):
    """env.reset(seed); BipedalWalker's old Box2D world would change the episode: a new one."""
    if type(walker := env.unwrapped).__name__ == "BipedalWalker" and walker.terrain:
        walker._destroy()
        walker.world = type(walker.world)()
    return env.reset(seed=seed)


def worker(conn, args):  # a rollout process: the parameters once per iteration, then job names
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches every process: the master acts
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform == "linux":  # PR_SET_PDEATHSIG: end with the master, even one killed -9
        __import__("ctypes").CDLL(None).prctl(1, signal.SIGKILL)
    env, params = make_env(args), None
    while msg := conn.recv():
        if msg[0] == "params":
            params = msg[1]
        else:
            conn.send(job(env, args, params, *msg))


class Workers:
    """Processes started once per run; each iteration sends them the parameters once, then one job
    at a time to whichever is free, so that long and short episodes balance out."""

    def __init__(self, args):
        ctx = mp.get_context("fork" if sys.platform == "linux" else "spawn")
        self.conns, self.procs = [], []
        for _ in range(args.workers):  # the worker's end closed here before the next fork:
            parent, child = ctx.Pipe()  # if the worker dies, its pipe ends (EOFError)
            (p := ctx.Process(target=worker, args=(child, args), daemon=True)).start()
            child.close()
            self.conns, self.procs = self.conns + [parent], self.procs + [p]

    def run(self, params: tuple, jobs: list) -> dict:
        results, pending, free = {}, jobs[::-1], list(self.conns)
        try:
            [c.send(("params", params)) for c in self.conns]
            while pending or len(free) < len(self.conns):
                while free and pending:
                    free.pop().send(pending.pop())
                for c in wait([c for c in self.conns if c not in free]):
                    k, results[k] = c.recv()
                    free.append(c)
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


class RayWorker:  # a Ray actor: an environment, and the parameters fetched once per iteration
    def __init__(self, args):
        self.args, self.env, self.key, self.params = args, None, None, None

    def run(self, key: int, ref: list, kind: str, k: int) -> tuple:
        if self.key != key:  # ref = [reference]: a bare one would be fetched for every job
            self.key, self.params = key, __import__("ray").get(ref[0])
        self.env = self.env or make_env(self.args)
        return job(self.env, self.args, self.params, kind, k)


class RayPool:
    """Workers' interface on Ray actors spread over the nodes. Ray restarts a lost actor and runs
    its jobs again, 3 times at most: a job names its own randomness, so results do not change."""

    def __init__(self, args):
        self.ray = ray = start_ray(args.ray_address)
        actor = ray.remote(num_cpus=1, max_restarts=3, max_task_retries=3)(RayWorker)
        self.actors = [
            actor.options(scheduling_strategy="SPREAD").remote(args) for _ in range(args.workers)
        ]
        self.key = 0

    def run(self, params: tuple, jobs: list) -> dict:
        ray, self.key, ref, pending, inflight, results = (
            self.ray,
            self.key + 1,
            [self.ray.put(params)],
            jobs[::-1],
            {},
            {},
        )
        for actor in self.actors * 2 + [None] * len(jobs):  # two jobs queued per actor, then as
            if actor is None:  # results come: each freed actor takes the next job
                done, _ = ray.wait(list(inflight), num_returns=1, timeout=300)
                if not done:
                    raise WorkerDied("no result from the Ray workers in 300 s")
                try:
                    k, results[k] = ray.get(done[0])
                except ray.exceptions.RayActorError as e:
                    raise WorkerDied(f"a Ray worker was lost 3 times ({str(e).splitlines()[0]})")
                actor = inflight.pop(done[0])
            if pending:
                inflight[actor.run.remote(self.key, ref, *pending.pop())] = actor
        return results

    def close(self):
        [self.ray.kill(actor, no_restart=True) for actor in self.actors]


COLUMNS = (
    "iteration episodes env_steps wall_time_s return_mean return_std return_min return_max "
    "eval_return_mean eval_return_std steps_per_s sigma_R step_norm M_norm mean_length "
    "obs_count confirm_return_mean"
).split()


class Run:
    """The run directory, the progress line, the checkpoints, the workers, how a run ends."""

    def __init__(self, args):
        self.state = dict(
            M=np.zeros(args.dims),
            iteration=0,
            episodes=0,
            env_steps=0,
            wall_time=0.0,
            stats=(0, *np.zeros((2, args.dims[1]))),
        )  # M_0 = 0
        self.dir, self.args, self.ev, rows = args.resume, args, np.nan, []
        if args.resume:  # the log up to the checkpoint: a resumed run redoes what came after it
            self.state = load_checkpoint(os.path.join(self.dir, "checkpoints", "latest.npz"), args)
            rows = [
                r
                for r in open(os.path.join(self.dir, "progress.csv")).read().splitlines()[1:]
                if int(r.split(",")[0]) <= self.state["iteration"]
            ]
        try:
            if not args.resume:
                self.dir = os.path.join(
                    args.out_dir,
                    f"{args.env}__ars__{args.seed}__{datetime.datetime.now():%Y%m%d-%H%M%S}",
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
                        "script": "ars.py",
                        "git_commit": git,
                        "avx512": "avx512f" in cpu,
                        "numpy": np.__version__,
                        "gymnasium": gym.__version__,
                    },
                    f,
                )
            with open(os.path.join(self.dir, "progress.csv"), "w") as f:
                f.write("\n".join([",".join(COLUMNS), *rows]) + "\n")
        except OSError as e:
            check(False, f"cannot write {e.filename}: {e.strerror} (choose another --out-dir)")
        self.csv, self.t0 = open(f.name, "a"), time.time() - self.state["wall_time"]
        __import__("matplotlib.figure")  # here: a stop that cut this import short breaks every plot
        self.pool = (RayPool if args.ray else Workers)(args)
        print(f"run directory: {self.dir}", flush=True)

    def log(self, state: dict, info: dict, ev, confirm):
        a, it, R, L = self.args, state["iteration"], info["returns"], info["lengths"]
        state["wall_time"] = time.time() - self.t0
        ev, confirm = (np.array([np.nan]) if x is None else x for x in (ev, confirm))
        speed, self.ev = L.sum() / info["seconds"], self.ev if np.isnan(ev).all() else ev.mean()
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
            ev.std() if ev.size > 1 else np.nan,
            round(speed, 1),
            info["sigma_R"],
            info["step_norm"],
            np.linalg.norm(state["M"]),
            L.mean(),
            state["stats"][0],
            confirm.mean(),
            sep=",",
            file=self.csv,
            flush=True,
        )
        eta = (a.iterations - it) * state["wall_time"] / it / 60
        print(
            f"it {it:5d} | eps {state['episodes']:7d} | steps {state['env_steps']:10,d} | "
            f"return {R.mean():8.1f} (max {R.max():7.1f}) | eval {self.ev:7.1f} | {speed:6.0f} "
            f"steps/s | {state['wall_time'] / 60:5.1f} min | ETA {eta:5.1f} min",
            flush=True,
        )
        if it % a.save_every == 0 or not np.isnan(ev).all():
            save_checkpoint(self.dir, state, a.env)
            plot(self.dir, f"ARS V{a.version}{'-t' * (a.top_b < a.n_directions)} on {a.env}")
        if a.video_every and it % a.video_every == 0:
            write_gif(a, state, os.path.join(self.dir, "video", f"iter_{it:06d}.gif"), it)

    def end(self, state: dict, status: str) -> dict:
        """Stops the workers; the last logged state checkpointed and plotted; the last line."""
        self.pool.close()
        self.csv.close()
        save_checkpoint(self.dir, state, self.args.env)
        c, a = state, self.args  # the plot, once an iteration is logged, gives the best evaluation
        best, at = plot(self.dir, f"ARS on {a.env}") if c["iteration"] else (np.nan, 0)
        done = f"{c['iteration']}: {c['episodes']} episodes, {c['env_steps']} env steps"
        print(
            {
                "target": f"target {a.target_return} reached at iteration {done}",
                "done": (
                    f"done, iteration {done}"
                    + (
                        f"; the target {a.target_return} was not reached: the best"
                        f" evaluation was {best:.1f}, at iteration {at:.0f}"
                        if a.target_return
                        else ""
                    )
                ),
                "diverged": f"NaN or inf after iteration {done}; its checkpoint is kept (a smaller "
                "--alpha or --nu?)",
            }.get(status, f"{status}: resume with  python ars.py --resume {self.dir}"),
            file=sys.stdout if status in ("target", "done") else sys.stderr,
        )
        return dict(state, run_dir=self.dir, status=status)


def save_checkpoint(run_dir: str, state: dict, env_id: str):  # written whole, then renamed
    (n, mean, m2), c = state["stats"], {k: v for k, v in state.items() if k != "stats"}
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # a stop
    try:  # waits for the files
        for name in (f"iter_{state['iteration']:06d}.npz", "latest.npz"):
            np.savez(
                tmp := os.path.join(run_dir, "checkpoints", "tmp.npz"),
                **c,
                env=env_id,
                obs_count=n,
                obs_mean=mean,
                obs_m2=m2,
            )
            os.replace(tmp, os.path.join(run_dir, "checkpoints", name))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def load_checkpoint(path: str, args) -> dict:  # the state saved by save_checkpoint, checked
    p, n = args.dims
    c = read_checkpoint(
        path,
        dict(
            M=((p, n), "finite"),
            obs_mean=((n,), "finite"),
            obs_m2=((n,), "nonnegative"),
            obs_count=((), "count"),
            iteration=((), "count"),
            episodes=((), "count"),
            env_steps=((), "count"),
            wall_time=((), "nonnegative"),
            env=((), "any"),
        ),
        args.env,
    )
    return dict(
        M=c["M"],
        iteration=int(c["iteration"]),
        episodes=int(c["episodes"]),
        env_steps=int(c["env_steps"]),
        wall_time=float(c["wall_time"]),
        stats=(int(c["obs_count"]), c["obs_mean"], c["obs_m2"]),
    )


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


def read_config(run_dir: str) -> dict:  # config.json of a run directory of ars.py
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            by = (cfg := json.load(f)).get("script")
    except (OSError, ValueError, AttributeError):
        by = None
    check(
        by == "ars.py",
        f"'{run_dir}' is a run directory of {by}, not of ars.py; use python {by} with it"
        if by
        else f"'{run_dir}' is not a run directory of ars.py",
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


def write_gif(args, state: dict, path: str, key: int = 10**6) -> str:
    """Evaluation episode 0 of iteration `key` as a GIF, every second frame at half size."""
    from PIL import Image  # comes with matplotlib

    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame draws without a display
    os.environ.setdefault("MUJOCO_GL", "glfw" if os.environ.get("DISPLAY") else "egl")
    mu, inv_sigma = normalizer(state["stats"], args.version)
    frames, env_seed = [], int(stream(args.seed, EVAL, key, 0).integers(2**31))
    rollout(
        make_env(args, render=True),
        state["M"],
        mu,
        inv_sigma,
        env_seed,
        frames=frames,
        clip_actions=args.actions == "clipped",
    )
    images = [Image.fromarray(f[::2, ::2]) for f in frames[::2]]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=80, loop=0)
    return path


def play(args) -> np.ndarray:  # --play RUN_DIR or RUN_DIR/checkpoints/iter_XXXXXX.npz
    ckpt = args.play if args.play.endswith(".npz") else f"{args.play}/checkpoints/latest.npz"
    run_dir = args.play if ckpt != args.play else os.path.abspath(os.path.join(ckpt, "../.."))
    cfg, args.seed, episodes = read_config(run_dir), args.seed or 0, args.episodes or 10
    vars(args).update({k: cfg[k] for k in ("env", "version", "episode_length", "actions", "dims")})
    state = load_checkpoint(ckpt, args)
    if args.video:
        print(f"video: {write_gif(args, state, os.path.join(run_dir, 'video', f'{args.env}.gif'))}")
    mu, inv_sigma, env = *normalizer(state["stats"], args.version), make_env(args)
    R = np.array(
        [
            rollout(
                env,
                state["M"],
                mu,
                inv_sigma,
                int(stream(args.seed, EVAL, 10**6, i).integers(2**31)),
                clip_actions=args.actions == "clipped",
            )[0]
            for i in range(episodes)
        ]
    )
    print(
        f"{args.env}: mean return {R.mean():.1f} +- {R.std():.1f} over {episodes} episodes "
        f"(min {R.min():.1f}, max {R.max():.1f}), policy of iteration {state['iteration']}"
    )
    return R


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
    check(
        args.play is not None or not (args.video or args.episodes),
        "--video and --episodes go with --play RUN_DIR",
    )
    try:
        result = play(args) if args.play is not None else train(configure(args))
    except OSError as e:  # a --video folder that takes no file, a disk full (the checkpoints stay)
        check(False, f"cannot write {e.filename}: {e.strerror}")
    except KeyboardInterrupt:  # during --play, or while a run starts
        sys.exit(130)
    if args.play is None and result["status"] not in ("done", "target"):
        sys.exit(130 if result["status"] == "interrupted" else 1)
    return result


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops a run like Ctrl-C
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even in a job started with '&'
    main()
