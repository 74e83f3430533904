"""The results tables of README.md and docs/*.md, rendered from the rows of docs/results/*.csv.

    python docs/bench/tables.py           # rewrites every marked block from the rows
    python docs/bench/tables.py --check   # exit status 1, and the blocks' names, if one differs

A block is the lines between `<!-- table: NAME -->` and `<!-- end table -->`; NAME is a function
of TABLES below, which returns the block's lines. Each table names the rows it is over: the
script, the flags (none: the default command), the host (processor, SIMD, the cores the run
could use, "not recorded" for rows made before the scripts recorded them) and the commits.
"""

import argparse
import csv
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = [
    "README.md",
    "docs/es_basic.md",
    "docs/ars.md",
    "docs/es_openai.md",
    "docs/nes_exercise.md",
]
BLOCK = re.compile(r"(<!-- table: (\S+) -->\n)(.*?)(<!-- end table -->)", re.S)
# The non-timing columns of a training row: equal in two rows means the same run, bit for bit.
SAME = "reached_iteration reached_env_steps best_eval best_eval_iteration env_steps".split()


def read(name: str, **match) -> list:
    """The rows of docs/results/<name> whose columns equal the keyword values."""
    with open(os.path.join(ROOT, "docs", "results", name)) as f:
        rows = list(csv.DictReader(f))
    return [r for r in rows if all(r[key] == value for key, value in match.items())]


def host(r: dict) -> str:
    """'AMD EPYC (AVX2), 2 cores', or 'processor not recorded'."""
    if not r["processor"]:
        return "processor not recorded"
    simd = "AVX-512" if "avx512f" in r["simd"].split() else "AVX2"
    cores = f"{r['cores']} cores" if r["cores"] else "cores not recorded"
    return f"{r['processor']} ({simd}), {cores}"


def by_host(rows: list) -> dict:
    """{host: its rows}, in the order the hosts first appear."""
    groups = {}
    for r in rows:
        groups.setdefault(host(r), []).append(r)
    return groups


def commits(rows: list) -> str:
    names = sorted({r["commit"] for r in rows if r["commit"]})
    if len(names) > 2:
        return f"{names[0]} ... ({len(names)} commits)"
    return ", ".join(names)


def days(rows: list) -> str:
    dates = sorted({(r.get("started") or r.get("date"))[:10] for r in rows})
    if len(dates) > 1:
        return f"{dates[0]} to {dates[-1]}"
    return dates[0]


def duration(seconds: float) -> str:
    if seconds < 100:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def millions(steps) -> str:
    return f"{int(steps) / 1e6:.2f} M"


def seeds_of(rows: list, seeds) -> list:
    """The row of each seed, None where there is none."""
    by_seed = {int(r["seed"]): r for r in rows}
    return [by_seed.get(seed) for seed in seeds]


def same_as(rows: list, others: list) -> bool:
    """Whether every row equals the other host's row of its seed in every non-timing column."""
    theirs = {r["seed"]: r for r in others}
    shared = [r for r in rows if r["seed"] in theirs]
    return bool(shared) and all(
        all(r[key] == theirs[r["seed"]][key] for key in SAME) for r in shared
    )


def trained_cell(r, unit="iteration") -> str:
    """A training run: where it reached its target, or that it did not, and its best evaluation."""
    if r is None:
        return "no row"
    if r["reached_iteration"]:
        return (
            f"{unit} {r['reached_iteration']}: {int(r['reached_episodes']):,} episodes, "
            f"{millions(r['reached_env_steps'])} steps, {duration(float(r['reached_wall_time_s']))}"
        )
    return (
        f"not reached in {r['iterations']} {unit}s ({millions(r['env_steps'])} steps, "
        f"{duration(float(r['wall_time_s']))}): best {float(r['best_eval']):.1f}"
    )


def played(r) -> str:
    if r is None or not r["play_return"]:
        return "not played"
    return f"{float(r['play_return']):.1f} +- {float(r['play_std']):.1f}"


def es_basic_solves() -> list:
    """docs/es_basic.md: the default command on CartPole-v1 and LunarLander-v3, seeds 0-2, with
    the final policy on 100 fresh episodes."""
    lines = [
        "| task, default command | host (commits; day) | seed 0 | seed 1 | seed 2 |",
        "|---|---|---|---|---|",
    ]
    verdicts = []
    for env in ("CartPole-v1", "LunarLander-v3"):
        groups = by_host(read("es_basic_solves.csv", script="es_basic.py", env=env, variant=""))
        for name, rows in groups.items():
            cells = []
            for r in seeds_of(rows, range(3)):
                cells.append(f"{trained_cell(r)}; fresh: {played(r)}")
            task = f"{env} to {float(rows[0]['target']):g}"
            where = f"{name} ({commits(rows)}; {days(rows)})"
            lines.append(f"| {task} | {where} | " + " | ".join(cells) + " |")
        hosts = list(groups)
        for name in hosts[1:]:
            verdict = "equal" if same_as(groups[name], groups[hosts[0]]) else "differ"
            verdicts.append(f"{env}: the {name} rows and the {hosts[0]} rows {verdict}")
    lines.append("")
    lines.append(f"In every non-timing column ({', '.join(SAME)}), seed by seed: ")
    lines[-1] += "; ".join(verdicts) + "."
    return lines


