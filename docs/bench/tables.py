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
import itertools
import math
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
    "docs/results/README.md",
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


def spans(numbers: list) -> str:
    """[0, 1, 2, 3, 7, 9, 10] -> '0-3, 7, 9-10'."""
    parts = []
    start = numbers[0]
    for previous, number in zip(numbers, numbers[1:] + [-1]):
        if number == previous + 1:  # the span goes on
            continue
        if start == previous:
            parts.append(str(start))
        else:
            parts.append(f"{start}-{previous}")
        start = number
    return ", ".join(parts)


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
    """results/README.md: the default command on CartPole-v1 and LunarLander-v3, seeds 0-2, with
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
    """results/README.md: the generic defaults (no preset) on three tasks, seeds 0-2."""
    rows = read("ars_generic.csv", script="ars.py", variant="", flags="")
    lines = [
        "`bash docs/bench/ars_generic.sh`: `python ars.py --env E --seed S --target-return T "
        "--workers 2`, no other flag; a 10-episode evaluation every 10 iterations; the first one "
        "at the target. Rows of [ars_generic.csv](results/ars_generic.csv): "
        f"{host(rows[0])}, commit {commits(rows)}, {days(rows)}.",
        "",
        "| env (target) | seed 0 | seed 1 | seed 2 |",
        "|---|---|---|---|",
    ]
    for env in ("LunarLanderContinuous-v3", "MountainCarContinuous-v0", "Pendulum-v1"):
        mine = [r for r in rows if r["env"] == env]
        if not mine:
            continue
        cells = [trained_cell(r) for r in seeds_of(mine, range(3))]
        lines.append(f"| {env} ({float(mine[0]['target']):g}) | " + " | ".join(cells) + " |")
    return lines


def exercise_rows() -> list:
    """The rows of nes_exercise.csv of the newest commit that ran seeds 0-9."""
    rows = read("nes_exercise.csv")
    full = [c for c in dict.fromkeys(r["commit"] for r in rows) if len(read_commit(rows, c)) >= 10]
    return read_commit(rows, full[-1])


def read_commit(rows: list, commit: str) -> list:
    return [r for r in rows if r["commit"] == commit]


def nes_exercise_seeds() -> list:
    """docs/nes_exercise.md: the teacher's solution with the defaults, a row per seed."""
    rows = exercise_rows()
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
        f"a row per seed in [nes_exercise.csv](results/nes_exercise.csv); {host(rows[0])}.",
        "",
        *nes_exercise_log(),
    ]


def nes_exercise_log() -> list:
    """Seed 0's log, from its row's log_returns (in nes_exercise_seeds' block)."""
    (r,) = [r for r in exercise_rows() if r["seed"] == "0"]
    log = r["log_returns"].split()
    last = len(log) - 1
    shown = sorted({*range(0, last - 2, 10), last - 2, last - 1, last})
    fall = max(range(1, len(log)), key=lambda i: float(log[i - 1]) - float(log[i]))
    return [
        f"Seed 0's log (its row of [nes_exercise.csv](results/nes_exercise.csv), {host(r)}), the "
        "mean return of the perturbed policies by iteration:",
        "",
        "| iteration | " + " | ".join(str(i) for i in shown) + " |",
        "|---|" + "---|" * len(shown),
        "| mean return | " + " | ".join(log[i] for i in shown) + " |",
        "",
        f"It climbs with ups and downs (its largest fall: {log[fall - 1]} at iteration {fall - 1},"
        f" {log[fall]} at {fall}) and stops at the target at iteration {last}, below the "
        f"evaluation of $\\mu$ ({float(r['return_mean']):.1f}): some perturbed members still fail.",
    ]


def es_basic_compare() -> list:
    """results/README.md: CartPole-v1's preset mirrored or plain, with ranks or raw returns."""
    rows = read("es_basic_solves.csv", script="es_basic.py", env="CartPole-v1")
    host_of_variants = host(read("es_basic_solves.csv", variant="plain")[-1])  # the newest
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


# Table 3 of the ES paper: the steps ES took to reach TRPO's score after 5 M steps.
PAPER_ES_STEPS = {"HalfCheetah-v5": 2.88e6, "Swimmer-v5": 1.39e6, "Hopper-v5": 31.6e6}


