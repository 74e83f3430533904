r"""How often would three seeds have met a paper's figure? Every triple of the given runs, counted.

    python docs/bench/seed_triples.py --paper 1973 --csv docs/results/ars_mujoco.csv \
        --env Hopper-v5 --variant avx512
    python docs/bench/seed_triples.py --paper 1973 runs/Hopper-v5__ars__*  # your run directories

A paper reports the episodes (or env steps) to a threshold over three seeds; runs of ars.py or
es_openai.py give one count per seed (the --count column of progress.csv at the first evaluation
whose mean reaches the run's --target-return; a run that never reaches it counts as larger than
any other). Over all C(n, 3) triples of the n runs given, the script prints how many have a
median, and how many an average, at or under the paper's figure (a triple with a run that failed
has no finite average), and how many single runs are at or under it. It reads progress.csv and
config.json and writes nothing; bad input gets one line on stderr and exit status 2.
"""

import argparse
import csv
import itertools
import json
import math
import os
import sys


def fail(message: str):
    print(f"seed_triples.py: {message}", file=sys.stderr)
    sys.exit(2)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not the usage block
        fail(message)


def count_to_target(run_dir: str, column: str = "episodes") -> tuple:
    """(seed, the column's value at the first evaluation at or over the target, or inf)."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            cfg = json.load(f)
        with open(os.path.join(run_dir, "progress.csv"), newline="") as f:
            header, *rows = list(csv.reader(f)) or [[]]
    except (OSError, ValueError) as e:
        fail(f"{run_dir}: {e}")
    if not isinstance(cfg, dict) or not isinstance(cfg.get("target_return"), (int, float)):
        fail(f"{run_dir}: its config.json has no --target-return")
    if (
        column not in header
        or "eval_return_mean" not in header
        or any(len(r) != len(header) for r in rows)
    ):
        fail(
            f"{run_dir}: its progress.csv has no {column} or eval_return_mean column, "
            "or a damaged row"
        )
    at, ev = header.index(column), header.index("eval_return_mean")
    try:
        for row in rows:
            if row[ev] not in ("", "nan") and float(row[ev]) >= cfg["target_return"]:
                return cfg.get("seed"), int(float(row[at]))
    except (ValueError, OverflowError) as e:  # a count that is not a finite number
        fail(f"{run_dir}: progress.csv: {e}")
    return cfg.get("seed"), math.inf


def fmt(v: float) -> str:
    return "not reached" if v == math.inf else f"{v:,.0f}"


def counts_from_csv(path: str, env: str, variant: str, column: str = "episodes") -> list:
    """[(seed, reached_<column> or inf)] of the rows of a docs/results CSV for env and variant."""
    try:
        with open(path, newline="") as f:
            rows = [
                r for r in csv.DictReader(f) if r.get("env") == env and r.get("variant") == variant
            ]
        return [
            (int(r["seed"]), int(r[f"reached_{column}"]) if r[f"reached_{column}"] else math.inf)
            for r in rows
        ]
    except (OSError, KeyError, ValueError) as e:
        fail(f"{path}: {e}")


def triple_counts(values: list, paper: float) -> dict:
    """Over all triples of the per-seed counts: how many have a median, and how many an average,
    at or under the paper's figure; and how many single counts are."""
    triples = list(itertools.combinations(values, 3))
    return {
        "triples": len(triples),
        "median": sum(sorted(t)[1] <= paper for t in triples),
        "average": sum(sum(t) / 3 <= paper for t in triples),
        "single": sum(v <= paper for v in values),
    }


def main():
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--paper",
        type=float,
        required=True,
        help=(
            "the paper's figure: episodes (or, with --count env_steps, env steps) to the threshold"
        ),
    )
    p.add_argument(
        "--count",
        default="episodes",
        choices=["episodes", "env_steps"],
        help="what the paper counts (default: episodes)",
    )
    p.add_argument("runs", nargs="*", help="run directories of runs made with --target-return")
    p.add_argument(
        "--csv", help="instead of run directories: a docs/results CSV, with --env and --variant"
    )
    p.add_argument("--env", help="with --csv: the env of the rows to count")
    p.add_argument("--variant", default="", help="with --csv: their variant (default: none)")
    a = p.parse_args()
    if not a.paper > 0 or math.isinf(a.paper):
        fail(f"--paper must be a positive number, not {a.paper}")
    missing = [
        r
        for r in a.runs
        if not os.path.isfile(os.path.join(r, "progress.csv"))
        or not os.path.isfile(os.path.join(r, "config.json"))
    ]
    if missing:
        fail(f"{missing[0]} is not a run directory (no progress.csv and config.json)")
    found = (
        counts_from_csv(a.csv, a.env, a.variant, a.count)
        if a.csv
        else [count_to_target(r, a.count) for r in a.runs]
    )
    if len(found) < 3:
        fail("give at least 3 runs")
    counts = sorted(found, key=lambda sc: sc[0] if isinstance(sc[0], int) else -1)  # by seed
    values = sorted(c for _, c in counts)
    n, k = len(values), triple_counts(values, a.paper)
    median = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
    print(f"seed: {a.count} to the target ->", ", ".join(f"{s}: {fmt(c)}" for s, c in counts))
    print(f"runs: {n}, reached: {sum(v < math.inf for v in values)}, median of all: {fmt(median)}")
    print(
        f"single runs at or under {a.paper:,.0f}: "
        f"{k['single']} of {n} ({100 * k['single'] / n:.0f}%)"
    )
    for what in ("median", "average"):
        print(
            f"triples whose {what} is at or under it: {k[what]} of {k['triples']} "
            f"({100 * k[what] / k['triples']:.0f}%)"
        )


if __name__ == "__main__":
    main()
