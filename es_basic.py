"""Vanilla natural evolution strategies with mirrored sampling: the smallest readable ES.

Salimans, Ho, Chen, Sidor & Sutskever (2017), "Evolution Strategies as a Scalable Alternative to
Reinforcement Learning", Algorithm 1, https://arxiv.org/abs/1703.03864. The derivation, line by
line, is in docs/es_basic.md; comments below cite its equations as "Eq. (n)".

    python es_basic.py --env CartPole-v1            # solves it in well under a minute
    python es_basic.py --play runs/<run-dir> --episodes 100 --video
"""
import argparse
import csv
import datetime
import difflib
import errno
import json
import math
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
import multiprocessing as mp

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one BLAS thread per process: workers own the cores
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
import numpy as np  # noqa: E402

# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------

# sigma: noise std, alpha: step size, population: episodes per iteration (n; n / 2 pairs when mirrored).
PRESETS = {
    "CartPole-v1": dict(sigma=0.1, alpha=0.05, population=50, iterations=100, eval_every=5,
                        eval_episodes=100, target_return=475.0),
    # A linear policy (no hidden layer) learns LunarLander fastest here (docs/es_basic.md, "Results").
    "LunarLander-v3": dict(sigma=0.1, alpha=0.03, population=200, hidden="", iterations=500,
                           eval_every=10, eval_episodes=100, target_return=200.0),
}
GENERIC = dict(sigma=0.1, alpha=0.03, population=50, hidden="16", iterations=200, eval_every=10,
               eval_episodes=20)


class Parser(argparse.ArgumentParser):
    def __init__(self, **kw):
        super().__init__(allow_abbrev=False, **kw)  # --iter is no --iterations: --resume must see every flag

    def error(self, message):  # one line, not the whole usage block
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="es_basic.py", formatter_class=argparse.RawDescriptionHelpFormatter,
               description="Vanilla NES with mirrored sampling (Salimans et al. 2017, Algorithm 1).",
               epilog="presets (any flag overrides its preset; other environments use the generic row):\n"
               + "\n".join(f"  {k:15s} " + ", ".join(f"{a}={v}" for a, v in d.items())
                           for k, d in list(PRESETS.items()) + [("(generic)", GENERIC)]))
    a = p.add_argument
    a("--env", default="CartPole-v1", help="gymnasium id with Discrete or Box actions")
    a("--seed", type=int, default=0, help="decides every random number of the run")
    a("--iterations", type=int, help="updates of theta (preset)")
    a("--sigma", type=float, help="σ, std of the parameter noise (typ. 0.02-0.2)")
    a("--alpha", type=float, help="α, step size (typ. 0.01-0.1)")
    a("--population", type=int, help="n, episodes per iteration; even when mirrored (typ. 20-200)")
    a("--no-mirror", dest="mirror", action="store_false", help="plain sampling: n independent eps_i")
    a("--fitness", choices=("rank", "standardize", "none"), default="rank",
          help="F_i: centered ranks in [-0.5, 0.5], standardized returns, or raw returns")
    a("--weight-decay", type=float, default=0.0, help="λ, L2 coefficient: theta -= α λ theta (typ. 0-0.01)")
    a("--hidden", help="hidden layer sizes, comma separated, e.g. 16 or 64,64; '' for a linear policy (preset)")
    a("--activation", choices=("tanh", "relu"), default="tanh", help="hidden nonlinearity")
    a("--workers", type=int, default=1, help="processes for the episodes (default 1: serial)")
    a("--out-dir", default="runs", help="where run directories are created")
    a("--eval-every", type=int, help="evaluate theta every K iterations (preset)")
    a("--eval-episodes", type=int, help="episodes per evaluation (preset)")
    a("--save-every", type=int, default=10, help="checkpoint every K iterations")
    a("--target-return", type=float, help="stop once the evaluation mean reaches R (preset)")
    a("--resume", metavar="RUN_DIR", help="continue the run saved in RUN_DIR")
    a("--play", metavar="RUN_DIR", help="evaluate the policy saved in RUN_DIR and exit")
    a("--episodes", type=int, default=10, help="episodes for --play")
    a("--video", action="store_true", help="with --play: write RUN_DIR/video/<env>.gif of one episode")
    return p