def ars_generic() -> list:
    """docs/ars.md: the generic defaults (no preset) on three tasks, seeds 0-2."""
    rows = read("ars_generic.csv", script="ars.py", variant="", flags="")
    lines = ["| env (target) | seed 0 | seed 1 | seed 2 |", "|---|---|---|---|"]
    for env in ("LunarLanderContinuous-v3", "MountainCarContinuous-v0", "Pendulum-v1"):
        mine = [r for r in rows if r["env"] == env]
        if not mine:
            continue
        cells = [trained_cell(r) for r in seeds_of(mine, range(3))]
        lines.append(f"| {env} ({float(mine[0]['target']):g}) | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"*Rows of [ars_generic.csv](results/ars_generic.csv): {host(rows[0])}, commit")
    lines[-1] += f" {commits(rows)}, {days(rows)}.*"
    return lines


def nes_exercise_seeds() -> list:
    """docs/nes_exercise.md: the teacher's solution with the defaults, a row per seed."""
    rows = read("nes_exercise.csv")
    means = sorted(float(r["return_mean"]) for r in rows)
    seconds = [float(r["wall_time_s"]) for r in rows]
    seeds = sorted(int(r["seed"]) for r in rows)
    reached = (
        "every seed" if means[0] == means[-1] else f"{means[0]:.1f} to {means[-1]:.1f} on seeds"
    )
    solved = sum(float(r["return_mean"]) >= 475 for r in rows)
    return [
        "**What a correct solution reaches.** The teacher's solution with the defaults reaches a "
        f"100-episode mean of **{means[-1]:.1f} on {reached} {seeds[0]}-{seeds[-1]}** ({solved} of "
        f"{len(rows)} at 475 or more), in {min(seconds):.1f} to {max(seconds):.1f} s a command "
        f"(median {statistics.median(seconds):.1f} s): `python docs/bench/nes_exercise_seeds.py`, "
        f"a row per seed in [nes_exercise.csv](results/nes_exercise.csv); {host(rows[0])}, commit "
        f"{commits(rows)}, {days(rows)}.",
    ]


def es_basic_compare() -> list:
    """docs/es_basic.md: CartPole-v1's preset mirrored or plain, with ranks or raw returns."""
    rows = read("es_basic_solves.csv", script="es_basic.py", env="CartPole-v1")
    host_of_variants = host(read("es_basic_solves.csv", variant="plain")[0])
    rows = [r for r in rows if host(r) == host_of_variants]
    parts = []
    for variant, name in (("", "mirrored"), ("plain", "plain")):
        mine = seeds_of([r for r in rows if r["variant"] == variant], range(3))
        episodes = ", ".join(
            f"{int(r['reached_episodes']):,}" for r in mine if r["reached_episodes"]
        )
        parts.append(f"{name} {episodes}")
    raw = [r for r in rows if r["variant"] in ("raw", "plain_raw")]
    reached = sum(bool(r["reached_iteration"]) for r in raw)
    best = sorted(float(r["best_eval"]) for r in raw)
    return [
        f"With ranks every seed reaches 475 (episodes, seeds 0-2: {'; '.join(parts)}); with raw "
        f"returns {reached} of {len(raw)} runs do in 100 iterations (best evaluations "
        f"{best[0]:.1f}-{best[-1]:.1f}): the step scales with the returns. {host_of_variants}."
    ]


TABLES = {
    f.__name__: f for f in (es_basic_solves, es_basic_compare, ars_generic, nes_exercise_seeds)
}


def render(text: str) -> tuple:
    """(the text with every block rendered, the names of the blocks that changed)."""
    changed = []

    def block(m) -> str:
        name = m.group(2)
        if name not in TABLES:
            raise SystemExit(f"tables.py: error: no table named {name} (know: {', '.join(TABLES)})")
        body = "\n".join(TABLES[name]()) + "\n"
        if body != m.group(3):
            changed.append(name)
        return m.group(1) + body + m.group(4)

    return BLOCK.sub(block, text), changed


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a block differs")
    a = p.parse_args()
    stale = []
    for page in PAGES:
        path = os.path.join(ROOT, page)
        with open(path) as f:
            text = f.read()
        new, changed = render(text)
        stale += [f"{page}: {name}" for name in changed]
        if changed and not a.check:
            with open(path, "w") as f:
                f.write(new)
    for line in stale:
        print(f"{line} {'differs from its rows' if a.check else 'rewritten'}")
    if a.check and stale:
        sys.exit(1)


if __name__ == "__main__":
    main()
