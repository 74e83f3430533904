"""Replay the stopping rule of ars.py on the saved checkpoints of a run: for each checkpoint
(checkpoints/iter_*.npz, one every --save-every iterations), play the evaluation episodes the run
itself plays at that iteration, with the same seeds, through ars.py's own `evaluate`:

- the screen: episodes 0 .. E-1 (E = the run's --eval-episodes), whose mean must equal the
  evaluation logged in progress.csv (checked: the replay is the run's, bit for bit);
- the confirmation: the next K episodes (K = --confirm-episodes, default: the run's).

Training does not depend on evaluations (their episodes have their own seeds and never reach the
normalizer), so the table says where the same run would have stopped under any screen threshold.

    python docs/bench/replay_checkpoints.py RUN_DIR [--from 300] [--to 480] [--screens 300,305,310]
"""
import argparse
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import ars  # noqa: E402
import numpy as np  # noqa: E402


def fail(message: str):
    print(f"replay_checkpoints.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def checkpoints(run_dir: str, first: int, last: int) -> list:
    """[(iteration, path)] of the run's numbered checkpoints within [first, last]."""
    found = []
    for path in glob.glob(os.path.join(run_dir, "checkpoints", "iter_*.npz")):
        match = re.fullmatch(r"iter_(\d+)\.npz", os.path.basename(path))  # not a left-over temporary file
        if match and first <= int(match.group(1)) <= last:
            found.append((int(match.group(1)), path))
    return sorted(found)


def main(argv=None):
    try:
        replay(argv)
    except (ars.UserError, KeyError, IndexError, TypeError, AttributeError, ValueError, RuntimeError) as e:
        fail(f"cannot replay this run: {type(e).__name__}: {e}")


def replay(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--from", dest="first", type=int, default=1, help="first iteration (default 1)")
    p.add_argument("--to", dest="last", type=int, default=10**9, help="last iteration (default: all)")
    p.add_argument("--confirm-episodes", type=int, help="K (default: the run's)")
    p.add_argument("--confirm-return", type=float, help="the mean the confirmation needs (default: the run's)")
    p.add_argument("--screens", default="300,305,310", help="screen thresholds to report stops for")
    p.add_argument("--workers", type=int, default=1)
    a = p.parse_args(argv)
    try:
        screens = [float(s) for s in a.screens.split(",")]
    except ValueError:
        fail(f"--screens takes numbers separated by commas, not '{a.screens}'")
    try:
        saved = json.load(open(os.path.join(a.run_dir, "config.json")))
        rows = {int(r[0]): r for r in ars.read_csv_rows(os.path.join(a.run_dir, "progress.csv")) if r}
    except (OSError, ValueError) as e:
        fail(f"cannot read the run '{a.run_dir}' ({e})")
    if not isinstance(saved, dict):
        fail(f"the config.json of '{a.run_dir}' is not a configuration")
    args = ars.build_parser().parse_args([])
    for key, value in saved.items():
        if key in vars(args):
            setattr(args, key, value)
    args.workers = a.workers
    k = a.confirm_episodes or args.confirm_episodes or 100
    need = next((v for v in (a.confirm_return, args.confirm_return, args.target_return) if v is not None), None)
    if need is None:
        fail("the run has no --target-return; give --confirm-return")
    found = checkpoints(a.run_dir, a.first, a.last)
    if not found:
        fail(f"no checkpoints/iter_*.npz of '{a.run_dir}' between iterations {a.first} and {a.last}")
    pool = ars.WorkerPool(args.workers, args.env, args.episode_length, args.seed, args.shift, args.reward_clip,
                          args.actions != "raw")  # runs saved before --actions: clipped
    table = []
    try:
        print(f"| iteration | env steps | wall time | screen ({args.eval_episodes} episodes) | logged | "
              f"confirmation ({k} fresh episodes) | of those, returns below 0 |")
        print("|---|---|---|---|---|---|---|")
        for it, path in found:
            ck = ars.load_npz(path)
            stats = (float(ck["obs_count"]), ck["obs_mean"], ck["obs_m2"])
            E = args.eval_episodes
            R = ars.evaluate(pool, it, ck["M"], stats, args, range(E + k))
            logged = float(rows[it][8]) if it in rows and rows[it][8] not in ("", "nan") else float("nan")
            if not np.isnan(logged) and abs(R[:E].mean() - logged) > 1e-6 * max(1.0, abs(logged)):
                fail(f"iteration {it}: the replayed screen {R[:E].mean():.4f} is not the logged "
                         f"{logged:.4f}; this code does not replay that run")
            conf = R[E:].mean()
            table.append((it, R[:E].mean(), conf))
            print(f"| {it} | {int(ck['env_steps']):,} | {float(ck['wall_time']) / 60:.1f} min | {R[:E].mean():.1f} | "
                  f"{logged:.1f} | {conf:.1f} +- {R[E:].std():.1f} | {int((R[E:] < 0).sum())} |", flush=True)
    finally:
        pool.close()
    for s in screens:
        stop = next((it for it, screen, conf in table if screen >= s and conf >= need), None)
        tries = sum(1 for it, screen, conf in table if screen >= s and (stop is None or it <= stop))
        print(f"screen {s:g}: " + (f"stops at iteration {stop}" if stop is not None else "no stop in these checkpoints")
              + f" after {tries} confirmation(s) (confirmation needs {need:g})")


if __name__ == "__main__":
    main()