MAX_EPISODES = 10**6  # per evaluation or iteration: more is a typo, and its bookkeeping would fill the memory
PLOT_EVERY = 10.0  # seconds: progress.png is redrawn at most this often during a run (a plot costs the master
#                    about 0.2 s while the workers wait), and once more at the end
MAX_UNITS = 10**5  # per layer: a 10**5 x 10**5 layer is already 80 GB


class UserError(Exception):
    """A mistake in the command line or the files it names: one line, exit status 2."""


def available_cores() -> int:
    """The cores this process may use (a CPU affinity mask or a container can allow fewer than exist)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def resolve_config(args: argparse.Namespace) -> argparse.Namespace:
    """Fill unset flags from the environment's preset, then check that they make sense."""
    for key, value in {**GENERIC, **PRESETS.get(args.env, {})}.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    try:
        args.hidden_sizes = [int(h) for h in str(args.hidden).split(",") if h.strip()]
    except ValueError:
        raise UserError(f"--hidden takes sizes like 16 or 64,64, got '{args.hidden}'") from None
    finite = all(math.isfinite(v) for v in (args.sigma, args.alpha, args.weight_decay))
    checks = [(finite, "--sigma, --alpha and --weight-decay must be finite numbers"),
              (args.seed >= 0, "--seed must be 0 or more"),
              (args.sigma > 0, "--sigma must be positive"), (args.alpha > 0, "--alpha must be positive"),
              (args.population >= 2, "--population must be at least 2"),
              (not args.mirror or args.population % 2 == 0,
               f"--population must be even with mirrored sampling, got {args.population} (or add --no-mirror)"),
              (all(h >= 1 for h in args.hidden_sizes), "--hidden sizes must be at least 1"),
              (args.weight_decay >= 0, "--weight-decay must be 0 or positive"),
              (1 <= args.workers <= 16 * available_cores(),
               f"--workers must be between 1 and 16 per core ({16 * available_cores()} here)"),
              (sum(a * b for a, b in zip(args.hidden_sizes, args.hidden_sizes[1:])) <= MAX_UNITS ** 2 // 100,
               f"the weights between --hidden layers must be at most {MAX_UNITS ** 2 // 100:,} in all"),
              (args.iterations >= 0, "--iterations must be at least 0"),
              (args.eval_every >= 1 and args.eval_episodes >= 1 and args.save_every >= 1,
               "--eval-every, --eval-episodes and --save-every must be at least 1"),
              (args.episodes >= 1, "--episodes must be at least 1"),
              (max(args.episodes, args.eval_episodes, args.population) <= MAX_EPISODES,
               f"--episodes, --eval-episodes and --population must be at most {MAX_EPISODES:,}"),
              (max(args.hidden_sizes, default=0) <= MAX_UNITS, f"--hidden sizes must be at most {MAX_UNITS:,}"),
              (args.target_return is None or not math.isnan(args.target_return),
               "--target-return must be a number, not nan")]
    for ok, message in checks:
        if not ok:
            raise UserError(message)
    return args


def check_env(env_id: str) -> tuple:
    """Return (obs_dim, n_outputs, discrete) or raise UserError with what to do instead."""
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
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise UserError(f"'{env_id}' observations must be a flat Box vector, got {obs_space}")
    if gym.spec(env_id).max_episode_steps is None:
        raise UserError(f"'{env_id}' has no time limit, so an episode might never end")
    if isinstance(act_space, gym.spaces.Discrete):
        return obs_space.shape[0], int(act_space.n), True
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1 and \
            np.isfinite(act_space.low).all() and np.isfinite(act_space.high).all():
        return obs_space.shape[0], act_space.shape[0], False
    raise UserError(f"'{env_id}' has {act_space} actions; es_basic.py handles Discrete actions and "
                    "bounded 1-D Box actions")


