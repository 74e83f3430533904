"""How much do ARS updates from the same policy agree? A diagnostic for the phase where every
rollout falls.

    python docs/bench/update_agreement.py RUN_DIR --iteration 300 --nus 0.03,0.05,0.1 --batches 6

Loads the checkpoint of RUN_DIR at --iteration (M and the observation statistics) and, for each
nu, computes --batches independent updates of Eq. (5) from it with ars.py's own `ars_iteration`
(with the run's own N, b, alpha, shift, reward clipping and actions), each from fresh directions and environment seeds
(iteration numbers no run reaches name their random streams). Prints, per nu, the mean cosine
between the steps of every two batches. Two steps that follow the same gradient have a cosine
near 1; two steps of pure noise in the p x n entries of M, a cosine near 0 (spread 1/sqrt(pn)).
"""
import argparse
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import ars  # noqa: E402
import numpy as np  # noqa: E402

FRESH = 10**7  # first iteration number of the batches' random streams


def run_args(config: dict, nu: float, workers: int):
    """ars.py's arguments for the run of config.json, with this nu."""
    return ars.resolve_config(ars.build_parser().parse_args(
        ["--env", config["env"], "--seed", str(config["seed"]), "--nu", str(nu), "--workers", str(workers),
         "--alpha", str(config["alpha"]), "--n-directions", str(config["n_directions"]),
         "--top-b", str(config["top_b"]), "--shift", str(config["shift"]), "--version", str(config["version"]),
         "--reward-clip", str(config.get("reward_clip") or 0.0), "--actions", config.get("actions") or "clipped"]
        + (["--episode-length", str(config["episode_length"])] if config.get("episode_length") else [])))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.error = lambda message: p.exit(2, f"update_agreement.py: error: {message}\n")  # one line, no usage block
    p.add_argument("run_dir")
    p.add_argument("--iteration", type=int, required=True, help="the checkpoint to start from")
    p.add_argument("--nus", default="0.03,0.05,0.1", help="values of nu to compare")
    p.add_argument("--batches", type=int, default=6, help="independent updates per nu")
    p.add_argument("--workers", type=int, default=ars.available_cores())
    a = p.parse_args()
    if a.batches < 2 or a.workers < 1:
        p.error("--batches must be at least 2 (a cosine needs two steps) and --workers at least 1")
    try:
        nus = [float(x) for x in a.nus.split(",")]
    except ValueError:
        p.error(f"--nus must be numbers separated by commas, got '{a.nus}'")
    if not all(0 < nu < np.inf for nu in nus):
        p.error("every value of --nus must be positive")
    try:
        with open(os.path.join(a.run_dir, "config.json")) as f:
            config = json.load(f)
        ck = ars.load_npz(os.path.join(a.run_dir, "checkpoints", f"iter_{a.iteration:06d}.npz"))
    except (OSError, ValueError, ars.UserError) as e:
        p.exit(2, f"update_agreement.py: error: cannot use '{a.run_dir}' at iteration {a.iteration}: {e}\n")
    M = ck["M"]
    stats = (int(ck["obs_count"]), ck["obs_mean"], ck["obs_m2"])
    print(f"{config['env']}, seed {config['seed']}, iteration {a.iteration}: |M| = {np.linalg.norm(M):.3f}; "
          f"N = {config['n_directions']}, b = {config['top_b']}, alpha = {config['alpha']}; "
          f"noise alone gives cosines of 0 +- {1 / np.sqrt(M.size):.2f}")
    for nu in nus:
        try:
            args = run_args(config, nu, a.workers)
        except ars.UserError as e:
            p.exit(2, f"update_agreement.py: error: {e}\n")
        pool = ars.WorkerPool(args.workers, args.env, args.episode_length, args.seed, args.shift, args.reward_clip,
                              args.actions == "clipped")
        try:
            steps, returns, lengths = [], [], []
            for k in range(a.batches):
                state = {"M": M, "iteration": FRESH + k, "episodes": 0, "env_steps": 0, "stats": stats}
                new, info = ars.ars_iteration(pool, state, args)
                steps.append((new["M"] - M).ravel())
                returns.append(info["returns"].mean())
                lengths.append(info["lengths"].mean())
        finally:
            pool.close()
        cos = [s @ t / (np.linalg.norm(s) * np.linalg.norm(t)) for s, t in itertools.combinations(steps, 2)]
        print(f"nu {nu}: mean cosine between two batches' steps {np.mean(cos):+.3f} "
              f"(+- {np.std(cos) / np.sqrt(len(cos)):.3f}, {len(cos)} pairs); step length "
              f"{np.mean([np.linalg.norm(s) for s in steps]):.3f}; training return {np.mean(returns):.1f}, "
              f"episode length {np.mean(lengths):.0f}", flush=True)


if __name__ == "__main__":
    main()