def es_openai_anchors() -> list:
    """results/README.md: each preset to its Table 3 anchor, per host and variant (rows of the
    preset's own flags only), seeds 0-2 and every seed of the group."""
    lines = [
        "| env (paper's ES) | host, variant (commits; days) | seed 0 | seed 1 | seed 2 | all seeds"
        " |",
        "|---|---|---|---|---|---|",
    ]
    rows = read("es_openai_mujoco.csv", script="es_openai.py", flags="")
    for env, paper in PAPER_ES_STEPS.items():
        groups = {}
        for r in rows:
            if r["env"] == env:
                groups.setdefault((host(r), r["variant"]), []).append(r)
        for (name, variant), group in groups.items():
            cells = []
            for r in seeds_of(group, range(3)):
                cell = trained_cell(r, "generation")
                if r is not None and r["play_return"]:
                    cell += f"; 20 fresh episodes: {played(r)}"
                cells.append(cell)
            reached = [int(r["reached_env_steps"]) for r in group if r["reached_env_steps"]]
            within = sum(steps <= paper for steps in reached)
            seeds = spans(sorted(int(r["seed"]) for r in group))
            every = f"seeds {seeds}: {len(reached)} reached, {within} within {millions(paper)}"
            if reached:
                every += f"; median {millions(statistics.median(reached))} of those reached"
            where = f"{name}, {variant or 'the default command'} ({commits(group)}; {days(group)})"
            lines.append(f"| {env} ({millions(paper)}) | {where} | " + " | ".join(cells))
            lines[-1] += f" | {every} |"
    return lines


# The ARS paper's Table 1: average episodes of ARS V2-t to its thresholds (Swimmer's preset
# here is V1, RL Baselines3 Zoo's "closest to the paper").
PAPER_ARS_EPISODES = {"Swimmer-v5": 427, "HalfCheetah-v5": 1707, "Hopper-v5": 1973}


