"""How often would three seeds have met a paper's figure? Every triple of the given runs, counted.

    python docs/bench/seed_triples.py --paper 1973 docs/bench/results/Hopper-v5__ars__*__avx512
    python docs/bench/seed_triples.py --paper 31.6e6 --count env_steps docs/bench/results/Hopper-v5__es_openai__1__avx512 ...

A paper reports the episodes (or env steps) to a threshold over three seeds; runs of ars.py or
es_openai.py give one count per seed (the --count column of progress.csv at the first evaluation
whose mean reaches the run's --target-return; a run that never reaches it counts as larger than
any other). Over all
C(n, 3) triples of the n runs given, the script prints how many have a median, and how many an
average, at or under the paper's figure (a triple with a run that failed has no finite average),
and how many single runs are at or under it. It reads only progress.csv and config.json.
"""
import argparse
import itertools
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import ars  # noqa: E402


def count_to_target(run_dir: str, column: str = "episodes") -> tuple:
    """(seed, the column's value at the first evaluation at or over the target, or inf)."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"seed_triples.py: {run_dir}/config.json: {e}")
    if not isinstance(cfg, dict) or cfg.get("target_return") is None:
        sys.exit(f"seed_triples.py: {run_dir} has no --target-return in its config.json")
    with open(os.path.join(run_dir, "progress.csv")) as f:
        header = f.readline().strip().split(",")
    if column not in header or "eval_return_mean" not in header:
        sys.exit(f"seed_triples.py: {run_dir}/progress.csv has no {column} or eval_return_mean column")
    at, ev = header.index(column), header.index("eval_return_mean")
    try:
        rows = ars.read_csv_rows(os.path.join(run_dir, "progress.csv"))
    except (OSError, ValueError) as e:
        sys.exit(f"seed_triples.py: {e}")
    for row in rows:
        if row[ev] not in ("", "nan") and float(row[ev]) >= cfg["target_return"]:
            return cfg["seed"], int(float(row[at]))
    return cfg["seed"], math.inf


def fmt(v: float) -> str:
    return "not reached" if v == math.inf else f"{v:,.0f}"


def triple_counts(values: list, paper: float) -> dict:
    """Over all triples of the per-seed counts: how many have a median, and how many an average,
    at or under the paper's figure; and how many single counts are."""
    triples = list(itertools.combinations(values, 3))
    return {"triples": len(triples),
            "median": sum(sorted(t)[1] <= paper for t in triples),
            "average": sum(sum(t) / 3 <= paper for t in triples),
            "single": sum(v <= paper for v in values)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--paper", type=float, required=True, help="the paper's episodes to the threshold")
    p.add_argument("--count", default="episodes", choices=["episodes", "env_steps"],
                   help="what the paper counts (default: episodes)")
    p.add_argument("runs", nargs="+", help="run directories of runs made with --target-return")
    a = p.parse_args()
    missing = [r for r in a.runs if not os.path.isfile(os.path.join(r, "progress.csv"))
               or not os.path.isfile(os.path.join(r, "config.json"))]
    if missing:
        sys.exit(f"seed_triples.py: {missing[0]} is not a run directory (no progress.csv and config.json)")
    if len(a.runs) < 3:
        sys.exit("seed_triples.py: give at least 3 runs")
    counts = sorted(count_to_target(r, a.count) for r in a.runs)
    values = sorted(c for _, c in counts)
    n, k = len(values), triple_counts(values, a.paper)
    median = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
    print(f"seed: {a.count} to the target ->", ", ".join(f"{s}: {fmt(c)}" for s, c in counts))
    print(f"runs: {n}, reached: {sum(v < math.inf for v in values)}, median of all: {fmt(median)}")
    print(f"single runs at or under {a.paper:,.0f}: {k['single']} of {n} ({100 * k['single'] / n:.0f}%)")
    for what in ("median", "average"):
        print(f"triples whose {what} is at or under it: {k[what]} of {k['triples']} "
              f"({100 * k[what] / k['triples']:.0f}%)")


if __name__ == "__main__":
    main()
