"""Apply the confirmation rule of ars.py (--confirm-episodes) to the latest checkpoint of a run that
stopped at its target without it: prints the confirmation and exits 0 if it passes, 1 if not
(then `python ars.py --resume RUN_DIR` continues the run under the rule).

    python docs/bench/confirm_checkpoint.py runs/bench/BipedalWalker-v3__ars__1__<stamp>
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import ars  # noqa: E402
import numpy as np  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.error = lambda message: p.exit(2, f"confirm_checkpoint.py: error: {message}\n")  # one line, no usage block
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory of ars.py")
    run_dir = p.parse_args().run_dir
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            saved = json.load(f)
    except (OSError, ValueError) as e:
        p.error(f"cannot read '{os.path.join(run_dir, 'config.json')}': {type(e).__name__}")
    if not isinstance(saved, dict) or saved.get("script", "ars.py") != "ars.py":
        p.error(f"'{run_dir}' is not a run directory of ars.py")
    args = ars.build_parser().parse_args([])
    for key, value in saved.items():
        if key in vars(args):
            setattr(args, key, value)
    args.confirm_episodes = args.confirm_return = None  # take the rule from the current preset
    try:
        ars.resolve_config(args)
        obs_dim, act_dim = ars.check_env(args.env)
        state = ars.load_state(run_dir, args, obs_dim, act_dim)
    except (ars.UserError, TypeError, ValueError) as e:  # TypeError, ValueError: a hand-edited config.json
        p.error(str(e))
    pool = ars.WorkerPool(args.workers, args.env, args.episode_length, args.seed, args.shift, args.reward_clip,
                          args.actions != "raw")  # runs saved before --actions: clipped
    try:
        screen = np.array([args.target_return])  # the run stopped because its screen reached the target
        reached, confirm = ars.target_reached(pool, state, screen, args)
    finally:
        pool.close()
    print(f"{run_dir}: iteration {state['iteration']}, confirmation {'passed' if reached else 'failed'}")
    sys.exit(0 if reached else 1)


if __name__ == "__main__":
    main()
