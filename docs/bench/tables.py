"""The results tables of README.md and docs/*.md, rendered from the rows of docs/results/*.csv.

    python docs/bench/tables.py           # rewrites every marked block from the rows
    python docs/bench/tables.py --check   # exit status 1, and the blocks' names, if one differs

A block is the lines between `<!-- table: NAME -->` and `<!-- end table -->`; NAME is a function
of TABLES below, which returns the block's lines. A host is the processor, its SIMD and the cores
the run could use ("not recorded" for rows made before the scripts recorded them).
"""

import argparse
import csv
import glob
import itertools
import math
import os
import re
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = "README.md docs/es_basic.md docs/ars.md docs/es_openai.md docs/nes_exercise.md"
PAGES = [*PAGES.split(), "docs/results/README.md"]
CURVES = os.path.join(ROOT, "docs", "results", "curves")
BLOCK = re.compile(r"(<!-- table: (\S+) -->\n)(.*?)(<!-- end table -->)", re.S)
# The non-timing columns of a training row: equal in two rows means the same run, bit for bit.
SAME = "reached_iteration reached_env_steps best_eval best_eval_iteration env_steps".split()
# The papers' figures: ARS's Table 1 (episodes of V2-t to the threshold), ES's Table 3 (env steps
# to TRPO's score after 5 M steps).
ARS_TABLE_1 = {"Swimmer-v5": 427, "Hopper-v5": 1973, "HalfCheetah-v5": 1707}
ES_TABLE_3 = {"HalfCheetah-v5": 2.88e6, "Hopper-v5": 31.6e6, "Swimmer-v5": 1.39e6}
PAPER = {("ars.py", env): f"{n:,} episodes (Table 1, V2-t)" for env, n in ARS_TABLE_1.items()}
PAPER |= {
    ("es_openai.py", env): f"{n / 1e6:.2f} M steps (Table 3)" for env, n in ES_TABLE_3.items()
}
EPISODES = ("reached_episodes", "episodes")  # the column and unit of a count of episodes


def read(name: str, **match) -> list:
    """The rows of docs/results/<name> whose columns equal the keyword values."""
    with open(os.path.join(ROOT, "docs", "results", name)) as f:
        return [r for r in csv.DictReader(f) if all(r[k] == v for k, v in match.items())]


def host(r: dict) -> str:
    """'AMD EPYC (AVX2), 2 cores', or 'processor not recorded'."""
    if not r["processor"]:
        return "processor not recorded"
    simd = "AVX-512" if "avx512f" in r["simd"].split() else "AVX2"
    cores = f"{r['cores']} cores" if r["cores"] else "cores not recorded"
    return f"{r['processor']} ({simd}), {cores}"


def groups(rows: list, *keys) -> dict:
    """{(host, the keys' values): the newest row of each seed}, in the order first seen."""
    out = {}
    for r in sorted(rows, key=lambda r: r.get("started") or r.get("date") or ""):
        out.setdefault((host(r), *(r[k] for k in keys)), {})[r["seed"]] = r
    return {key: sorted(by_seed.values(), key=seed) for key, by_seed in out.items()}


def seed(r: dict) -> int:
    return int(r["seed"])


def when(rows: list) -> str:
    """'0c6c4ea ... (5 commits); 2026-11-25 to 2026-11-26'."""
    names = sorted({r["commit"] for r in rows if r["commit"]})
    names = f"{names[0]} ... ({len(names)} commits)" if len(names) > 2 else ", ".join(names)
    dates = sorted({(r.get("started") or r.get("date") or "")[:10] for r in rows} - {""})
    dates = " to ".join(dict.fromkeys([dates[0], dates[-1]])) if dates else "day not recorded"
    return f"{names}; {dates}"


def duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 100 else f"{seconds / 60:.1f} min"


def millions(steps) -> str:
    return f"{float(steps) / 1e6:.2f} M"


def spans(numbers: list) -> str:
    """[0, 1, 2, 3, 7, 9, 10] -> '0-3, 7, 9-10'."""
    parts = []
    for _, run in itertools.groupby(enumerate(numbers), lambda x: x[1] - x[0]):
        run = [n for _, n in run]
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ", ".join(parts)