def median_to_target(rows: list, column="reached_episodes") -> str:
    """The median of a column at the target over the rows, a miss counted as never ('never' if
    half or more missed)."""
    values = sorted(int(r[column]) for r in rows if r[column])
    misses = len(rows) - len(values)
    ranked = values + [None] * misses
    middle = ranked[(len(ranked) - 1) // 2 : len(ranked) // 2 + 1]
    if None in middle:
        return "never"
    return f"{statistics.median(middle):,.0f}"


def ars_thresholds() -> list:
    """results/README.md: training episodes of each MuJoCo preset to the paper's threshold, by
    host and variant: the median of seeds 0-2 and of every seed, a miss counted as never."""
    lines = [
        "| env (paper) | host, variant, flags (commits; days) | seeds 0-2 | all seeds | reached |",
        "|---|---|---|---|---|",
    ]
    rows = read("ars_mujoco.csv", script="ars.py")
    for env, paper in PAPER_ARS_EPISODES.items():
        groups = {}
        for r in rows:
            if r["env"] == env:
                groups.setdefault((host(r), r["variant"], r["flags"]), []).append(r)
        for (name, variant, flags), group in groups.items():
            first = [r for r in group if int(r["seed"]) < 3]
            seeds = spans(sorted(int(r["seed"]) for r in group))
            reached = sum(bool(r["reached_episodes"]) for r in group)
            where = f"{name}, {variant or 'the default command'}, {flags or 'the preset'}"
            where += f" ({commits(group)}; {days(group)})"
            lines.append(
                f"| {env} ({paper:,}) | {where} | {median_to_target(first) if first else ''} | "
                f"{median_to_target(group)} (seeds {seeds}) | {reached} of {len(group)} |"
            )
    return lines


def newest_full_group(rows: list, seeds=range(3)) -> list:
    """The rows of the (host, variant) group that has every seed in seeds, and of those the one
    that ran last; [] if none has."""
    groups = {}
    for r in rows:
        groups.setdefault((host(r), r["variant"]), []).append(r)
    full = [g for g in groups.values() if {int(r["seed"]) for r in g} >= set(seeds)]
    if not full:
        return []
    return max(full, key=lambda g: max(r["started"] for r in g))


def largest_group(rows: list) -> list:
    """The rows of the (host, variant) group with the most seeds, the newest of equal ones."""
    groups = {}
    for r in rows:
        groups.setdefault((host(r), r["variant"]), []).append(r)
    return max(groups.values(), key=lambda g: (len(g), max(r["started"] for r in g)))


def compact(tasks: list) -> list:
    """A study page's results: per task (name, paper's figure or "", rows, column, unit), the
    median over its seeds (a miss counts as never) and the range of those reached."""
    lines = [
        "| task, command | seeds | the paper | median to the target, a miss as never (range) "
        "| reached | machine |",
        "|---|---|---|---|---|---|",
    ]
    for name, paper, rows, column, unit in tasks:
        newest = {}
        for r in sorted(rows, key=lambda r: r["started"]):  # a seed run again: its newest row
            newest[r["seed"]] = r
        rows = list(newest.values())
        counts = sorted(float(r[column]) if r[column] else math.inf for r in rows)
        reached = [c for c in counts if c < math.inf]
        show = (lambda c: millions(c)) if unit == "steps" else (lambda c: f"{c:,.0f}")
        middle = statistics.median(counts)
        median = "never" if middle == math.inf else f"{show(middle)} {unit}"
        spread = f" ({show(reached[0])}-{show(reached[-1])})" if reached else ""
        seeds = spans(sorted(int(r["seed"]) for r in rows))
        lines.append(
            f"| {name} | {seeds} | {paper or 'no figure'} | {median}{spread} "
            f"| {len(reached)} of {len(rows)} | {host(rows[0])} |"
        )
    return lines


def es_basic_tasks() -> list:
    rows = read("es_basic_solves.csv", variant="", flags="")
    tasks = []
    for env, target in (("CartPole-v1", 475), ("LunarLander-v3", 200)):
        group = newest_full_group([r for r in rows if r["env"] == env])
        name = f"`python es_basic.py --env {env}`, to {target}"
        tasks.append((name, "", group, "reached_episodes", "episodes"))
    return tasks


def ars_tasks() -> list:
    walker = newest_full_group(read("ars_bipedalwalker.csv", flags=""), seeds=range(12))
    name = "`python ars.py --env BipedalWalker-v3`, to a confirmed 300"
    tasks = [(name, "", walker, "reached_env_steps", "steps")]
    for env, paper in (("Swimmer-v5", 427), ("Hopper-v5", 1973), ("HalfCheetah-v5", 1707)):
        group = read("ars_mujoco.csv", env=env, variant="avx512")
        name = f"`python ars.py --env {env}`, to {float(group[0]['target']):g}"
        tasks.append(
            (name, f"{paper:,} episodes (Table 1, V2-t)", group, "reached_episodes", "episodes")
        )
    return tasks


def es_openai_tasks() -> list:
    tasks = []
    for env, paper in (("HalfCheetah-v5", 2.88), ("Hopper-v5", 31.6), ("Swimmer-v5", 1.39)):
        group = largest_group(read("es_openai_mujoco.csv", env=env, flags=""))
        name = f"`python es_openai.py --env {env}`, to {float(group[0]['target']):g}"
        tasks.append((name, f"{paper:.2f} M steps (Table 3)", group, "reached_env_steps", "steps"))
    return tasks


def es_basic_summary() -> list:
    return compact(es_basic_tasks())


def ars_summary() -> list:
    return compact(ars_tasks())


def es_openai_summary() -> list:
    return compact(es_openai_tasks())


def throughput_rows(script: str, env: str) -> list:
    """The newest day's rows of throughput.py SCRIPT on env."""
    rows = read("throughput.csv", bench=f"throughput.py {script}", env=env)
    newest = max(r["date"][:10] for r in rows)
    return [r for r in rows if r["date"][:10] == newest]


def throughput(script: str, env: str = "HalfCheetah-v5") -> dict:
    """The newest day of throughput.py SCRIPT on env, per repetition: 1 worker over the bare
    loop replaying its episodes (the per-core ratio), the same two side by side (paired), 2
    workers over 1, two bare loops over one; with its host, day and commit."""
    rows = throughput_rows(script, env)
    newest = rows[0]["date"][:10]
    out = dict(per_core=[], paired=[], scaling=[], bare_scaling=[], day=newest)
    out["host"] = host(rows[0])
    out["commit"] = commits(rows)
    for repetition in sorted({r["repetition"] for r in rows}):
        value = {}
        for r in rows:
            if r["repetition"] == repetition:
                value[r["run"], r["workers"]] = float(r["value"])
        one = value[script, "1"]
        bare = value["bare loop, the training's episodes", "1"]
        out["per_core"].append(one / bare)
        beside = value[f"bare loop beside {script}", "1"]
        out["paired"].append(value[f"{script} beside a bare loop", "1"] / beside)
        out["scaling"].append(value[script, "2"] / one)
        out["bare_scaling"].append(value["bare loop, the training's episodes", "2"] / bare)
    return out


def spread(values: list, unit="") -> str:
    """'0.92 (0.90-0.96)': the median and the range."""
    middle = statistics.median(values)
    return f"{middle:.2f}{unit} ({min(values):.2f}-{max(values):.2f}{unit})"


def throughput_sentence(script: str, env: str = "HalfCheetah-v5") -> list:
    t = throughput(script, env)
    return [
        f"`{script}` on {env}, medians of {len(t['per_core'])} repetitions (range): the per-core "
        f"ratio **{spread(t['per_core'])}**, side by side **{spread(t['paired'])}**, 2 workers "
        f"over 1 **{spread(t['scaling'], 'x')}**, two bare loops over one "
        f"{spread(t['bare_scaling'], 'x')}; {t['host']}, {t['day']}, commit {t['commit']}."
    ]


def throughput_ars() -> list:
    lines = throughput_sentence("ars.py")
    return [lines[0], "", *throughput_sentence("ars.py", "BipedalWalker-v3")]


def throughput_es_openai() -> list:
    return throughput_sentence("es_openai.py")


def glance() -> list:
    """README.md: the study pages' tables in one, and the exercise's and the throughput's lines."""
    lines = compact(es_basic_tasks() + ars_tasks() + es_openai_tasks())
    exercise = exercise_rows()
    low = min(float(r["return_mean"]) for r in exercise)
    lines += [
        "",
        f"The exercise's solution: a 100-episode mean of at least {low:.1f} on each of "
        f"{len(exercise)} seeds ({host(exercise[0])}; "
        "[A healthy run](docs/nes_exercise.md#a-healthy-run)). "
        "Throughput, memory, every run and its learning curve: "
        "[docs/results](docs/results/README.md).",
    ]
    return lines


def ars_bipedalwalker() -> list:
    """results/README.md: the default command on BipedalWalker-v3, seeds 0-11."""
    rows = newest_full_group(read("ars_bipedalwalker.csv", flags=""), seeds=range(12))
    lines = [
        "| seed | solved at iteration (a confirmed 300) | training episodes | env steps "
        "| wall time "
        "| confirmation, 100 fresh episodes | best 20-episode screen (iteration) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: int(r["seed"])):
        best = f"{float(r['best_eval']):.1f} ({r['best_eval_iteration']})"
        if r["reached_iteration"]:
            lines.append(
                f"| {r['seed']} | {r['reached_iteration']} | {int(r['reached_episodes']):,} | "
                f"{millions(r['reached_env_steps'])} | "
                f"{duration(float(r['reached_wall_time_s']))} | "
                f"{float(r['confirm_return']):.1f} | {best} |"
            )
        else:
            lines.append(
                f"| {r['seed']} | **not solved**, stopped at {r['iterations']} | "
                f"{int(r['episodes']):,} | {millions(r['env_steps'])} | "
                f"{duration(float(r['wall_time_s']))} | none | {best} |"
            )
    solved = [r for r in rows if r["reached_iteration"]]
    minutes = [float(r["reached_wall_time_s"]) / 60 for r in solved]
    steps = [int(r["reached_env_steps"]) for r in solved]
    lines.append("")
    lines.append(
        f"**{len(solved)} of {len(rows)} seeds solved**, in {min(minutes):.1f} to "
        f"{max(minutes):.1f} minutes (median {statistics.median(minutes):.1f}) and "
        f"{millions(min(steps))} to {millions(max(steps))} steps (median "
        f"{millions(statistics.median(steps))}): {host(rows[0])}, commits {commits(rows)}, "
        f"{days(rows)}, variant {rows[0]['variant'] or 'none'} of "
        "[ars_bipedalwalker.csv](results/ars_bipedalwalker.csv)."
    )
    return lines


def ars_bipedalwalker_screens() -> list:
    """results/README.md: every screen of BipedalWalker-v3 (a row with flags), beside the default
    command's row of the same seed on the same host."""
    rows = read("ars_bipedalwalker.csv")
    preset = {(chip(r), r["seed"]): r for r in rows if not r["flags"]}  # the newest, if several
    lines = [
        "| screen | flags | host, commits | seed: env steps to a confirmed 300 (the preset's) "
        "| seeds with fewer steps than the preset |",
        "|---|---|---|---|---|",
    ]
    screens = {}
    for r in rows:
        if r["flags"]:
            screens.setdefault((r["variant"], r["flags"], host(r)), []).append(r)
    sys.path.insert(0, ROOT)
    import ars

    options = set(re.findall(r"--[a-z-]+", ars.build_parser().format_help()))
    for (variant, flags, where), group in screens.items():
        gone = [flag for flag in re.findall(r"--[a-z-]+", flags) if flag not in options]
        if gone:
            flags += f" ({', '.join(gone)}: an option since removed)"
        seeds = []
        signs = []  # per seed: True if fewer steps than the preset's, False if more, None unknown
        for r in sorted(group, key=seed_key):
            base = preset.get((chip(r), r["seed"]))
            seeds.append(f"{r['seed']}: {to_solve(r)} ({to_solve(base) if base else 'no row'})")
            if base:
                signs.append(fewer_steps(r, base))
        known = [sign for sign in signs if sign is not None]
        fewer = f"{sum(known)} of {len(known)}" if known else "no seed to compare"
        lines.append(
            f"| {variant} | {flags} | {where}, {commits(group)} | {'; '.join(seeds)} | {fewer} |"
        )
    return lines


def fewer_steps(r: dict, base: dict):
    """True if run r solved in fewer env steps than base, False if in more, None if the rows
    cannot tell (a run stopped unsolved before the other's count)."""
    steps = int(r["reached_env_steps"] or r["env_steps"])
    base_steps = int(base["reached_env_steps"] or base["env_steps"])
    if r["reached_env_steps"] and base["reached_env_steps"]:
        return steps < base_steps
    if r["reached_env_steps"] and steps <= base_steps:  # base was still unsolved at r's count
        return True
    if base["reached_env_steps"] and steps >= base_steps:  # r was still unsolved at base's count
        return False
    return None


def chip(r: dict) -> tuple:  # what the bits depend on: the processor and its AVX-512
    return r["processor"], "avx512f" in r["simd"].split()


def to_solve(r: dict) -> str:
    if r["reached_env_steps"]:
        return millions(r["reached_env_steps"])
    return f"not by {millions(r['env_steps'])}"


def seed_key(r: dict) -> int:
    return int(r["seed"])


def memory() -> list:
    """results/README.md: every run of es_openai_memory.py, the peak PSS of all processes."""
    lines = [
        "| script | options | peak PSS | processes | host, day |",
        "|---|---|---|---|---|",
    ]
    for r in read("memory.csv"):
        if "8f57846" in r["script"]:  # the code before the rewrite, measured beside it
            continue
        lines.append(
            f"| {r['script']} | `{r['options']}` | {float(r['peak_pss_gib']):.2f} GiB | "
            f"{r['processes']} | {host(r)}, {r['date'][:10]} |"
        )
    return lines


def triple_counts(values: list, paper: float) -> dict:
    """Over every triple of the per-seed counts: how many have a median, and how many an average,
    at or under the paper's figure; and how many single counts are."""
    triples = list(itertools.combinations(values, 3))
    return {
        "triples": len(triples),
        "median": sum(sorted(t)[1] <= paper for t in triples),
        "average": sum(sum(t) / 3 <= paper for t in triples),
        "single": sum(v <= paper for v in values),
    }


def ars_triples() -> list:
    """results/README.md: over every triple of the avx512 rows' seeds, how often three seeds
    would have met the paper's figure (a miss counts as infinite)."""
    lines = [
        "| env (paper) | runs (seeds) | reached | single runs at or under the paper's figure | "
        "triples whose median is at or under it | triples whose average is at or under it |",
        "|---|---|---|---|---|---|",
    ]
    for env in ("HalfCheetah-v5", "Hopper-v5", "Swimmer-v5"):
        paper = PAPER_ARS_EPISODES[env]
        rows = read("ars_mujoco.csv", env=env, variant="avx512")
        values = [float(r["reached_episodes"] or math.inf) for r in rows]
        c = triple_counts(values, paper)
        seeds = spans(sorted(int(r["seed"]) for r in rows))
        reached = sum(value != math.inf for value in values)
        n = len(values)
        lines.append(
            f"| {env} ({paper:,}) | {n} ({seeds}) | {reached} | {c['single']} "
            f"({c['single'] / n:.0%}) | {c['median']:,} of {c['triples']:,} "
            f"({c['median'] / c['triples']:.0%}) | {c['average']:,} of {c['triples']:,} "
            f"({c['average'] / c['triples']:.0%}) |"
        )
    return lines


def python_versions() -> list:
    """README.md: the newest run of python_versions.sh (its commit), a row per Python."""
    rows = read("python_versions.csv")
    newest = max(r["date"] for r in rows)
    commit = [r["commit"] for r in rows if r["date"] == newest][0]
    rows = [r for r in rows if r["commit"] == commit]
    newest = newest[:10]
    pythons = sorted((r["python"] for r in rows), key=lambda v: [int(x) for x in v.split(".")])
    passed = not any(re.search(r"\d+ (failed|errors?)\b", r["tests"]) for r in rows)  # not xfailed
    verdict = "the tests pass on each" if passed else "the tests do not pass on every one"
    ray = "with Ray" if all(r["ray"] == "1" for r in rows) else "without Ray (its tests skipped)"
    summaries = []
    for r in rows:
        counts = re.sub(r", \d+ warnings?", "", r["tests"].split(" in ")[0])
        summaries.append(f"{r['python']}: {counts}")
    summaries = "; ".join(summaries)
    return [
        f"Python {pythons[0]} to {pythons[-1]}; on Linux every requirement installs as a binary "
        f"wheel and {verdict}, {ray} ({summaries}; {host(rows[0])}, {newest}, commit "
        f"{commits(rows)}: [python_versions.csv](docs/results/python_versions.csv), "
        "`bash docs/bench/python_versions.sh PYTHON ...`)."
    ]


TABLES = {
    f.__name__: f
    for f in (
        glance,
        python_versions,
        es_basic_solves,
        es_basic_compare,
        ars_bipedalwalker,
        ars_bipedalwalker_screens,
        ars_thresholds,
        ars_triples,
        ars_generic,
        es_openai_anchors,
        throughput_ars,
        throughput_es_openai,
        memory,
        nes_exercise_seeds,
        es_basic_summary,
        ars_summary,
        es_openai_summary,
    )
}


def relink(body: str, page: str) -> str:
    """The tables link docs/ pages as seen from docs/ ('results/x.csv'), or from the top
    ('docs/results/x.csv'); the links as seen from `page`."""
    body = re.sub(r"\]\((?!docs/|https?:)", "](docs/", body)  # every link from the top
    folder = os.path.dirname(page)
    return re.sub(
        r"\]\((docs/[^)#]*)", lambda m: f"]({os.path.relpath(m.group(1), folder or '.')}", body
    )


def render(text: str, page: str = "docs/x.md") -> tuple:
    """(the text with every block rendered, the names of the blocks that changed)."""
    changed = []

    def block(m) -> str:
        name = m.group(2)
        if name not in TABLES:
            raise SystemExit(f"tables.py: error: no table named {name} (know: {', '.join(TABLES)})")
        body = relink("\n".join(TABLES[name]()) + "\n", page)
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
        new, changed = render(text, page)
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
