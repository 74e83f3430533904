"""Vanilla natural evolution strategies with mirrored sampling: the smallest readable ES.
Salimans et al. (2017), "Evolution Strategies as a Scalable Alternative to Reinforcement
Learning", Algorithm 1, https://arxiv.org/abs/1703.03864; docs/es_basic.md derives the math.

    python es_basic.py --env CartPole-v1               # solves it in seconds
    python es_basic.py --play runs/<run-dir> --video   # evaluates the saved policy, films it
"""

import argparse
import contextlib
import csv
import ctypes
import functools
import json
import math
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import BrokenExecutor, ProcessPoolExecutor

import gymnasium as gym
import numpy as np

# ---- configuration: presets, then the command line (a flag overrides its preset) ----
# sigma: noise std, alpha: step size, population n: episodes per iteration (docs/es_basic.md)
PRESETS = {
    "CartPole-v1": dict(
        alpha=0.05, iterations=100, eval_every=5, eval_episodes=100, target_return=475.0
    ),
    "LunarLander-v3": dict(
        population=200, hidden=(), iterations=500, eval_episodes=100, target_return=200.0
    ),
}
# What a preset leaves unset, and every other environment:
GENERIC = dict(sigma=0.1, alpha=0.03, population=50, hidden=(16,), iterations=200)
GENERIC.update(eval_every=10, eval_episodes=20)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="es_basic.py",
        description=__doc__.split("\n")[0],
        epilog=f"presets: {PRESETS}; unset by a preset, and any other environment: {GENERIC}",
    )
    a = p.add_argument  # the types (below the banner) refuse impossible values in one line
    a("--env", default="CartPole-v1", help="default CartPole-v1; Discrete or bounded Box actions")
    a("--seed", type=at_least(0), default=0, help="decides every random number (default 0)")
    a("--iterations", type=at_least(1), help="updates of theta (preset)")
    a("--sigma", type=at_least(0, float), help="σ, std of the parameter noise (typ. 0.02-0.2)")
    a("--alpha", type=at_least(0, float), help="α, step size (typ. 0.01-0.1)")
    a("--population", type=at_least(2), help="n, episodes per iteration, even if mirrored")
    a("--no-mirror", dest="mirror", action="store_false", help="n independent eps_i, no pairs")
    a("--fitness", choices=("rank", "standardize", "none"), default="rank", help="Eq. (4)")
    a("--weight-decay", type=float, default=0.0, help="λ, L2 coefficient (typ. 0-0.01)")
    a("--hidden", type=sizes, help="hidden layer sizes: 16, 64,64, or '' for linear (preset)")
    a("--activation", choices=("tanh", "relu"), default="tanh", help="hidden nonlinearity")
    a("--workers", type=at_least(1), default=1, help="processes for the episodes (default 1)")
    a("--out-dir", default="runs", help="where run directories are made (default runs)")
    a("--eval-every", type=at_least(1), help="evaluate theta every K iterations (preset)")
    a("--eval-episodes", type=at_least(1), help="episodes per evaluation (preset)")
    a("--target-return", type=float, help="stop once an evaluation's mean reaches it (preset)")
    a("--play", metavar="RUN_DIR", help="evaluate the policy saved in RUN_DIR, then exit")
    a("--episodes", type=at_least(1), default=10, help="episodes for --play (default 10)")
    a("--video", action="store_true", help="with --play: RUN_DIR/video/<env>.gif of one episode")
    return p


# ---- the math (docs/es_basic.md, Eqs. 1-6) ----
NOISE = 0  # the first word of a random stream's name: what its numbers are for
ENV = 1
EVAL = 2


def stream(seed: int, *key: int) -> np.random.Generator:
    """An independent random stream named by what it is for: key = (purpose, iteration, index)."""
    return np.random.default_rng(np.random.SeedSequence([seed, *key]))