def to_target(rows: list, column: str, unit: str) -> str:
    """The median of the column at the target over the rows, a miss counted as never, and the
    range of those reached: '2,560 episodes (1,280-12,800)'."""
    counts = sorted(float(r[column]) if r[column] else math.inf for r in rows)
    reached = [c for c in counts if c < math.inf]
    show = millions if unit == "steps" else (lambda c: f"{c:,.0f}")
    middle = statistics.median(counts)
    median = "never" if middle == math.inf else f"{show(middle)} {unit}"
    spread = f" ({show(reached[0])}-{show(reached[-1])})" if len(set(reached)) > 1 else ""
    return median + spread


def compact(tasks: list) -> list:
    """A study page's results: per task (name, paper's figure, rows, column, unit), the median to
    the target over its seeds and how many reached it."""
    lines = [
        "| task, command | seeds | the paper | median to the target, a miss as never (range) "
        "| reached | machine |",
        "|---|---|---|---|---|---|",
    ]
    for name, paper, rows, column, unit in tasks:
        reached = sum(bool(r[column]) for r in rows)
        lines.append(
            f"| {name} | {spans([seed(r) for r in rows])} | {paper or 'no figure'} | "
            f"{to_target(rows, column, unit)} | {reached} of {len(rows)} | {host(rows[0])} |"
        )
    return lines


def curve(r: dict) -> str:
    """The folder of curves/ that holds the row's learning curve, or '': the run's folder name, with
    the variant or its start (YYYYmmdd-HHMM) for a suffix, and the same last env_steps."""
    run = "__".join([r["env"], r["script"][:-3], r["seed"]])
    start = re.sub(r"(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d)", r"\1\2\3-\4\5", r["started"])
    names = [f"{run}__{r['variant']}" if r["variant"] else run]
    names += [f"{run}__{r['variant']}__{start}??", f"{run}__{start}??"] if start else []
    for folder in sorted({f for name in names for f in glob.glob(os.path.join(CURVES, name))}):
        with open(os.path.join(folder, "progress.csv")) as f:
            if f.readlines()[-1].split(",")[2] == r["env_steps"]:
                return os.path.relpath(folder, ROOT)
    return ""


