"""Vanilla natural evolution strategies with mirrored sampling: the smallest readable ES.
Salimans et al. (2017), "Evolution Strategies as a Scalable Alternative to Reinforcement
Learning", Algorithm 1, https://arxiv.org/abs/1703.03864; docs/es_basic.md derives the math.

    python es_basic.py --env CartPole-v1               # solves it in seconds
    python es_basic.py --play runs/<run-dir> --video   # evaluates the saved policy, films it
"""

import os
import signal

if __name__ in ("__main__", "__mp_main__"):  # Ctrl-C as the modules below load: status 130
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))

import argparse
import contextlib
import csv
import functools
import io
import json
import math
import multiprocessing
import multiprocessing.connection
import shlex
import sys
import threading
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
GENERIC.update(eval_every=10, eval_episodes=20, target_return=None)


def preset(env_id: str) -> dict:  # the defaults of the flags a preset sets
    return {**GENERIC, **PRESETS.get(env_id, {})}


def build_parser(env_id: str = "CartPole-v1") -> argparse.ArgumentParser:
    p = Parser(
        prog="es_basic.py",
        description=f"{__doc__.splitlines()[0]} The defaults shown are {env_id}'s preset.",
        epilog=preset_table(),
        formatter_class=HelpFormatter,
    )
    a = p.add_argument  # the types (below the banner) refuse impossible values in one line
    a("--env", default="CartPole-v1", help="Box observations, Discrete or bounded Box actions")
    a("--seed", type=at_least(0), default=0, help="decides every random number")
    a("--iterations", type=at_least(1), help="updates of theta")
    a("--sigma", type=at_least(0, float), help="σ, std of the parameter noise (typ. 0.02-0.2)")
    a("--alpha", type=at_least(0, float), help="α, step size (typ. 0.01-0.1)")
    a("--population", type=at_least(2), help="n, episodes per iteration, even if mirrored")
    a(
        "--no-mirror",
        dest="mirror",
        action="store_false",
        help="n eps_i, no pairs (mirror: %(default)s)",
    )
    a("--fitness", choices=("rank", "standardize", "none"), default="rank", help="Eq. (4)")
    a("--weight-decay", type=float, default=0.0, help="λ, L2 coefficient (typ. 0-0.01)")
    a("--hidden", type=sizes, help="hidden layer sizes: 16, 64,64, or '' for linear")
    a("--activation", choices=("tanh", "relu"), default="tanh", help="hidden nonlinearity")
    a("--workers", type=at_least(1), default=1, help="processes for the episodes")
    a("--out-dir", default="runs", help="where run directories are made")
    a("--eval-every", type=at_least(1), help="evaluate theta every K iterations")
    a("--eval-episodes", type=at_least(1), help="episodes per evaluation")
    a("--target-return", type=float, help="stop once an evaluation's mean reaches it")
    a("--play", metavar="RUN_DIR", help="evaluate the policy saved in RUN_DIR, then exit")
    a("--episodes", type=at_least(1), default=10, help="episodes for --play")
    a("--video", action="store_true", help="with --play: RUN_DIR/video/<env>.gif of one episode")
    p.set_defaults(**preset(env_id))
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
    """Eq. (3), or Eq. (5) mirrored. eps: (m, d); F: (n,), mirrored [F_0+, F_0-, F_1+, ...]."""
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
    return rollout(new_env(args.env), theta_j, args, stream(args.seed, ENV, t, i))


def eval_episode(args, theta: np.ndarray, t: int, k: int) -> tuple:
    """Evaluation episode k of theta itself, on the evaluation seeds of iteration t."""
    return rollout(new_env(args.env), theta, args, stream(args.seed, EVAL, t, k))


def new_env(env_id: str):  # one per episode: none keeps a trace of the episodes before it
    return gym.make(env_id, disable_env_checker=True)  # configure() checked the first


# ---- training: Algorithm 1 (docs/es_basic.md, "Pseudocode") ----
def train(args) -> dict:
    n = args.population
    theta = np.zeros(n_weights(args.sizes))  # theta_0 = 0, as in the NES exercise: (d,)
    run = Run(args, theta)  # the run directory, the progress line, the workers (below)
    try:
        for t in range(args.iterations):
            if STOP.is_set():  # Ctrl-C or SIGTERM: the run ends with what it logged
                return run.end("interrupted")
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
            run.log(theta, R, lengths, g, ev)  # progress.csv, policy.npz, the progress line
            target = args.target_return
            if ev is not None and target is not None and ev.mean() >= target:
                return run.end("target")
        return run.end("done")
    except BrokenExecutor:  # a worker process died: the run ends with what it logged
        return run.end("interrupted" if STOP.is_set() else "a worker process died")
    finally:
        run.close()  # however it ends, the workers stop


# ---- plumbing: the command line, stops, workers, run directory, --play (not the algorithm) ----
class Parser(argparse.ArgumentParser):
    """argparse, with a user's mistake in one line: 'SCRIPT: error: ... (see --help)', status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help shows every flag's default, and the presets as the table written below."""