# ----------------------------------------------------------------------------------------------
# The math (docs/es_basic.md, Eqs. 1-6)
# ----------------------------------------------------------------------------------------------

def stream(seed: int, *key: int) -> np.random.Generator:
    """An independent random stream named by what it is for: key = (purpose, iteration, index)."""
    return np.random.default_rng(np.random.SeedSequence([seed, *key]))


NOISE, ENV, EVAL = 0, 1, 2  # first word of a stream key: what the stream is for


def sample_eps(seed: int, iteration: int, i: int, d: int) -> np.ndarray:
    """eps_i ~ N(0, I_d), regenerated from its name wherever it is needed (Eq. 2)."""
    return stream(seed, NOISE, iteration, i).standard_normal(d)


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Eq. (4): the rank of each value mapped linearly onto [-0.5, 0.5]. Equal values share their
    average rank, so a mirrored pair with equal returns contributes nothing."""
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(len(x))
    _, tie, count = np.unique(x, return_inverse=True, return_counts=True)
    ranks = (np.bincount(tie, weights=ranks) / count)[tie]
    return ranks / max(len(x) - 1, 1) - 0.5


def shape_fitness(returns: np.ndarray, method: str) -> np.ndarray:
    """F_i from the returns R_i: centered ranks, standardized returns, or the raw returns."""
    if method == "rank":
        return centered_ranks(returns)
    if method == "standardize":
        return (returns - returns.mean()) / (returns.std() + 1e-8)
    return returns


def es_gradient(eps: np.ndarray, F: np.ndarray, sigma: float, mirror: bool) -> np.ndarray:
    """Eq. (3) and its mirrored form Eq. (5). eps: (m, d) noise vectors. F: (n,) fitness of the
    n episodes; mirrored, F = [F_1+, F_1-, F_2+, ...] and m = n / 2."""
    n = len(F)
    if mirror:  # theta + sigma eps_i and theta - sigma eps_i: (1/(n sigma)) sum_i (F_i+ - F_i-) eps_i
        return (F[0::2] - F[1::2]) @ eps / (n * sigma)
    return F @ eps / (n * sigma)  # (1/(n sigma)) sum_i F_i eps_i


# ----------------------------------------------------------------------------------------------
# The policy: a small MLP over one flat parameter vector theta
# ----------------------------------------------------------------------------------------------

def layer_sizes(obs_dim: int, hidden: list, n_out: int) -> list:
    return [obs_dim, *hidden, n_out]


def n_params(sizes: list) -> int:
    return sum(n_in * n_out + n_out for n_in, n_out in zip(sizes[:-1], sizes[1:]))


def unflatten(theta: np.ndarray, sizes: list) -> list:
    """Views [(W, b), ...] into theta: W of shape (n_out, n_in), then b of shape (n_out,)."""
    layers, at = [], 0
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        W = theta[at:at + n_in * n_out].reshape(n_out, n_in)
        at += n_in * n_out
        layers.append((W, theta[at:at + n_out]))
        at += n_out
    return layers


def policy_output(layers: list, obs: np.ndarray, activation) -> np.ndarray:
    h = obs
    for W, b in layers[:-1]:
        h = activation(W @ h + b)
    W, b = layers[-1]
    return W @ h + b


def to_action(y: np.ndarray, space):
    """Discrete: argmax over the logits. Box: tanh squashed onto [low, high]."""
    if hasattr(space, "n"):
        return int(np.argmax(y))
    return space.low + (np.tanh(y) + 1.0) * 0.5 * (space.high - space.low)


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


def rollout(env, theta: np.ndarray, sizes: list, activation, env_seed: int, frames=None) -> tuple:
    """One episode of the policy theta. Returns (return, length)."""
    layers = unflatten(theta, sizes)
    act = np.tanh if activation == "tanh" else (lambda z: np.maximum(z, 0.0))
    obs, _ = reset_env(env, env_seed)
    total, steps, done = 0.0, 0, False
    while not done:
        obs, r, terminated, truncated, _ = env.step(to_action(policy_output(layers, obs, act), env.action_space))
        total, steps, done = total + float(r), steps + 1, terminated or truncated
        if frames is not None:
            frames.append(env.render())
    return total, steps


# ----------------------------------------------------------------------------------------------
# Episodes, serial or on worker processes that receive theta once per iteration and seeds
# ----------------------------------------------------------------------------------------------

_worker = {}  # per process: the environment and the run's constants


def init_worker(env_id: str, seed: int, sizes: list, activation: str, sigma: float, mirror: bool):
    import gymnasium as gym
    _worker.update(env=gym.make(env_id), seed=seed, sizes=sizes, activation=activation, sigma=sigma,
                   mirror=mirror)


def run_members(theta: np.ndarray, iteration: int, members: list) -> list:
    """Episodes of population members j: theta + sigma eps_i (mirrored: +/- eps_i, i = j // 2, both on
    one environment seed). Returns [(j, return, length)]; the noise never leaves the process."""
    w, out = _worker, []
    for j in members:
        i, sign = (j // 2, 1.0 - 2.0 * (j % 2)) if w["mirror"] else (j, 1.0)
        eps = sample_eps(w["seed"], iteration, i, theta.size)
        env_seed = int(stream(w["seed"], ENV, iteration, i).integers(2**31))
        out.append((j, *rollout(w["env"], theta + sign * w["sigma"] * eps, w["sizes"], w["activation"], env_seed)))
    return out


def run_evaluation(theta: np.ndarray, iteration: int, episodes: list) -> list:
    """Episodes of theta itself, on evaluation seeds. Returns [(k, return, length)]."""
    w = _worker
    return [(k, *rollout(w["env"], theta, w["sizes"], w["activation"],
                         int(stream(w["seed"], EVAL, iteration, k).integers(2**31)))) for k in episodes]


def exit_with_master():
    """In a worker: end this process when the master is gone, even killed with SIGKILL (then no
    'stop' comes, and a pipe end inherited by a sibling worker would keep recv() waiting forever)."""
    master = os.getppid()

    def watch():
        while os.getppid() == master:
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def init_pool_worker(*init_args):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the master's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the master's SIGTERM handler is not for workers
    exit_with_master()
    init_worker(*init_args)


class Episodes:
    """Runs a list of episodes in this process (workers=1) or on persistent processes: one
    interleaved chunk of indices per worker (j, j + W, j + 2W, ...), so theta travels once per
    worker and call. Results come back sorted by index either way."""

    def __init__(self, workers: int, *init_args):
        self.workers = workers
        if workers == 1:
            init_worker(*init_args)
            self.pool = None
        else:
            ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
            self.pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=init_pool_worker,
                                            initargs=init_args)

    def run(self, fn, theta: np.ndarray, iteration: int, n: int) -> tuple:
        try:
            if self.pool is None:
                results = fn(theta, iteration, list(range(n)))
            else:
                chunks = [list(range(w, n, self.workers)) for w in range(self.workers)]
                results = [r for part in self.pool.map(fn, [theta] * len(chunks), [iteration] * len(chunks), chunks)
                           for r in part]
        except Exception as e:
            if STOPS:  # a Ctrl-C or SIGTERM that landed inside the pool: a stop, not a failure
                raise KeyboardInterrupt from None
            if isinstance(e, BrokenProcessPool):
                raise RuntimeError("a worker process died; the run stops (resume from the last checkpoint "
                                   "with --resume)") from None
            raise RuntimeError(f"a rollout failed: {type(e).__name__}: {e}") from None  # in the environment
        results.sort()
        return np.array([r[1] for r in results]), np.array([r[2] for r in results])

    def close(self, interrupted: bool = False):
        if self.pool is not None:
            if interrupted:  # do not wait for the episodes under way, but for the workers to be gone
                procs = list((getattr(self.pool, "_processes", None) or {}).values())
                for proc in procs:
                    proc.terminate()
                for proc in procs:  # reaped before the master exits: no orphan, even on a loaded machine
                    proc.join(timeout=5)
                    if proc.is_alive():
                        proc.kill()
                        proc.join(timeout=5)
            # After a stop, without waiting for the pool's manager thread, which can wait forever once
            # its workers are killed (python/cpython#94440); the command line then ends with os._exit.
            self.pool.shutdown(wait=not interrupted, cancel_futures=True)


# ----------------------------------------------------------------------------------------------
# Run directory: config, progress.csv, checkpoints, plot (copied from ars.py; a test keeps them equal)
# ----------------------------------------------------------------------------------------------

SHARED_COLUMNS = ["iteration", "episodes", "env_steps", "wall_time_s", "return_mean", "return_std",
                  "return_min", "return_max", "eval_return_mean", "eval_return_std", "steps_per_s"]


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


COLUMNS = SHARED_COLUMNS + ["grad_norm", "theta_norm", "mean_length"]


def stop_on_sigterm(signum, frame):
    raise KeyboardInterrupt  # SIGTERM stops the run like Ctrl-C: workers stopped, checkpoint kept


STOPS = []  # the signals of a stop under way (Ctrl-C or SIGTERM on the command line)


def stop_remembered(signum, frame):
    """Ctrl-C and SIGTERM on the command line: stop_on_sigterm, remembered in STOPS. The
    KeyboardInterrupt can land inside the pool's own locking and come out as another error
    (RuntimeError: cannot release un-acquired lock), which Episodes.run then still treats as a stop."""
    STOPS.append(signum)
    stop_on_sigterm(signum, frame)


# ----------------------------------------------------------------------------------------------
# Training (Algorithm 1; docs/es_basic.md, "Pseudocode")
# ----------------------------------------------------------------------------------------------

def es_iteration(episodes: Episodes, theta: np.ndarray, t: int, args) -> tuple:
    """One ascent step on the smoothed objective J(theta) = E[R(theta + sigma eps)] of Eq. (1):
    sample, evaluate, shape, step. Returns (new theta, returns, lengths, gradient)."""
    n = args.population
    returns, lengths = episodes.run(run_members, theta, t, n)  # R_j of theta +/- sigma eps_i (Eq. 2)
    F = shape_fitness(returns, args.fitness)  # Eq. (4)
    m = n // 2 if args.mirror else n
    eps = np.stack([sample_eps(args.seed, t, i, theta.size) for i in range(m)])  # (m, d), regenerated
    g = es_gradient(eps, F, args.sigma, args.mirror)  # Eqs. (3), (5)
    # Eq. (6): a plain gradient step (deviation: the paper's reference code uses Adam)
    return theta + args.alpha * g - args.alpha * args.weight_decay * theta, returns, lengths, g


def load_state(run_dir: str, args, d: int) -> dict:
    ck = load_npz(os.path.join(run_dir, "checkpoints", "latest.npz"))
    need = {"theta", "env", "iteration", "episodes", "env_steps", "wall_time"}
    if not need <= set(ck):
        raise UserError(f"'{run_dir}' checkpoint lacks {sorted(need - set(ck))}; it is not from es_basic.py")
    if str(ck["env"]) != args.env:
        raise UserError(f"the checkpoint in '{run_dir}' is for {ck['env']}, not {args.env}")
    if ck["theta"].shape != (d,):
        raise UserError(f"the checkpoint's theta has {ck['theta'].size} parameters, the policy needs {d}")
    if not (np.isfinite(ck["theta"]).all() and np.isfinite(ck["wall_time"]).all()):
        raise UserError(f"the checkpoint in '{run_dir}' holds NaN or inf, which no run saves: it is damaged")
    return {"theta": ck["theta"], "iteration": int(ck["iteration"]), "episodes": int(ck["episodes"]),
            "env_steps": int(ck["env_steps"]), "wall_time": float(ck["wall_time"])}


def checkpoint(run_dir: str, state: dict, args):
    arrays = dict(state, env=np.array(args.env))
    save_npz_atomic(os.path.join(run_dir, "checkpoints", f"iter_{state['iteration']:06d}.npz"), **arrays)
    save_npz_atomic(os.path.join(run_dir, "checkpoints", "latest.npz"), **arrays)


def start_run(args, d: int) -> tuple:
    """A new run directory with theta_0 = 0 (the all-zero mean policy of the Ray project's NES
    tutorial exercise), or the state and log of the run to resume."""
    if args.resume is not None:
        state = load_state(args.resume, args, d)
        try:
            rows = [r for r in read_csv_rows(os.path.join(args.resume, "progress.csv"), COLUMNS)
                    if int(r[0]) <= state["iteration"]]
        except (OSError, ValueError):
            raise UserError(f"the progress.csv of '{args.resume}' is missing or damaged") from None
        return args.resume, state, rows
    state = {"theta": np.zeros(d), "iteration": 0, "episodes": 0, "env_steps": 0, "wall_time": 0.0}
    return make_run_dir(args.out_dir, args.env, "es_basic", args.seed), state, []


def evaluate_if_due(episodes: Episodes, state: dict, args) -> np.ndarray:
    """Every --eval-every iterations and at the last one: the returns of --eval-episodes episodes
    of the unperturbed theta; otherwise [nan]."""
    if state["iteration"] % args.eval_every and state["iteration"] != args.iterations:
        return np.array([np.nan])
    return episodes.run(run_evaluation, state["theta"], state["iteration"], args.eval_episodes)[0]


class Run:
    """The bookkeeping around the algorithm: the run directory (config.json, progress.csv,
    checkpoints, progress.png), the progress line, the worker processes, and how a run ends."""

    def __init__(self, args):
        obs_dim, n_out, _ = check_env(args.env)
        self.args, self.held = args, {}  # held: signal handlers set aside while a stopped run saves itself
        self.plotted, self.next_plot = 0, time.monotonic() + PLOT_EVERY  # rows in progress.png, and when next
        self.sizes = layer_sizes(obs_dim, args.hidden_sizes, n_out)
        self.dir, self.start_state, self.rows = start_run(args, n_params(self.sizes))
        try:
            if args.resume is not None:  # first: a resumed run writes into a folder it did not make
                probe_writable(os.path.join(self.dir, "checkpoints"))
            write_json(os.path.join(self.dir, "config.json"),
                       {**vars(args), "script": "es_basic.py", "run_dir": self.dir, "versions": versions()})
        except OSError as e:  # a resumed run's folder that cannot be written
            raise UserError(f"cannot write to the run directory '{self.dir}': {e.strerror}") from None
        if args.resume is None:
            checkpoint(self.dir, self.start_state, args)  # iteration 0: a run that fails early can still be resumed
        write_csv_rows(os.path.join(self.dir, "progress.csv"), self.rows, COLUMNS)
        self.csv = open(os.path.join(self.dir, "progress.csv"), "a", newline="")
        print(f"run directory: {self.dir}  ({n_params(self.sizes)} parameters)", flush=True)
        self.episodes = Episodes(args.workers, args.env, args.seed, self.sizes, args.activation, args.sigma, args.mirror)
        col = COLUMNS.index("eval_return_mean")  # a resumed run shows its last evaluation until the next one
        evals = [float(r[col]) for r in self.rows if r[col] not in ("", "nan")]
        self.last_eval = evals[-1] if evals else np.nan
        self.t_start = time.time() - self.start_state["wall_time"]
        self.title = f"ES ({'mirrored' if args.mirror else 'plain'}, {args.fitness}) on {args.env}"

    def elapsed(self) -> float:
        """Seconds of training, over all the sessions of a resumed run."""
        return time.time() - self.t_start

    def log(self, new: dict, returns: np.ndarray, lengths: np.ndarray, g: np.ndarray, ev: np.ndarray,
            seconds: float) -> str:
        """Writes a row of progress.csv (flushed); returns the progress line."""
        self.last_eval = self.last_eval if np.isnan(ev).all() else ev.mean()
        steps_per_s = lengths.sum() / seconds
        row = [new["iteration"], new["episodes"], new["env_steps"], round(new["wall_time"], 2),
               returns.mean(), returns.std(), returns.min(), returns.max(), ev.mean(),
               ev.std() if ev.size > 1 else np.nan, round(steps_per_s, 1), np.linalg.norm(g),
               np.linalg.norm(new["theta"]), lengths.mean()]
        csv.writer(self.csv).writerow(row)
        self.csv.flush()
        self.rows.append([str(v) for v in row])
        eta = (self.args.iterations - new["iteration"]) * new["wall_time"] / new["iteration"]
        line = (f"it {new['iteration']:5d} | eps {new['episodes']:7d} | steps {new['env_steps']:10,d} | "
                f"return {returns.mean():8.1f} (max {returns.max():7.1f}) | eval {self.last_eval:7.1f} | "
                f"{steps_per_s:6.0f} steps/s | {fmt_time(new['wall_time'])} | ETA {fmt_time(eta)}")
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
        print(f"\ninterrupted: resume with  python es_basic.py --resume {self.dir}", file=sys.stderr)
        return "interrupted"

    def close(self, status: str):
        """Stops the workers and closes progress.csv, whatever ended the run; saves nothing (finish does)."""
        self.episodes.close(interrupted=status == "interrupted")
        self.csv.close()

    def finish(self, state: dict, status: str) -> dict:
        """The final checkpoint (the last good state: a diverged update never enters it), plot and report."""
        checkpoint(self.dir, state, self.args)
        self.plot(final=True)
        if status == "target":
            print(f"target {self.args.target_return} reached at iteration {state['iteration']}: {state['episodes']} "
                  f"episodes, {state['env_steps']} env steps, {fmt_time(state['wall_time'])}", flush=True)
        for signum, handler in self.held.items():
            signal.signal(signum, handler)
        return dict(state, run_dir=self.dir, status=status)


def train(args) -> dict:
    """The run, line by line as the pseudocode of docs/es_basic.md: iterations of Algorithm 1
    (es_iteration), evaluations, the log and checkpoints (Run). Returns the final state."""
    run = Run(args)  # theta_0 = 0, or loaded by --resume; the workers start
    state, status = run.start_state, "done"
    try:
        while state["iteration"] < args.iterations:
            t0 = time.time()
            theta, returns, lengths, g = es_iteration(run.episodes, state["theta"], state["iteration"], args)
            seconds = time.time() - t0  # the episodes and the update, for steps/s
            new = {"theta": theta, "iteration": state["iteration"] + 1, "episodes": state["episodes"] + len(returns),
                   "env_steps": state["env_steps"] + int(lengths.sum())}
            if not (np.isfinite(theta).all() and np.isfinite(returns).all()):
                status = "diverged"
                print(f"NaN or inf at iteration {new['iteration']}: the run stops; the last good checkpoint "
                      "is kept (try a smaller --alpha or --sigma)", file=sys.stderr)
                break
            ev = evaluate_if_due(run.episodes, new, args)
            new["wall_time"] = run.elapsed()
            line = run.log(new, returns, lengths, g, ev, seconds)  # a row of progress.csv
            reached = args.target_return is not None and not np.isnan(ev).all() and ev.mean() >= args.target_return
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
        run.close(status)
    return run.finish(state, status)


# ----------------------------------------------------------------------------------------------
# Playing a saved policy, and the command line
# ----------------------------------------------------------------------------------------------

def play(args) -> np.ndarray:
    cfg = read_config(args.play, "es_basic.py", ("env", "hidden", "activation"))
    for key in ("env", "hidden", "activation"):
        setattr(args, key, cfg[key])
    try:
        resolve_config(args)  # the saved values checked as the command line's are (a hand-edited file)
    except UserError as e:
        raise UserError(f"the config.json of '{args.play}': {e}") from None
    obs_dim, n_out, _ = check_env(args.env)
    sizes = layer_sizes(obs_dim, args.hidden_sizes, n_out)
    state = load_state(args.play, args, n_params(sizes))
    if args.video:
        check_video_folder(args.play, args.env)
    init_worker(args.env, args.seed, sizes, args.activation, 0.0, False)
    returns, _ = np.array(run_evaluation(state["theta"], 10**6, list(range(args.episodes)))).T[1:]
    print(f"{args.env}: mean return {returns.mean():.1f} +- {returns.std():.1f} over {args.episodes} episodes "
          f"(min {returns.min():.1f}, max {returns.max():.1f}), policy of iteration {state['iteration']}")
    if args.video:
        print(f"video: {write_gif(args, state['theta'], sizes)}")
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


def write_gif(args, theta: np.ndarray, sizes: list, every: int = 2) -> str:
    """One evaluation episode as a GIF through Pillow (brought by matplotlib)."""
    import gymnasium as gym
    if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"  # headless MuJoCo rendering
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame's frames (Box2D, classic control) need no window
    from PIL import Image
    frames = []
    try:
        env = gym.make(args.env, render_mode="rgb_array")
        rollout(env, theta, sizes, args.activation, int(stream(args.seed, EVAL, 10**6, 0).integers(2**31)), frames)
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


# Flags that may be given again with --resume: they steer the run (or, alpha and sigma, rescue a
# diverged one); every other option keeps its saved value.
RESUME_OVERRIDES = ("workers", "iterations", "target_return", "save_every", "alpha", "sigma")


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
        if args.resume is not None:  # the saved configuration wins, except RESUME_OVERRIDES given again
            refuse_fixed_flags(argv)
            words = flags_given(argv)
            required = ("env", "seed", "sigma", "alpha", "population", "mirror", "fitness", "hidden")
            for key, value in read_config(args.resume, "es_basic.py", required).items():
                given = key in RESUME_OVERRIDES and f"--{key.replace('_', '-')}" in words
                if key in vars(args) and key != "resume" and not given:
                    setattr(args, key, value)
        resolve_config(args)  # read_config checked the saved values' types, this checks the values
        result = train(args)
    except UserError as e:
        print(f"es_basic.py: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # before the first iteration, or during --play
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
    except MemoryError:
        print("es_basic.py: error: not enough memory for this configuration", file=sys.stderr)
        sys.exit(2)
    except RuntimeError as e:
        print(f"es_basic.py: error: {e}", file=sys.stderr)
        sys.exit(1)
    except OSError as e:  # the run directory stopped taking files (a full disk): checkpoints are atomic
        where = f" '{e.filename}'" if e.filename else ""
        print(f"es_basic.py: error: cannot write{where}: {e.strerror or e}; the last checkpoint is kept",
              file=sys.stderr)
        sys.exit(1)
    if result["status"] == "diverged":
        sys.exit(1)
    if result["status"] == "interrupted":
        if argv is None:  # the command line: a second Ctrl-C or SIGTERM while Python shuts down
            # (and resets its handlers to the default) would kill it instead of letting it exit with 130
            hold_stops()
            sys.stdout.flush()
            sys.stderr.flush()
            # Everything is saved (finish wrote the checkpoint). Not sys.exit: Python's exit would join
            # the pool's manager thread, which a stop can leave waiting forever (python/cpython#83386).
            os._exit(130)
        sys.exit(130)
    return result


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, stop_remembered)
    signal.signal(signal.SIGINT, stop_remembered)
    main()