def record(name: str, column="reached_env_steps", unit="steps") -> list:
    """The record of a results CSV: a line per environment, host, variant and flags (the newest
    row of each seed), with the median to the target, the best evaluations and the fresh
    episodes of --play; then whether the rows of one setting on two hosts are the same runs."""
    lines = [
        "| env (target) | variant: flags | host (commits; days) | seeds | median to the target, "
        "a miss as never (range) | reached | best evaluation, median (range) | --play on fresh "
        "episodes, median of runs | curves kept |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    grouped = groups(read(name), "env", "variant", "flags")
    for (where, env, variant, flags), group in sorted(grouped.items(), key=lambda g: g[0][1]):
        best = sorted(float(r["best_eval"]) for r in group)
        best_range = f" ({best[0]:.1f} to {best[-1]:.1f})" if len(best) > 1 else ""
        fresh = [float(r["play_return"]) for r in group if r["play_return"]]
        runs = f"{len(fresh)} run{'s' if len(fresh) > 1 else ''}"
        fresh = f"{statistics.median(fresh):.1f} ({runs})" if fresh else "not played"
        paper = PAPER.get((group[0]["script"], env))
        setting = ": ".join([variant or "default", flags] if flags else [variant or "default"])
        lines.append(
            f"| {env} ({float(group[0]['target']):g}{'; the paper: ' + paper if paper else ''}) | "
            f"{setting} | {where} ({when(group)}) | {spans([seed(r) for r in group])} | "
            f"{to_target(group, column, unit)} | {sum(bool(r[column]) for r in group)} of "
            f"{len(group)} | {statistics.median(best):.1f}{best_range} | "
            f"{fresh} | {sum(bool(curve(r)) for r in group)} |"
        )
    return lines + ["", same_runs(grouped)]


def same_runs(grouped: dict) -> str:
    """Which settings ran on more than one host, and whether their shared seeds' rows are equal
    in every non-timing column (SAME)."""
    settings = {}
    for (where, *setting), group in grouped.items():
        settings.setdefault(tuple(setting), []).append((where, {r["seed"]: r for r in group}))
    said = []
    for (env, variant, _), hosts in settings.items():
        for (a, rows_a), (b, rows_b) in itertools.combinations(hosts, 2):
            shared = sorted(set(rows_a) & set(rows_b), key=int)
            if shared:
                equal = all(rows_a[s][k] == rows_b[s][k] for s in shared for k in SAME)
                said.append(
                    f"{env} {variant or 'default'}, seeds {spans([int(s) for s in shared])}, "
                    f"{a} and {b}: {'the same runs' if equal else 'different runs'}"
                )
    if not said:
        return "No setting ran one seed on two hosts."
    return f"Rows of one setting on two hosts, in {', '.join(SAME)}: " + "; ".join(said) + "."


def largest_group(rows: list) -> list:
    """The rows of the host and variant with the most seeds, the newest of equal ones."""
    return max(
        groups(rows, "variant").values(), key=lambda g: (len(g), max(r["started"] for r in g))
    )


def es_basic_tasks() -> list:
    tasks = []
    for env, target in (("CartPole-v1", 475), ("LunarLander-v3", 200)):
        rows = largest_group(read("es_basic_solves.csv", env=env, variant="", flags=""))
        tasks.append((f"`python es_basic.py --env {env}`, to {target}", "", rows, *EPISODES))
    return tasks


def ars_tasks() -> list:
    walker = largest_group(read("ars_bipedalwalker.csv", flags=""))
    name = "`python ars.py --env BipedalWalker-v3`, to a confirmed 300"
    tasks = [(name, "", walker, "reached_env_steps", "steps")]
    for env in ("Swimmer-v5", "Hopper-v5", "HalfCheetah-v5"):
        rows = largest_group(read("ars_mujoco.csv", env=env, variant="avx512"))
        name = f"`python ars.py --env {env}`, to {float(rows[0]['target']):g}"
        tasks.append((name, PAPER["ars.py", env], rows, *EPISODES))
    return tasks


def es_openai_tasks() -> list:
    tasks = []
    for env in ("HalfCheetah-v5", "Hopper-v5", "Swimmer-v5"):
        rows = largest_group(read("es_openai_mujoco.csv", env=env, flags=""))
        name = f"`python es_openai.py --env {env}`, to {float(rows[0]['target']):g}"
        tasks.append((name, PAPER["es_openai.py", env], rows, "reached_env_steps", "steps"))
    return tasks


def glance() -> list:
    """README.md: the study pages' tables in one, and the exercise's line."""
    exercise = exercise_rows()
    low = min(float(r["return_mean"]) for r in exercise)
    return [
        *compact(es_basic_tasks() + ars_tasks() + es_openai_tasks()),
        "",
        f"The exercise's solution: a 100-episode mean of at least {low:.1f} on each of "
        f"{len(exercise)} seeds ({host(exercise[0])}; "
        "[A healthy run](docs/nes_exercise.md#a-healthy-run)). Throughput, memory, every run and "
        "its learning curve: [docs/results](docs/results/README.md).",
    ]


def ars_bipedalwalker() -> list:
    """results/README.md: the default command on BipedalWalker-v3, seeds 0-11, a row each."""
    rows = largest_group(read("ars_bipedalwalker.csv", flags=""))
    lines = [
        "| seed | solved at iteration (a confirmed 300) | training episodes | env steps "
        "| wall time | confirmation, 100 fresh episodes | best 20-episode screen (iteration) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        end = "reached_" if r["reached_iteration"] else ""
        solved = r["reached_iteration"] or f"**not solved**, stopped at {r['iterations']}"
        confirmed = f"{float(r['confirm_return']):.1f}" if r["confirm_return"] else "none"
        lines.append(
            f"| {r['seed']} | {solved} | {int(r[end + 'episodes']):,} | "
            f"{millions(r[end + 'env_steps'])} | {duration(float(r[end + 'wall_time_s']))} | "
            f"{confirmed} | {float(r['best_eval']):.1f} ({r['best_eval_iteration']}) |"
        )
    solved = [r for r in rows if r["reached_iteration"]]
    minutes = [float(r["reached_wall_time_s"]) / 60 for r in solved]
    return lines + [
        "",
        f"**{len(solved)} of {len(rows)} seeds solved**, in {min(minutes):.1f} to "
        f"{max(minutes):.1f} minutes (median {statistics.median(minutes):.1f}) and "
        f"{to_target(solved, 'reached_env_steps', 'steps')}: {host(rows[0])}, "
        f"{when(rows)}, variant {rows[0]['variant'] or 'none'} of "
        "[ars_bipedalwalker.csv](results/ars_bipedalwalker.csv).",
    ]


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
    """results/README.md: over every triple of the avx512 seeds, how often three seeds would have
    met the paper's figure (a miss counts as infinite)."""
    lines = [
        "| env (paper) | runs | single runs at or under the paper's figure | triples whose median "
        "is at or under it | triples whose average is at or under it |",
        "|---|---|---|---|---|",
    ]
    for env in ("HalfCheetah-v5", "Hopper-v5", "Swimmer-v5"):
        rows = largest_group(read("ars_mujoco.csv", env=env, variant="avx512"))
        values = [float(r["reached_episodes"] or math.inf) for r in rows]
        c = triple_counts(values, ARS_TABLE_1[env])
        n, t = len(values), c["triples"]
        lines.append(
            f"| {env} ({ARS_TABLE_1[env]:,}) | {n} | {c['single']} ({c['single'] / n:.0%}) | "
            f"{c['median']:,} of {t:,} ({c['median'] / t:.0%}) | {c['average']:,} of {t:,} "
            f"({c['average'] / t:.0%}) |"
        )
    return lines


def exercise_rows() -> list:
    """The rows of nes_exercise.csv of the newest commit that ran seeds 0-9."""
    commits = [r["commit"] for r in read("nes_exercise.csv")]
    return read("nes_exercise.csv", commit=[c for c in commits if commits.count(c) >= 10][-1])


def nes_exercise_seeds() -> list:
    """docs/nes_exercise.md: the teacher's solution with the defaults, and seed 0's log."""
    rows = exercise_rows()
    means = sorted(float(r["return_mean"]) for r in rows)
    seconds = [float(r["wall_time_s"]) for r in rows]
    low = "" if means[0] == means[-1] else f"{means[0]:.1f}-"
    reached = f"{low}{means[-1]:.1f} on {'every seed, ' if not low else 'seeds '}"
    (r,) = [r for r in rows if r["seed"] == "0"]
    log = r["log_returns"].split()
    last = len(log) - 1
    shown = sorted({*range(0, last - 2, 10), last - 2, last - 1, last})
    fall = max(range(1, len(log)), key=lambda i: float(log[i - 1]) - float(log[i]))
    return [
        "**What a correct solution reaches.** The teacher's solution with the defaults reaches a "
        f"100-episode mean of **{reached}{spans(sorted(map(seed, rows)))}"
        f"** ({sum(m >= 475 for m in means)} of {len(rows)} at 475 or more), in "
        f"{min(seconds):.1f} to {max(seconds):.1f} s a command (median "
        f"{statistics.median(seconds):.1f} s): `python docs/bench/nes_exercise_seeds.py`, a row "
        f"per seed in [nes_exercise.csv](results/nes_exercise.csv); {host(r)}.",
        "",
        "Seed 0's log, the mean return of the perturbed policies by iteration:",
        "",
        "| iteration | " + " | ".join(str(i) for i in shown) + " |",
        "|---|" + "---|" * len(shown),
        "| mean return | " + " | ".join(log[i] for i in shown) + " |",
        "",
        f"It climbs with ups and downs (its largest fall: {log[fall - 1]} at iteration {fall - 1},"
        f" {log[fall]} at {fall}) and stops at the target at iteration {last}, below the "
        f"evaluation of $\\mu$ ({float(r['return_mean']):.1f}): some perturbed members still fail.",
    ]


def throughput(script: str, env: str) -> str:
    """The newest day of `throughput.py SCRIPT` on env, per repetition: 1 worker over the bare
    loop replaying its episodes (the per-core ratio), the same two side by side, 2 workers over
    1, two bare loops over one; the medians and ranges."""
    rows = read("throughput.csv", bench=f"throughput.py {script}", env=env)
    day = max(r["date"][:10] for r in rows)
    rows = [r for r in rows if r["date"].startswith(day)]
    ratios = {"per-core ratio": [], "side by side": [], "2 workers over 1": []}
    ratios["two bare loops over one"] = []
    bare = "bare loop, the training's episodes"
    for repetition in sorted({r["repetition"] for r in rows}):
        v = {
            (r["run"], r["workers"]): float(r["value"])
            for r in rows
            if r["repetition"] == repetition
        }
        ratios["per-core ratio"].append(v[script, "1"] / v[bare, "1"])
        beside = v[f"{script} beside a bare loop", "1"] / v[f"bare loop beside {script}", "1"]
        ratios["side by side"].append(beside)
        ratios["2 workers over 1"].append(v[script, "2"] / v[script, "1"])
        ratios["two bare loops over one"].append(v[bare, "2"] / v[bare, "1"])
    said = [
        f"{name} **{statistics.median(x):.2f}** ({min(x):.2f}-{max(x):.2f})"
        for name, x in ratios.items()
    ]
    return (
        f"`{script}` on {env}, medians of {len(ratios['side by side'])} repetitions (range): "
        f"{', '.join(said)}; {host(rows[0])}, {when(rows)}."
    )


def memory() -> list:
    """results/README.md: every run of es_openai_memory.py, the peak PSS of all processes."""
    lines = ["| script | options | peak PSS | processes | host, day |", "|---|---|---|---|---|"]
    for r in read("memory.csv"):
        lines.append(
            f"| {r['script']} | `{r['options']}` | {float(r['peak_pss_gib']):.2f} GiB | "
            f"{r['processes']} | {host(r)}, {r['date'][:10]} |"
        )
    return lines


def python_versions() -> list:
    """README.md: the newest run of python_versions.sh (its commit), a row per Python."""
    newest = max(read("python_versions.csv"), key=lambda r: r["date"])
    rows = read("python_versions.csv", commit=newest["commit"])
    pythons = sorted((r["python"] for r in rows), key=lambda v: [int(x) for x in v.split(".")])
    passed = not any(re.search(r"\d+ (failed|errors?)\b", r["tests"]) for r in rows)
    ray = "with Ray" if all(r["ray"] == "1" for r in rows) else "without Ray (its tests skipped)"
    counts = [re.sub(r", \d+ warnings?", "", r["tests"].split(" in ")[0]) for r in rows]
    counts = "; ".join(f"{r['python']}: {c}" for r, c in zip(rows, counts))
    return [
        f"Python {pythons[0]} to {pythons[-1]}; on Linux every requirement installs as a binary "
        f"wheel and {'the tests pass on each' if passed else 'the tests do not pass on every one'}"
        f", {ray} ({counts}; {host(rows[0])}, {when(rows)}: "
        "[python_versions.csv](docs/results/python_versions.csv), "
        "`bash docs/bench/python_versions.sh PYTHON ...`)."
    ]


TABLES = {f.__name__: f for f in (glance, python_versions, ars_bipedalwalker, ars_triples)}
TABLES |= {f.__name__: f for f in (memory, nes_exercise_seeds)}
TABLES |= dict(  # a study page's compact table; the record of a CSV; throughput
    es_basic_summary=lambda: compact(es_basic_tasks()),
    ars_summary=lambda: compact(ars_tasks()),
    es_openai_summary=lambda: compact(es_openai_tasks()),
    es_basic_solves=lambda: record("es_basic_solves.csv", *EPISODES),
    ars_thresholds=lambda: record("ars_mujoco.csv", *EPISODES),
    ars_generic=lambda: record("ars_generic.csv", *EPISODES),
    ars_bipedalwalker_screens=lambda: record("ars_bipedalwalker.csv"),
    es_openai_anchors=lambda: record("es_openai_mujoco.csv"),
    throughput_ars=lambda: ["\n\n".join(throughput("ars.py", e) for e in WALK_AND_RUN)],
    throughput_es_openai=lambda: [throughput("es_openai.py", "HalfCheetah-v5")],
)


WALK_AND_RUN = ("HalfCheetah-v5", "BipedalWalker-v3")  # ars.py's two throughput tasks


def relink(body: str, page: str) -> str:
    """The tables link docs/ pages as seen from docs/ ('results/x.csv'), or from the top
    ('docs/results/x.csv'); the links as seen from `page`."""
    body = re.sub(r"\]\((?!docs/|https?:)", "](docs/", body)  # every link from the top
    folder = os.path.dirname(page) or "."
    return re.sub(r"\]\((docs/[^)#]*)", lambda m: f"]({os.path.relpath(m.group(1), folder)}", body)


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
    p.add_argument("--curves", metavar="CSV", help="print the curves/ folders of its rows instead")
    a = p.parse_args()
    if a.curves:  # (of the newest row of each seed of each setting, as the record tables count)
        if not os.path.isfile(os.path.join(ROOT, "docs", "results", a.curves)):
            p.exit(2, f"tables.py: error: no docs/results/{a.curves}\n")
        rows = groups(read(a.curves), "env", "variant", "flags").values()
        return print("\n".join(filter(None, (curve(r) for g in rows for r in g))))
    stale = []
    for page in PAGES:
        with open(os.path.join(ROOT, page)) as f:
            text = f.read()
        new, changed = render(text, page)
        stale += [f"{page}: {name}" for name in changed]
        if changed and not a.check:
            with open(os.path.join(ROOT, page), "w") as f:
                f.write(new)
    for line in stale:
        print(f"{line} {'differs from its rows' if a.check else 'rewritten'}")
    if a.check and stale:
        sys.exit(1)


if __name__ == "__main__":
    main()
