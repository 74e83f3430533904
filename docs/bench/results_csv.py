"""One CSV row per benchmark run: what ran (script, env, seed, the flags that differ from the
preset, processor, start, commit) and what it reached (its target: the first evaluation at it, or
with --confirm-episodes the first confirmation; the best evaluation; the --play return; the totals).

    python docs/bench/results_csv.py --append RUN_DIR ... [--variant V]  # rows to docs/results/

A run directory is `<env>__<script>__<seed>[__<variant>][__<start>]` with its config.json,
progress.csv and, if the benchmark played the final policy, play.txt (`--play`'s output). The row
goes to docs/results/<script>_<family>.csv, the learning curve to docs/results/curves/<run>/
(config.json and four columns of progress.csv, which docs/bench/plot_runs.py draws).
"""

import argparse
import csv
import datetime
import importlib
import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "docs", "results")
sys.path.insert(0, ROOT)
# Options that are not part of a run's setting (where it runs, how long, what it films).
NOT_FLAGS = set("env seed iterations out_dir workers save_every target_return resume play".split())
NOT_FLAGS |= set("episodes video video_every ray ray_address lockstep evaluate_snapshots".split())
COLUMNS = (
    "script env seed variant flags processor simd cores started commit target reached_iteration "
    "reached_episodes reached_env_steps reached_wall_time_s confirm_return "
    "play_return play_std play_episodes best_eval best_eval_iteration iterations episodes "
    "env_steps wall_time_s"
).split()
THROUGHPUT = (
    "bench env run workers repetition value unit processor simd cores date commit".split()
)  # throughput.csv


def number(text: str) -> float:
    return float(text) if text not in ("", "nan") else math.nan


def machine() -> dict:
    """This machine's processor and SIMD, the cores this process may use, the time now (UTC) and
    the commit checked out."""
    cpu = Path("/proc/cpuinfo").read_text() if os.path.exists("/proc/cpuinfo") else ""
    name = re.search(r"model name\s*:\s*(.*)", cpu)
    flags = re.search(r"flags\s*:\s*(.*)", cpu)
    git = [
        subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        for args in (
            ["rev-parse", "--short=7", "HEAD"],
            ["status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs/results"],
        )
    ]
    return dict(
        processor=re.sub(r"\((R|TM)\)| Processor| CPU .*| \d+-Core.*", "", name.group(1)).strip()
        if name
        else "",
        simd=" ".join(f for f in ("avx2", "avx512f") if flags and f in flags.group(1).split()),
        cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        date=f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}",
        commit=git[0] + ("-dirty" if git[1] else ""),
    )  # dirty: files changed since that commit