def preset_table() -> str:  # --help's epilog: a row per preset
    rows = [["--env", *GENERIC]]
    for env_id in [*PRESETS, "any other"]:
        rows.append([env_id, *(str(value) for value in preset(env_id).values())])
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


def sizes(text: str) -> tuple:  # --hidden 64,64 -> (64, 64); '' -> () for a linear policy
    return tuple(at_least(1)(h) for h in text.split(",") if h.strip())


def check(ok: bool, message: str):  # a user's mistake: one line, exit status 2, nothing written
    if not ok:
        build_parser().error(str(message).partition("\n")[0])  # whatever raised it, one line


def parse(argv: list) -> argparse.Namespace:  # the flags, over the preset of --env
    env = argparse.ArgumentParser(add_help=False)
    env.add_argument("--env", default="CartPole-v1")
    args = build_parser(env.parse_known_args(argv)[0].env).parse_args(argv)
    args.command = shlex.join(["python", "es_basic.py", *argv])  # config.json: the same run again
    return args


def configure(args) -> argparse.Namespace:  # what no one flag can check; the layer sizes
    even = not args.mirror or args.population % 2 == 0
    check(even, "--population must be even with mirrored sampling (or add --no-mirror)")
    try:
        env = gym.make(args.env)
    except (gym.error.Error, ImportError) as e:  # an unknown id, a missing extra, a retired version
        check(False, e)
    obs = env.observation_space
    act = env.action_space
    box = isinstance(act, gym.spaces.Box) and np.isfinite(np.r_[act.low, act.high]).all()
    ok = len(obs.shape or ()) == 1 and (box or isinstance(act, gym.spaces.Discrete))
    takes = "es_basic.py takes Box observations, Discrete or bounded Box actions"
    check(ok, f"{args.env}: {obs}, {act}; {takes}")
    args.sizes = [obs.shape[0], *args.hidden, act.shape[0] if box else int(act.n)]
    return args


STOP = threading.Event()  # set by Ctrl-C or SIGTERM; train() ends the run after the iteration


def on_stop(signum, frame):  # the first stop sets STOP; a second ends the process at once
    if STOP.is_set():
        os._exit(130)
    STOP.set()


def init_worker():  # a worker: Ctrl-C is its master's to act on, and it ends with its master
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker has its master's on_stop
    master = multiprocessing.parent_process().sentinel  # ready once the master has ended
    threading.Thread(target=exit_after, args=(master,), daemon=True).start()


def exit_after(sentinel):  # even a master killed with SIGKILL leaves no worker behind
    multiprocessing.connection.wait([sentinel])
    os._exit(1)


def write_file(path: str, data: bytes):  # whole or not at all: a temporary file, then renamed
    try:
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
    except OSError as e:  # a full disk: the file as it was, no temporary file, its path named
        with contextlib.suppress(OSError):
            os.remove(path + ".tmp")
        raise OSError(e.errno, e.strerror, path) from None


COLUMNS = (
    "iteration episodes env_steps wall_time_s return_mean return_std return_min return_max"
    " eval_return_mean eval_return_std steps_per_s grad_norm theta_norm mean_length elite"
).split()


