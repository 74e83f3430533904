"""How much of an iteration's time ars.py's workers spend inside their jobs.

    python docs/bench/worker_busy.py --env HalfCheetah-v5 --workers 1

Runs a short training (N = b = 8 directions, no evaluation) with each worker timing its own
jobs, and prints, per iteration, the master's wall time of the rollouts (`WorkerPool.run`) and
the sum of the jobs' times divided by (that wall time x workers). What is missing from 100% is
the time workers wait for the master: pipes, hand-out, and the tail of an iteration.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import ars  # noqa: E402
from ars_throughput import ars_training  # noqa: E402  (the same short training, N = b = 8, no evaluation)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.error = lambda message: p.exit(2, f"worker_busy.py: error: {message}\n")  # one line, no usage block
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--iterations", type=int, default=10)
    a = p.parse_args()
    if a.iterations < 2 or a.workers < 1:
        p.error("--iterations must be at least 2 (the first is left out) and --workers at least 1")
    try:
        ars.check_env(a.env)
    except ars.UserError as e:
        p.error(str(e))
    job, run, seen = ars.Rollouts.job, ars.WorkerPool.run, []

    def timed_job(self, *args):  # runs in the worker (forked after this patch)
        t = time.perf_counter()
        return job(self, *args) + (time.perf_counter() - t,)

    def timed_run(self, *args, **kw):
        t = time.perf_counter()
        out = run(self, *args, **kw)
        seen.append((time.perf_counter() - t, sum(v[-1] for v in out.values())))
        return out

    ars.Rollouts.job, ars.WorkerPool.run = timed_job, timed_run  # the workers are forked after this
    ars_training(a.env, a.workers, a.iterations, n_directions=8)
    train = seen[1:a.iterations]  # the first iteration also creates the environments; the last call is the final evaluation
    for i, (wall, busy) in enumerate(train, start=2):
        print(f"iteration {i}: {wall:.3f} s, workers busy {busy / wall / a.workers:.4f}")
    print(f"iterations 2-{a.iterations}: workers busy {sum(b for _, b in train) / sum(w for w, _ in train) / a.workers:.4f} "
          f"of the time ({a.workers} worker(s), {a.env})")


if __name__ == "__main__":
    main()