def sample_eps(seed: int, t: int, i: int, d: int) -> np.ndarray:
    """eps_i ~ N(0, I_d) of iteration t (Eq. 2), made again from its name wherever it is used."""
    return stream(seed, NOISE, t, i).standard_normal(d)


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Eq. (4): the rank of each value mapped linearly onto [-0.5, 0.5]. Equal values share their
    average rank, so a mirrored pair with equal returns contributes nothing."""
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(len(x))
    _, tie, count = np.unique(x, return_inverse=True, return_counts=True)
    ranks = (np.bincount(tie, weights=ranks) / count)[tie]
    return ranks / max(len(x) - 1, 1) - 0.5


def shape_fitness(R: np.ndarray, method: str) -> np.ndarray:
    """F_i from the returns R_i: centered ranks (Eq. 4), standardized returns, or R itself."""
    if method == "rank":
        return centered_ranks(R)
    if method == "standardize":
        return (R - R.mean()) / (R.std() + 1e-8)
    return R


def es_gradient(eps: np.ndarray, F: np.ndarray, sigma: float, mirror: bool) -> np.ndarray:
    """Eq. (3), or Eq. (5) mirrored. eps: (m, d); F: (n,), mirrored [F_1+, F_1-, F_2+, ...]."""
    if mirror:  # (1 / (n sigma)) sum_i (F_i+ - F_i-) eps_i, with m = n / 2
        return (F[0::2] - F[1::2]) @ eps / (len(F) * sigma)
    return F @ eps / (len(F) * sigma)  # (1 / (n sigma)) sum_i F_i eps_i, with m = n


# ---- the policy: an MLP whose weights are views into one flat theta; its episodes ----
def n_weights(sizes: list) -> int:
    """d, the number of weights and biases of an MLP with these layer sizes."""
    return sum((n_in + 1) * n_out for n_in, n_out in zip(sizes, sizes[1:]))


def unflatten(theta: np.ndarray, sizes: list) -> list:
    """Views [(W, b), ...] into theta: W of shape (n_out, n_in), then b of shape (n_out,)."""
    layers = []
    for n_in, n_out in zip(sizes, sizes[1:]):
        W = theta[: n_in * n_out].reshape(n_out, n_in)
        b = theta[n_in * n_out : (n_in + 1) * n_out]
        layers.append((W, b))
        theta = theta[(n_in + 1) * n_out :]  # the next layer's weights follow
    return layers


def act(layers: list, obs: np.ndarray, activation: str, space):
    """The MLP's output y; Discrete: argmax over y, Box: tanh(y) squashed onto [low, high]."""
    for W, b in layers[:-1]:  # the hidden layers
        obs = np.tanh(W @ obs + b) if activation == "tanh" else np.maximum(W @ obs + b, 0.0)
    W, b = layers[-1]
    y = W @ obs + b
    if isinstance(space, gym.spaces.Discrete):
        return int(np.argmax(y))
    return space.low + (np.tanh(y) + 1.0) * 0.5 * (space.high - space.low)


def rollout(env, theta: np.ndarray, args, seeds: np.random.Generator) -> tuple:
    """One episode of the policy theta, on an environment seed drawn from seeds: (R, length)."""
    layers = unflatten(theta, args.sizes)
    obs, _ = env.reset(seed=int(seeds.integers(2**31)))
    total, steps = 0.0, 0  # the return R and the episode's length
    while True:
        action = act(layers, obs, args.activation, env.action_space)
        obs, r, terminated, truncated, _ = env.step(action)
        total += float(r)
        steps += 1
        if terminated or truncated:
            return total, steps


def member_episode(args, theta: np.ndarray, t: int, j: int) -> tuple:
    """Eq. (2): member j plays theta + sigma eps_j; mirrored, theta +/- sigma eps_(j // 2), the
    pair on one environment seed, so that its two returns differ by the noise alone."""
    i = j // 2 if args.mirror else j
    sign = -1.0 if args.mirror and j % 2 else 1.0
    theta_j = theta + sign * args.sigma * sample_eps(args.seed, t, i, theta.size)
    return rollout(env_of(args.env), theta_j, args, stream(args.seed, ENV, t, i))


