"""The command line of the class exercise, which nes_exercise.py's main hands over to: --check runs
the checker (tests/nes_checker.py) on the five parts; without it, the parts train on worker
processes or on Ray. A student never needs to open this file."""

import argparse
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import threading
import time
from concurrent.futures import BrokenExecutor, ProcessPoolExecutor

import gymnasium as gym
import nes_checker
import numpy as np


class RayExecutor:
    """executor.submit(fn, *args) -> future, on Ray: a task Ray reruns if its worker dies (the
    pair's seed names all its randomness: the same result). error(message): one line, exit 2."""

    def __init__(self, address=None, error=sys.exit):
        try:
            import ray
        except ImportError:
            error("--ray needs Ray: pip install ray")
        host, _, port = (address or "").removeprefix("ray://").rpartition(":")
        try:  # Ray itself would retry an address that does not answer for minutes
            if host and port.isdigit():
                socket.create_connection((host, int(port)), timeout=10).close()
            if not ray.is_initialized():
                ray.init(address=address, log_to_driver=False, include_dashboard=False)
        except Exception as e:
            why = (str(e).strip() or type(e).__name__).splitlines()[0]
            error(f"no Ray cluster answers at {address} ({why})")
        self.ray, self.remote = ray, {}

    def submit(self, fn, *args):
        if fn not in self.remote:  # an imported exercise's functions go to the workers by value
            for name in {fn.__module__, "nes_exercise"} & set(sys.modules) - {"__main__"}:
                self.ray.cloudpickle.register_pickle_by_value(sys.modules[name])
            self.remote[fn] = self.ray.remote(max_retries=3)(fn)
        return self.remote[fn].remote(*args).future()

    def shutdown(self, wait=True, cancel_futures=False):
        pass


class Parser(argparse.ArgumentParser):
    """argparse, with a mistake in one line: 'nes_exercise.py: error: ... (see --help)', exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def positive(kind, zero=False):  # an argparse type: a finite number above 0 (or 0 if zero)
    def number(text: str):
        value = kind(text)
        if not (value >= 0 if zero else value > 0) or value == math.inf:
            sign = ">=" if zero else ">"
            raise argparse.ArgumentTypeError(f"must be finite, {sign} 0; got {text}")
        return value

    number.__name__ = kind.__name__  # argparse's "invalid int value" names it
    return number


def build_parser() -> Parser:
    description = "NES class exercise: complete the parts, --check them, then train."
    p = Parser(
        prog="nes_exercise.py",
        description=description,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    a = p.add_argument
    a("--check", action="store_true", help="check the parts, say what to do next")
    a("--env", default="CartPole-v1", help="gymnasium environment id")
    a("--iterations", type=positive(int), default=100, help="updates of the mean, at most")
    a("--pairs", type=positive(int), default=20, help="n, mirrored pairs an iteration")
    a("--sigma", type=positive(float), default=0.1, help="σ, std of the noise")
    a("--alpha", type=positive(float), default=0.1, help="α, step size")
    a("--target-return", type=float, default=475.0, help="stop at this mean return")
    a("--seed", type=positive(int, zero=True), default=0, help="seeds the pairs")
    a("--workers", type=positive(int), default=os.cpu_count(), help="local worker processes")
    a("--ray", action="store_true", help="evaluate the pairs on Ray (pip install ray)")
    a("--ray-address", help="with --ray: an existing cluster, e.g. 127.0.0.1:6379")
    return p


STOP = threading.Event()  # set by Ctrl-C or SIGTERM; the run ends at the next log line


class Stopped(Exception):
    pass


def on_stop(signum, frame):  # the first stop sets STOP; a second ends the process at once
    if STOP.is_set():
        os._exit(130)
    STOP.set()


def log(*args, **kwargs):  # the train of Part 5 logs once an iteration: a stop ends the run there
    print(*args, **kwargs)
    sys.stdout.flush()
    if STOP.is_set():
        raise Stopped


def init_worker():  # a worker: Ctrl-C is its master's to act on, and it ends with its master
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker has its master's on_stop
    master = multiprocessing.parent_process().sentinel  # ready once the master has ended
    threading.Thread(target=exit_after, args=(master,), daemon=True).start()


def exit_after(sentinel):  # even a master killed with SIGKILL leaves no worker behind
    multiprocessing.connection.wait([sentinel])
    os._exit(1)


def main(ex, argv=None):
    """Checks or trains the exercise ex, the module of nes_exercise.py (or the teacher's copy)."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.check:
        sys.exit(0 if nes_checker.check(ex) else 1)
    if not nes_checker.check(ex, out=lambda line: None):
        p.error("some parts are not done yet; run: python nes_exercise.py --check")
    ex._envs.clear()  # the checker's NesCheck-v0, which would go to Ray's workers with rollout
    try:
        space = gym.make(args.env).observation_space
    except (gym.error.Error, ImportError) as e:  # unknown, retired, or missing an extra
        p.error(str(e))
    if len(space.shape or ()) != 1:
        p.error(f"{args.env}: the network takes a flat vector of observations, not {space}")
    if args.ray or args.ray_address:  # an address says where Ray is: it means --ray
        executor = RayExecutor(args.ray_address, p.error)
    else:
        executor = ProcessPoolExecutor(args.workers, initializer=init_worker)
    stops = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    STOP.clear()
    signal.signal(signal.SIGINT, on_stop)  # after Ray's start, which sets its own
    signal.signal(signal.SIGTERM, on_stop)
    t0 = time.time()
    hyper = dict(iterations=args.iterations, n_pairs=args.pairs, sigma=args.sigma, alpha=args.alpha)
    try:
        mu = ex.train(
            args.env, executor, **hyper, seed=args.seed, target=args.target_return, log=log
        )
        if not all(np.isfinite(mu[k]).all() for k in ex.KEYS):
            p.exit(
                1, "nes_exercise.py: error: the mean became NaN or inf: alpha / sigma too large\n"
            )
        returns = ex.evaluate_mean(mu, args.env, 100)
        if STOP.is_set():  # during the evaluation
            raise Stopped
    except Stopped:
        p.exit(130, "nes_exercise.py: interrupted\n")
    except (BrokenExecutor, EOFError, OSError):  # a worker process died: the others end too
        for worker in multiprocessing.active_children():
            worker.terminate()
        p.exit(1, "nes_exercise.py: error: a worker process died\n")
    finally:
        executor.shutdown(cancel_futures=True)
        signal.signal(signal.SIGINT, stops[0])
        signal.signal(signal.SIGTERM, stops[1])
    took = f"({time.time() - t0:.0f} s)"
    print(f"mean policy: {returns.mean():.1f} +- {returns.std():.1f} over 100 episodes {took}")
    return mu, returns
