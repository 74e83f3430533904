"""Summarize finished runs of ars.py, es_basic.py or es_openai.py as a Markdown table (one row per run).

    python docs/bench/summarize.py runs/BipedalWalker-v3__ars__*

For each run, where it stopped: the seed, iterations, training episodes and env steps, wall time,
whether the run reached its --target-return (for ars.py with --confirm-episodes, whether the
confirmation on fresh episodes passed), and the last evaluation's mean.
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
    reached = "yes" if evals and target is not None and float(evals[-1][8]) >= target else "no"
    if cfg.get("confirm_episodes"):  # ars.py: the confirmation on fresh episodes decides, not the screen
        confirm = last[ars.COLUMNS.index("confirm_return_mean")]
        reached = "yes" if confirm not in ("", "nan") and float(confirm) >= cfg["confirm_return"] else "no"
    return (f"| {cfg['env']} | {cfg['seed']} | {last[0]} | {int(last[1]):,} | {int(last[2]):,} | "
            f"{float(last[3]) / 60:.1f} min | {cfg['workers']} | {reached} | "
            f"{float(evals[-1][8]) if evals else float('nan'):.1f} |")


def main():
    print("| env | seed | iterations | episodes | env steps | wall time | workers | target reached | last evaluation |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run_dir in sys.argv[1:]:
        print(summarize(run_dir))


if __name__ == "__main__":
    main()