def append(name: str, rows: list, columns: list, out: str = RESULTS) -> str:
    """Add rows to docs/results/<name>, with the header if the file is new; returns the path."""
    path = os.path.join(out, name)
    new = not os.path.exists(path)
    if not new:
        with open(path) as f:
            header = f.readline().strip()
        if header != ",".join(columns):
            raise SystemExit(f"{path}: its header is not {','.join(columns)}; nothing appended")
    with open(path, "a") as f:
        writer = csv.DictWriter(f, columns, lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerows(rows)
    return path


def norm(value) -> str:  # (64, 64) or [64, 64] -> '64,64', as config.json's lists are compared
    return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


def row(run_dir: str, variant: str = None) -> dict:
    """The CSV row of one run directory `<env>__<script>__<seed>[__<variant>][__<start>]`: its
    flags (those that differ from today's preset), where it reached its target, its best
    evaluation and totals; the machine's columns empty (appended() fills them)."""
    env, script, seed, *rest = os.path.basename(os.path.normpath(run_dir)).split("__")
    stamp = rest.pop() if rest and re.fullmatch(r"\d{8}-\d{6}", rest[-1]) else ""
    cfg = json.loads(Path(run_dir, "config.json").read_text())
    with open(os.path.join(run_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    module = importlib.import_module(script)
    preset = vars(module.build_parser().parse_args([]))
    preset = {k: v for k, v in preset.items() if v is not None} | module.GENERIC
    preset |= module.PRESETS.get(env, {})
    flags = [
        (f"--{k}" if cfg[k] else f"--no-{k}").replace("_", "-")
        if isinstance(cfg[k], bool)
        else f"--{k.replace('_', '-')} {cfg[k]}"
        for k in sorted(preset)
        if k not in NOT_FLAGS and cfg.get(k) is not None and norm(cfg[k]) != norm(preset[k])
    ]
    target = cfg.get("target_return")
    goal = math.inf if target is None else target
    evals = [(r, number(r["eval_return_mean"])) for r in rows]
    evals = [(r, e) for r, e in evals if not math.isnan(e)]
    if cfg.get("confirm_episodes"):  # solved once K fresh episodes confirm the evaluation (ars.py)
        at = [r for r in rows if number(r.get("confirm_return_mean", "")) >= goal]
    else:
        at = [r for r, e in evals if e >= goal]
    reached = at[0] if at else {}
    best = max(evals, key=lambda x: x[1]) if evals else ({}, "")
    played = Path(run_dir, "play.txt")
    play = played.exists() and re.search(
        r"mean return (\S+) \+- (\S+) over (\d+) episodes", played.read_text()
    )
    play = play.groups() if play else ("", "", "")  # the mean, its std, the episodes
    last = rows[-1]
    return dict(
        script=f"{script}.py",
        env=env,
        seed=int(seed),
        variant="__".join(rest) if variant is None else variant,
        flags=" ".join(flags),
        processor="",
        simd="",
        cores="",
        started=f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}"
        if stamp
        else "",
        commit="",
        target="" if target is None else target,
        **{f"reached_{k}": reached.get(k, "") for k in ("iteration", "episodes", "env_steps")},
        reached_wall_time_s=reached.get("wall_time_s", ""),
        confirm_return=reached.get("confirm_return_mean", "").replace("nan", ""),
        **dict(zip(("play_return", "play_std", "play_episodes"), play)),
        best_eval=round(best[1], 2) if evals else "",
        best_eval_iteration=best[0].get("iteration", ""),
        iterations=last["iteration"],
        **{k: last[k] for k in ("episodes", "env_steps", "wall_time_s")},
    )


def appended(run_dir: str, variant: str = None) -> dict:
    """The row of a run that just ended here, with this machine's processor, SIMD, cores and
    commit."""
    here = machine()
    return dict(
        row(run_dir, variant), **{k: here[k] for k in "processor simd cores commit".split()}
    )


def family(r: dict) -> str:
    """The CSV of a row: es_basic.py's solves; BipedalWalker-v3; the MuJoCo v5 tasks; the rest
    (ars.py's generic defaults)."""
    if r["script"] == "es_basic.py":
        return "es_basic_solves.csv"
    kind = "mujoco" if r["env"].endswith("-v5") else "generic"
    return f"{r['script'][:-3]}_{'bipedalwalker' if 'BipedalWalker' in r['env'] else kind}.csv"


CURVE = ("iteration", "episodes", "env_steps", "return_mean", "eval_return_mean")


def keep_curve(run_dir: str, out: str = RESULTS, variant: str = "") -> str:
    """docs/results/curves/<run>/: the run's config.json and its learning curve, returns rounded;
    <run> is the run directory's name, with the variant after the seed if it has none."""
    name = os.path.basename(os.path.normpath(run_dir)).split("__")
    if variant and variant not in name:
        name.insert(3, variant)
    folder = os.path.join(out, "curves", "__".join(name))
    os.makedirs(folder, exist_ok=True)
    Path(folder, "config.json").write_text(Path(run_dir, "config.json").read_text())
    with open(os.path.join(run_dir, "progress.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    text = io.StringIO()
    writer = csv.DictWriter(text, CURVE, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: r[k] if "return" not in k else f"{number(r[k]):.2f}" for k in CURVE})
    Path(folder, "progress.csv").write_text(text.getvalue())
    return folder


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.error = lambda message: p.exit(2, f"results_csv.py: error: {message}\n")
    p.add_argument("--append", nargs="+", metavar="RUN_DIR", required=True, help="the runs")
    p.add_argument("--variant", help="the rows' variant (default: from the folder name)")
    p.add_argument("--out", default=RESULTS, help=argparse.SUPPRESS)
    a = p.parse_args()
    for run_dir in a.append:  # every row made before any is written
        log = os.path.join(run_dir, "progress.csv")
        if not os.path.isfile(log) or len(Path(log).read_text().splitlines()) < 2:
            p.error(f"'{run_dir}' holds no progress.csv with a row")
    for run_dir, r in [(run_dir, appended(run_dir, a.variant)) for run_dir in a.append]:
        print(f"{append(family(r), [r], COLUMNS, a.out)}: {r['env']} seed {r['seed']}")
        print(f"{keep_curve(run_dir, a.out, r['variant'])}: its learning curve")


if __name__ == "__main__":
    main()
