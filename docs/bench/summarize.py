"""Summarize finished runs of ars.py, es_basic.py or es_openai.py as a Markdown table (one row per run).

    python docs/bench/summarize.py runs/BipedalWalker-v3__ars__*

For each run, where it stopped: the seed, iterations, training episodes and env steps, wall time,
whether the run reached its --target-return (for ars.py with --confirm-episodes, whether the
confirmation on fresh episodes passed), and the last evaluation's mean.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import ars  # noqa: E402


def summarize(run_dir: str) -> str:
    cfg = json.load(open(os.path.join(run_dir, "config.json")))
    rows = [line.split(",") for line in open(os.path.join(run_dir, "progress.csv")).read().splitlines()[1:]]
    if not rows:
        return f"| {cfg['env']} | {cfg['seed']} | no iteration logged | | | | | | |"
    last = rows[-1]
    evals = [r for r in rows if r[8] not in ("", "nan")]
    target = cfg.get("target_return")
    reached = "yes" if evals and target is not None and float(evals[-1][8]) >= target else "no"
    if cfg.get("confirm_episodes"):  # ars.py: the confirmation on fresh episodes decides, not the screen
        confirm = last[ars.COLUMNS.index("confirm_return_mean")]
        reached = "yes" if confirm not in ("", "nan") and float(confirm) >= cfg["confirm_return"] else "no"
    return (f"| {cfg['env']} | {cfg['seed']} | {last[0]} | {int(last[1]):,} | {int(last[2]):,} | "
            f"{float(last[3]) / 60:.1f} min | {cfg['workers']} | {reached} | "
            f"{float(evals[-1][8]) if evals else float('nan'):.1f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.error = lambda message: p.exit(2, f"summarize.py: error: {message}\n")  # one line, no usage block
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    a = p.parse_args()
    rows = []
    for run_dir in a.run_dirs:  # all read before the table starts: a bad one leaves no half table
        try:
            rows.append(summarize(run_dir))
        except (OSError, ValueError, LookupError, TypeError) as e:  # missing, damaged, or not a run of these scripts
            p.error(f"cannot read the run '{run_dir}': {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    print("| env | seed | iterations | episodes | env steps | wall time | workers | target reached | last evaluation |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