def eval_episode(args, theta: np.ndarray, t: int, k: int) -> tuple:
    """Evaluation episode k of theta itself, on the evaluation seeds of iteration t."""
    return rollout(env_of(args.env), theta, args, stream(args.seed, EVAL, t, k))


# ---- training: Algorithm 1 (docs/es_basic.md, "Pseudocode") ----
def train(args) -> dict:
    n = args.population
    theta = np.zeros(n_weights(args.sizes))  # theta_0 = 0, as in the NES exercise: (d,)
    run = Run(args, theta)  # the run directory, the progress line, the workers (below)
    try:
        for t in range(args.iterations):
            R, lengths = run.episodes(member_episode, theta, t, n)  # (n,): R_j, Eq. (2)
            F = shape_fitness(R, args.fitness)  # Eq. (4)
            m = n // 2 if args.mirror else n
            eps = np.stack([sample_eps(args.seed, t, i, theta.size) for i in range(m)])  # (m, d)
            g = es_gradient(eps, F, args.sigma, args.mirror)  # Eqs. (3), (5)
            # Eq. (6), a plain gradient step (deviation: the paper's reference code uses Adam)
            theta = theta + args.alpha * g - args.alpha * args.weight_decay * theta
            if not (np.isfinite(theta).all() and np.isfinite(R).all()):
                return run.end("diverged")  # the saved policy stays the last logged one
            ev = None
            if (t + 1) % args.eval_every == 0 or t + 1 == args.iterations:
                ev, _ = run.episodes(eval_episode, theta, t + 1, args.eval_episodes)
            run.log(theta, R, lengths, g, ev)  # progress.csv, the progress line, the policy
            target = args.target_return
            if ev is not None and target is not None and ev.mean() >= target:
                return run.end("target")
        return run.end("done")
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the run ends with what it logged
        return run.end("interrupted")
    except BrokenExecutor:  # a worker process died: the same, with exit status 1
        return run.end("stopped: a worker process died")


# ---- plumbing: checks, workers, run directory, plot, --play, main (not the algorithm) ----
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


def sizes(text: str) -> tuple:  # --hidden 64,64 -> (64, 64); '' -> () for a linear policy
    return tuple(at_least(1)(h) for h in text.split(",") if h.strip())


def configure(args) -> argparse.Namespace:  # the preset, what no one flag can check, the layers
    preset = {**GENERIC, **PRESETS.get(args.env, {})}
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    even = not args.mirror or args.population % 2 == 0
    check(even, "--population must be even with mirrored sampling (or add --no-mirror)")
    try:
        env = gym.make(args.env)
    except (gym.error.Error, ImportError) as e:  # an unknown id, a missing extra, a retired version
        check(False, e)
    obs, act = env.observation_space, env.action_space
    box = isinstance(act, gym.spaces.Box) and np.isfinite(np.r_[act.low, act.high]).all()
    ok = len(obs.shape or ()) == 1 and (box or isinstance(act, gym.spaces.Discrete))
    takes = "es_basic.py takes Box observations, Discrete or bounded Box actions"
    check(ok, f"{args.env}: {obs}, {act}; {takes}")
    args.sizes = [obs.shape[0], *args.hidden, act.shape[0] if box else int(act.n)]
    return args


@functools.cache
def env_of(env_id: str):  # this process's environment, made for its first episode
    return gym.make(env_id)


PR_SET_PDEATHSIG = 1  # Linux prctl: a signal for this process when the process that made it ends
STOPS = {signal.SIGINT, signal.SIGTERM}  # Ctrl-C, and the stop a job scheduler sends


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
    "iteration episodes env_steps wall_time_s return_mean return_std return_min return_max"
    " eval_return_mean eval_return_std steps_per_s grad_norm theta_norm mean_length elite"
).split()


