"""es_basic.py's options against its default (mirrored sampling, centered ranks): plain sampling,
raw returns, or both, with the preset otherwise, on seeds 0, 1, 2; one row per run appended to
docs/results/es_basic_solves.csv and its curve to docs/results/curves/ (the default's own
rows come from es_basic_solves.sh).

    python docs/bench/es_basic_compare.py --env CartPole-v1

Prints, per variant and seed, the training episodes to the target (or "not reached") and the best
evaluation.
"""

import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from results_csv import COLUMNS, append, appended, family, keep_curve  # noqa: E402

import es_basic as es  # noqa: E402

VARIANTS = {
    "plain": ["--no-mirror"],
    "raw": ["--fitness", "none"],
    "plain_raw": ["--no-mirror", "--fitness", "none"],
}


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.error = lambda message: p.exit(
        2, f"es_basic_compare.py: error: {message}\n"
    )  # one line, no usage block
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated (default 0,1,2)")
    a = p.parse_args()
    if not all(seed.isdigit() for seed in a.seeds.split(",")):
        p.error("--seeds must be comma-separated integers, such as 0,1,2")
    es.configure(es.build_parser().parse_args(["--env", a.env]))  # an unusable id: one line, exit 2
    print("| variant | seed | episodes to the target | best evaluation |\n|---|---|---|---|")
    for variant, flags in VARIANTS.items():
        for seed in a.seeds.split(","):
            argv = [
                "--env",
                a.env,
                "--seed",
                seed,
                "--out-dir",
                os.path.join("runs", "bench", variant),
                *flags,
            ]
            with contextlib.redirect_stdout(open(os.devnull, "w")):
                run_dir = es.train(es.configure(es.build_parser().parse_args(argv)))["run_dir"]
            r = appended(run_dir, variant)
            append(family(r), [r], COLUMNS)
            keep_curve(run_dir)
            print(
                f"| {variant} | {seed} | {r['reached_episodes'] or 'not reached'} "
                f"| {r['best_eval']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
