"""One CSV row per benchmark run: what ran (script, env, seed, the flags that differ from the
preset, processor, start, commit) and what it reached (its target: the first evaluation at it, or
with --confirm-episodes the first confirmation; the best evaluation; the --play return; the totals).
The run's learning curve goes to docs/results/curves/<run>/ (config.json and four columns of
progress.csv), which docs/bench/plot_runs.py draws.

    python docs/bench/results_csv.py --append RUN_DIR ... [--variant V]  # rows to docs/results/

A run directory is `<env>__<script>__<seed>[__<variant>][__<start>]` with its config.json,
progress.csv and, if the benchmark played the final policy, play.txt (`--play`'s output). The rows
go to docs/results/<script>_<family>.csv: es_basic.py's solves; for the others BipedalWalker-v3
apart, the MuJoCo tasks together. The benchmark scripts also import `machine` and `append`
from here.
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
sys.path.insert(0, ROOT)
NOT_FLAGS = {
    "env",
    "seed",
    "iterations",
    "out_dir",
    "workers",
    "save_every",
    "target_return",
    "resume",
    "play",
    "episodes",
    "video",
    "video_every",
    "ray",
    "ray_address",
    "lockstep",
    "evaluate_snapshots",
}
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


def append(
    name: str, rows: list, columns: list, out: str = os.path.join(ROOT, "docs", "results")
) -> str:
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


def norm(
    value,
) -> str:  # (64, 64) or [64, 64] -> '64,64', as config.json's lists are compared below
    return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


def row(run_dir: str, variant: str = None) -> dict:
    """The CSV row of one run directory."""
    env, script, seed, *rest = os.path.basename(os.path.normpath(run_dir)).split("__")
    stamp = rest.pop() if rest and re.fullmatch(r"\d{8}-\d{6}", rest[-1]) else ""
    variant = rest if variant is None else [variant]
    cfg = json.loads(Path(run_dir, "config.json").read_text())
    with open(os.path.join(run_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    generic, presets = (
        (module := importlib.import_module(script)).GENERIC,
        module.PRESETS,
    )  # today's preset
    defaults = {
        k: v for k, v in vars(module.build_parser().parse_args([])).items() if v is not None
    }
    preset = {**defaults, **generic, **presets.get(env, {})}
    flags = [
        (f"--{k}" if cfg[k] else f"--no-{k}").replace("_", "-")
        if isinstance(cfg[k], bool)
        else f"--{k.replace('_', '-')} {cfg[k]}"
        for k in sorted(preset)
        if k not in NOT_FLAGS
        and k in cfg
        and cfg[k] is not None
        and str(cfg[k]).replace(" ", "").strip("[]") != norm(preset[k])
    ]
    versions = cfg.get("versions") or cfg  # the runs before 2026-11-27 kept these in "versions"
    simd = versions.get("simd") or (["avx512f"] if cfg.get("avx512") else [])
    target = cfg.get("target_return")
    evals = [
        (r, number(r["eval_return_mean"]))
        for r in rows
        if not math.isnan(number(r["eval_return_mean"]))
    ]
    if cfg.get("confirm_episodes"):  # solved once K fresh episodes confirm the evaluation (ars.py)
        reached = next(
            (
                r
                for r in rows
                if target is not None and number(r.get("confirm_return_mean", "")) >= target
            ),
            None,
        )
    else:
        reached = next((r for r, e in evals if target is not None and e >= target), None)
    best = max(evals, key=lambda x: x[1]) if evals else None
    stamp = stamp or str(cfg.get("run_dir", "")).rsplit("__", 1)[-1]  # YYYYmmdd-HHMMSS
    played = os.path.join(run_dir, "play.txt")
    play = (
        re.search(r"mean return (\S+) \+- (\S+) over (\d+) episodes", Path(played).read_text())
        if os.path.exists(played)
        else None
    )
    last = rows[-1]
    return dict(
        script=f"{script}.py",
        env=env,
        seed=int(seed),
        variant="__".join(variant),
        flags=" ".join(flags),
        processor=versions.get("processor", ""),
        simd=" ".join(simd),
        cores=versions.get("cores", ""),  # recorded in config.json since 2026-11-27
        started=f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}"
        if len(stamp) == 15
        else "",
        commit=(versions.get("git_commit") or cfg.get("git_commit") or "")[:7],
        target="" if target is None else target,
        reached_iteration=reached["iteration"] if reached else "",
        reached_episodes=reached["episodes"] if reached else "",
        reached_env_steps=reached["env_steps"] if reached else "",
        reached_wall_time_s=reached["wall_time_s"] if reached else "",
        confirm_return=reached.get("confirm_return_mean", "")
        if reached and reached.get("confirm_return_mean", "nan") != "nan"
        else "",
        play_return=play.group(1) if play else "",
        play_std=play.group(2) if play else "",
        play_episodes=play.group(3) if play else "",
        best_eval=round(best[1], 2) if best else "",
        best_eval_iteration=best[0]["iteration"] if best else "",
        iterations=last["iteration"],
        episodes=last["episodes"],
        env_steps=last["env_steps"],
        wall_time_s=last["wall_time_s"],
    )


def appended(run_dir: str, variant: str = None) -> dict:
    """The row of a run that just ended here: processor and SIMD of this machine, and its cores
    and commit if the run's config.json does not have them (es_basic.py's never has)."""
    here = machine()
    r = row(run_dir, variant)
    r.update(processor=here["processor"], simd=here["simd"])
    for key in ("cores", "commit"):
        if r[key] == "":
            r[key] = here[key]
    return r


def family(r: dict) -> str:
    """The CSV of a row: es_basic.py's solves; BipedalWalker-v3; the MuJoCo v5 tasks; the rest
    (ars.py's generic defaults)."""
    if r["script"] == "es_basic.py":
        kind = "solves"
    elif r["env"].startswith("BipedalWalker"):
        kind = "bipedalwalker"
    elif r["env"].endswith("-v5"):
        kind = "mujoco"
    else:
        kind = "generic"
    return f"{r['script'][:-3]}_{kind}.csv"


CURVE = ("iteration", "episodes", "env_steps", "return_mean", "eval_return_mean")


def keep_curve(run_dir: str, out: str = os.path.join(ROOT, "docs", "results")) -> str:
    """docs/results/curves/<run>/: the run's config.json and its learning curve, returns rounded."""
    folder = os.path.join(out, "curves", os.path.basename(os.path.normpath(run_dir)))
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
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "results"), help=argparse.SUPPRESS)
    a = p.parse_args()
    for run_dir in a.append:  # every row made before any is written
        log = os.path.join(run_dir, "progress.csv")
        if not os.path.isfile(log) or len(Path(log).read_text().splitlines()) < 2:
            p.error(f"'{run_dir}' holds no progress.csv with a row")
    for run_dir, r in [(run_dir, appended(run_dir, a.variant)) for run_dir in a.append]:
        print(f"{append(family(r), [r], COLUMNS, a.out)}: {r['env']} seed {r['seed']}")
        print(f"{keep_curve(run_dir, a.out)}: its learning curve")


if __name__ == "__main__":
    main()