class Run:
    """The run directory and its files, the progress line, the workers (theta out, returns back)."""

    def __init__(self, args, theta):
        name = f"{args.env}__es_basic__{args.seed}__{time.strftime('%Y%m%d-%H%M%S')}"
        self.dir = os.path.join(args.out_dir, name)
        os.makedirs(self.dir)  # an OSError here: one line (main)
        versions = dict(
            python=sys.version.split()[0], numpy=np.__version__, gymnasium=gym.__version__
        )
        versions["mujoco"] = getattr(sys.modules.get("mujoco"), "__version__", None)  # if loaded
        config = dict(vars(args), script="es_basic.py", **versions)
        write_file(os.path.join(self.dir, "config.json"), json.dumps(config, indent=1).encode())
        self.args = args
        self.rows = []  # progress.csv: a dict per iteration
        self.layers = dict(env=args.env, sizes=args.sizes, activation=args.activation)
        self.counts = dict(iteration=0, episodes=0, env_steps=0)  # so far
        self.save(theta)  # policy.npz holds theta_0 until an iteration is logged
        self.t0 = time.time()
        self.last = 0.0  # when the last iteration was logged
        self.ev = np.nan  # the last evaluation's mean, shown until the next one
        self.pool = None
        if args.workers > 1:
            self.pool = ProcessPoolExecutor(args.workers, initializer=init_worker)
        print(f"run directory: {self.dir}", flush=True)

    def close(self):  # the workers stop, once the episodes under way are done
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)

    def episodes(self, episode, theta: np.ndarray, t: int, n: int) -> tuple:
        """(returns, lengths) of episode(args, theta, t, j) for j < n, in the order of j."""
        play = functools.partial(episode, self.args, theta, t)  # theta travels once per chunk
        if self.pool is None:
            out = list(map(play, range(n)))
        else:
            chunk = -(-n // self.args.workers)  # one chunk per worker
            try:
                out = list(self.pool.map(play, range(n), chunksize=chunk))
            except (BrokenExecutor, EOFError, OSError) as e:
                # A worker, or the forkserver, died. The others end now: a pool that breaks
                # while it is still starting workers can miss one, and then wait for it forever.
                for worker in multiprocessing.active_children():
                    worker.terminate()
                raise BrokenExecutor(e) from None
        returns, lengths = zip(*out)
        return np.array(returns), np.array(lengths)

    def save(self, theta):  # policy.npz: what --play needs, and nothing to unpickle
        self.theta = theta
        policy = io.BytesIO()
        np.savez(policy, theta=theta, iteration=self.counts["iteration"], **self.layers)
        write_file(os.path.join(self.dir, "policy.npz"), policy.getvalue())

    def log(self, theta, R, lengths, g, ev):  # progress.csv, policy.npz, the progress line
        took = time.time() - self.t0
        speed = lengths.sum() / (took - self.last)  # the iteration's steps per second
        self.last = took
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
        self.rows.append(row)
        text = io.StringIO()
        table = csv.DictWriter(text, COLUMNS, lineterminator="\n")
        table.writeheader()
        table.writerows(self.rows)
        write_file(os.path.join(self.dir, "progress.csv"), text.getvalue().encode())
        self.save(theta)
        eta = (self.args.iterations / c["iteration"] - 1) * took
        print(
            f"it {c['iteration']:5d} | eps {c['episodes']:7d} | steps {c['env_steps']:10,d}"
            f" | return {R.mean():8.1f} (max {R.max():7.1f}) | eval {self.ev:7.1f} | {speed:6.0f}"
            f" steps/s | {took:5.0f} s | ETA {eta:5.0f} s",
            flush=True,
        )

    def end(self, status: str) -> dict:  # progress.png, the closing line, the result
        c = self.counts
        if self.rows:
            png = plot(self.rows, f"es_basic.py on {self.args.env}")
            write_file(os.path.join(self.dir, "progress.png"), png)
        ended = sys.stdout if status in ("target", "done") else sys.stderr
        done = f"{c['episodes']} episodes, {c['env_steps']} env steps"
        print(f"{status} after iteration {c['iteration']}: {done}", file=ended)
        return dict(c, theta=self.theta, status=status, run_dir=self.dir)


def plot(rows: list, title: str) -> bytes:  # the learning curve; elite members below it
    from matplotlib.figure import Figure

    c = {key: np.array([row[key] for row in rows], dtype=float) for key in COLUMNS}
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
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=90)
    return image.getvalue()


def play(args) -> np.ndarray:  # the saved policy on evaluation seeds; --video films the first
    path = os.path.join(args.play, "policy.npz")  # it names its environment and layers
    if args.video:  # draw without a display, before the environment loads its renderer
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame's
        if sys.platform == "linux":  # MuJoCo's (elsewhere, the system's own GL)
            os.environ.setdefault("MUJOCO_GL", "glfw" if os.environ.get("DISPLAY") else "egl")
    try:
        with np.load(path, allow_pickle=False) as f:
            theta = f["theta"]
            args.env = str(f["env"])
            args.activation = str(f["activation"])
            sizes = [int(n) for n in f["sizes"]]
            iteration = int(f["iteration"])
    except Exception as e:  # missing, not a zip, cut short, pickled, not es_basic.py's
        check(False, f"cannot read the policy '{path}' ({type(e).__name__}: {e})")
    args.hidden = tuple(sizes[1:-1])
    configure(args)  # the environment's layer sizes, which the policy's must be
    fits = sizes == args.sizes and theta.shape == (n_weights(sizes),)
    check(fits, f"the policy '{path}' does not fit {args.env}'s layers {args.sizes}")
    if args.video:
        env = gym.wrappers.RenderCollection(gym.make(args.env, render_mode="rgb_array"))
        rollout(env, theta, args, stream(args.seed, EVAL, 10**6, 0))  # the first episode below
        os.makedirs(os.path.join(args.play, "video"), exist_ok=True)
        path = os.path.join(args.play, "video", f"{args.env}.gif")
        write_file(path, gif(env.render()))
        print(f"video: {path}", flush=True)
    R = np.array([eval_episode(args, theta, 10**6, k)[0] for k in range(args.episodes)])
    print(
        f"{args.env}: mean return {R.mean():.1f} +- {R.std():.1f} over {len(R)} episodes "
        f"(min {R.min():.1f}, max {R.max():.1f}), policy of iteration {iteration}"
    )
    return R


def gif(frames: list) -> bytes:  # every second frame (one a step), at half size, 12.5 per second
    from PIL import Image  # comes with matplotlib

    images = [Image.fromarray(frame[::2, ::2]) for frame in frames[::2]]
    data = io.BytesIO()
    images[0].save(data, format="GIF", save_all=True, append_images=images[1:], duration=80, loop=0)
    return data.getvalue()


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else list(argv))
    stops = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        if args.play is not None:
            return play(args)
        STOP.clear()
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGTERM, on_stop)  # the stop a job scheduler sends
        result = train(configure(args))
    except OSError as e:  # a folder that takes no file, a full disk
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
