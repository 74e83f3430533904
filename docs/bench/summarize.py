"""Summarize finished ars.py runs as a Markdown table (one row per run directory).

    python docs/bench/summarize.py runs/BipedalWalker-v3__ars__*

For each run: the seed, iterations, training episodes and env steps, wall time, the first
iteration whose evaluation reached the run's --target-return (if any), and the last evaluation.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import ars  # noqa: E402


def summarize(run_dir: str) -> str:
    cfg = json.load(open(os.path.join(run_dir, "config.json")))
    rows = ars.read_csv_rows(os.path.join(run_dir, "progress.csv"))
    if not rows:
        return f"| {cfg['env']} | {cfg['seed']} | no iteration logged | | | | | | |"
    last = rows[-1]
    evals = [r for r in rows if r[8] not in ("", "nan")]
    target = cfg.get("target_return")
    hit = next((r for r in evals if target is not None and float(r[8]) >= target), None)
    reached = f"{int(hit[1]):,} episodes, {int(hit[2]):,} steps" if hit else "not reached"
    return (f"| {cfg['env']} | {cfg['seed']} | {last[0]} | {int(last[1]):,} | {int(last[2]):,} | "
            f"{float(last[3]) / 60:.1f} min | {cfg['workers']} | {reached} | "
            f"{float(evals[-1][8]):.1f} |" if evals else "")


def main():
    print("| env | seed | iterations | episodes | env steps | wall time | workers | target reached at | last evaluation |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run_dir in sys.argv[1:]:
        print(summarize(run_dir))


if __name__ == "__main__":
    main()