class Run:
    """The run directory, the progress line, and the workers (theta out, returns back)."""

    def __init__(self, args, theta):
        name = f"{args.env}__es_basic__{args.seed}__{time.strftime('%Y%m%d-%H%M%S')}"
        self.dir = os.path.join(args.out_dir, name)
        os.makedirs(self.dir)  # an OSError here: one line (main)
        write_config(self.dir, args, "es_basic.py")
        self.file = open(os.path.join(self.dir, "progress.csv"), "w")  # noqa: SIM115 (the run's)
        self.csv = csv.DictWriter(self.file, COLUMNS, lineterminator="\n")
        self.csv.writeheader()
        self.args = args
        self.theta = theta
        self.counts = dict(iteration=0, episodes=0, env_steps=0)  # so far
        self.t0 = time.time()
        self.last = 0.0  # when the last iteration was logged
        self.ev = np.nan  # the last evaluation's mean, shown until the next one
        self.pool = None
        if args.workers > 1:
            self.pool = ProcessPoolExecutor(args.workers, initializer=init_worker)
        print(f"run directory: {self.dir}", flush=True)

    def episodes(self, episode, theta: np.ndarray, t: int, n: int) -> tuple:
        """(returns, lengths) of episode(args, theta, t, j) for j < n, in the order of j."""
        play = functools.partial(episode, self.args, theta, t)  # theta travels once per chunk
        if self.pool is None:
            out = list(map(play, range(n)))
        else:
            with stops_held():
                out = list(self.pool.map(play, range(n), chunksize=-(-n // self.args.workers)))
        returns, lengths = zip(*out)
        return np.array(returns), np.array(lengths)

    def log(self, theta, R, lengths, g, ev):
        took = time.time() - self.t0
        speed = lengths.sum() / (took - self.last)  # the iteration's steps per second
        self.last = took
        self.theta = theta
        c = self.counts
        c["iteration"] += 1
        c["episodes"] += len(R)
        c["env_steps"] += int(lengths.sum())
        if ev is None:
            ev = np.array([np.nan])
        else:
            self.ev = ev.mean()
        row = dict(c, wall_time_s=round(took, 2), steps_per_s=round(speed, 1))
        row.update(return_mean=R.mean(), return_std=R.std(), return_min=R.min(), return_max=R.max())
        row.update(eval_return_mean=ev.mean(), eval_return_std=ev.std() if ev.size > 1 else np.nan)
        row.update(grad_norm=np.linalg.norm(g), theta_norm=np.linalg.norm(theta))
        row.update(mean_length=lengths.mean(), elite=(R > R.mean()).sum())
        self.csv.writerow(row)
        self.file.flush()
        eta = (self.args.iterations / c["iteration"] - 1) * took
        print(
            f"it {c['iteration']:5d} | eps {c['episodes']:7d} | steps {c['env_steps']:10,d}"
            f" | return {R.mean():8.1f} (max {R.max():7.1f}) | eval {self.ev:7.1f} | {speed:6.0f}"
            f" steps/s | {took:5.0f} s | ETA {eta:5.0f} s",
            flush=True,
        )

    def end(self, status: str) -> dict:  # the workers stop; policy.npz, progress.png; the result
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)  # once the episodes under way are done
        self.file.close()
        a = self.args
        c = self.counts
        policy = dict(theta=self.theta, iteration=c["iteration"], env=a.env, sizes=a.sizes)
        tmp = os.path.join(self.dir, "tmp.npz")  # written whole, then renamed
        np.savez(tmp, **policy, activation=a.activation)
        os.replace(tmp, os.path.join(self.dir, "policy.npz"))
        if c["iteration"]:
            plot(self.dir, f"es_basic.py on {a.env}")
        ended = sys.stdout if status in ("target", "done") else sys.stderr
        done = f"{c['episodes']} episodes, {c['env_steps']} env steps"
        print(f"{status} after iteration {c['iteration']}: {done}", file=ended)
        return dict(c, theta=self.theta, status=status, run_dir=self.dir)


def plot(run_dir: str, title: str):  # progress.png: returns, and elite members below them
    from matplotlib.figure import Figure

    c = np.atleast_1d(np.genfromtxt(f"{run_dir}/progress.csv", delimiter=",", names=True))
    ok = ~np.isnan(c["eval_return_mean"])
    fig = Figure((7, 5))  # fixed margins: a tight layout costs as much as the drawing
    margins = dict(left=0.12, right=0.97, bottom=0.1, top=0.94, hspace=0.25)
    top, low = fig.subplots(2, height_ratios=(3, 1), gridspec_kw=margins)
    top.fill_between(c["env_steps"], c["return_min"], c["return_max"], alpha=0.2, label="range")
    top.plot(c["env_steps"], c["return_mean"], label="training (mean)")
    top.plot(c["env_steps"][ok], c["eval_return_mean"][ok], "o-", label="evaluation (mean)")
    top.set(ylabel="return", title=title)
    top.legend(loc="lower right")
    low.plot(c["env_steps"], c["elite"], color="gray")
    low.set(xlabel="environment steps", ylabel="elite members", ylim=(0, None))
    fig.savefig(os.path.join(run_dir, "progress.png"), dpi=90)


def play(args) -> np.ndarray:  # the saved policy on evaluation seeds; --video films the first
    path = os.path.join(args.play, "policy.npz")  # it names its environment and layers
    policy = read_policy(path)
    args.env = str(policy["env"])
    args.activation = str(policy["activation"])
    sizes = [int(n) for n in np.ravel(policy["sizes"])]
    args.hidden = tuple(sizes[1:-1])
    configure(args)  # the environment's layer sizes, which the policy's must be
    theta = policy["theta"]
    fits = sizes == args.sizes and theta.shape == (n_weights(sizes),)
    check(fits, f"the policy '{path}' does not fit {args.env}'s layers {args.sizes}")
    if args.video:
        from PIL import Image  # comes with matplotlib

        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame draws without a display
        env = gym.wrappers.RenderCollection(gym.make(args.env, render_mode="rgb_array"))
        rollout(env, theta, args, stream(args.seed, EVAL, 10**6, 0))  # the first episode below
        path = os.path.join(args.play, "video", f"{args.env}.gif")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # every second frame RenderCollection kept (one a step), at half size, 12.5 per second
        images = [Image.fromarray(frame[::2, ::2]) for frame in env.render()[::2]]
        images[0].save(path, save_all=True, append_images=images[1:], duration=80, loop=0)
        print(f"video: {path}", flush=True)
    R = np.array([eval_episode(args, theta, 10**6, k)[0] for k in range(args.episodes)])
    print(
        f"{args.env}: mean return {R.mean():.1f} +- {R.std():.1f} over {len(R)} episodes "
        f"(min {R.min():.1f}, max {R.max():.1f}), policy of iteration {int(policy['iteration'])}"
    )
    return R


def read_policy(path: str) -> dict:  # policy.npz, checked: a damaged file is one line, status 2
    check(os.path.isfile(path), f"there is no file '{path}'")
    names = ("theta", "iteration", "env", "sizes", "activation")  # as Run.end saves them
    try:
        with np.load(path, allow_pickle=False) as f:
            policy = {name: f[name] for name in names}
    except Exception as e:  # empty, cut short, not a zip, a bad CRC, pickled, an array missing
        reason = str(e).split(". ")[0]  # numpy's advice to unpickle an untrusted file left out
        check(False, f"cannot read the policy '{path}': {type(e).__name__}: {reason}")
    damaged = f"the policy '{path}' is damaged"
    counts = np.append(policy["iteration"], policy["sizes"])
    check(counts.dtype.kind in "iu" and (counts >= 0).all(), f"{damaged}: a count is not >= 0")
    theta = policy["theta"]
    check(theta.dtype.kind == "f" and np.isfinite(theta).all(), f"{damaged}: theta is not finite")
    return policy


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        if args.play is not None:
            return play(args)
        result = train(configure(args))
    except OSError as e:  # a folder that takes no file
        check(False, f"cannot write {e.filename}: {e.strerror}")
    except KeyboardInterrupt:  # during --play, or while a run starts
        sys.exit(130)
    if result["status"] == "interrupted":
        sys.exit(130)
    if result["status"] not in ("done", "target"):
        sys.exit(1)  # NaN or inf, or a worker process died
    return result


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops a run like Ctrl-C
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even in a job started with '&'
    main()
