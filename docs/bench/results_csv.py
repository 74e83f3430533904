"""One CSV row per kept benchmark run: what ran (script, env, seed, the flags that differ from the
preset, processor, start, commit) and what it reached (its target: the first evaluation at it, or
with --confirm-episodes the first confirmation; the best evaluation; the totals).

    git checkout 015dbc7 -- docs/bench/results       # the run directories behind docs/results/
    python docs/bench/results_csv.py                 # docs/bench/results/* -> docs/results/*.csv
    python docs/bench/results_csv.py --check         # exit 1 if docs/results/ is not what they give

A run directory is `<env>__<script>__<seed>[__<variant>]` with its config.json and progress.csv. The
rows go to docs/results/<script>_<family>.csv: BipedalWalker-v3 apart, the MuJoCo tasks together.
"""
import argparse
import csv
import glob
import io
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
import ars  # noqa: E402
import es_openai  # noqa: E402

PRESETS = {"ars": (ars.GENERIC, ars.PRESETS), "es_openai": (es_openai.GENERIC, es_openai.PRESETS)}
NOT_FLAGS = {"env", "seed", "iterations", "out_dir", "workers", "save_every", "target_return", "resume", "play",
             "episodes", "video", "video_every", "ray", "ray_address", "lockstep", "evaluate_snapshots"}
COLUMNS = ("script env seed variant flags processor simd started commit target reached_iteration "
           "reached_episodes reached_env_steps reached_wall_time_s confirm_return best_eval best_eval_iteration "
           "iterations episodes env_steps wall_time_s").split()


def number(text: str) -> float:
    return float(text) if text not in ("", "nan") else math.nan


def row(run_dir: str) -> dict:
    """The CSV row of one run directory."""
    env, script, seed, *variant = os.path.basename(os.path.normpath(run_dir)).split("__")
    cfg = json.load(open(os.path.join(run_dir, "config.json")))
    with open(os.path.join(run_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    generic, presets = PRESETS[script]
    preset = {**generic, **presets.get(env, {})}
    flags = [f"--{k.replace('_', '-')} {cfg[k]}" for k in sorted(preset) if k not in NOT_FLAGS and k in cfg
             and cfg[k] is not None and str(cfg[k]).replace(" ", "").strip("[]") != str(preset[k])]
    versions = cfg.get("versions", {})
    simd = versions.get("simd") or (["avx512f"] if cfg.get("avx512") else [])
    target = cfg.get("target_return")
    evals = [(r, number(r["eval_return_mean"])) for r in rows if not math.isnan(number(r["eval_return_mean"]))]
    if cfg.get("confirm_episodes"):  # solved once K fresh episodes confirm the evaluation (ars.py)
        reached = next((r for r in rows if target is not None and number(r.get("confirm_return_mean", ""))
                        >= target), None)
    else:
        reached = next((r for r, e in evals if target is not None and e >= target), None)
    best = max(evals, key=lambda x: x[1]) if evals else None
    stamp = str(cfg.get("run_dir", "")).rsplit("__", 1)[-1]  # YYYYmmdd-HHMMSS
    last = rows[-1]
    return dict(
        script=f"{script}.py", env=env, seed=int(seed), variant="__".join(variant), flags=" ".join(flags),
        processor=versions.get("processor", ""), simd=" ".join(simd),
        started=f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}" if len(stamp) == 15 else "",
        commit=(versions.get("git_commit") or cfg.get("git_commit") or "")[:7], target="" if target is None else target,
        reached_iteration=reached["iteration"] if reached else "", reached_episodes=reached["episodes"] if reached
        else "", reached_env_steps=reached["env_steps"] if reached else "",
        reached_wall_time_s=reached["wall_time_s"] if reached else "",
        confirm_return=reached.get("confirm_return_mean", "") if reached and reached.get(
            "confirm_return_mean", "nan") != "nan" else "",
        best_eval=round(best[1], 2) if best else "", best_eval_iteration=best[0]["iteration"] if best else "",
        iterations=last["iteration"], episodes=last["episodes"], env_steps=last["env_steps"],
        wall_time_s=last["wall_time_s"])


def tables(results: str) -> dict:
    """{file name: CSV text} for the run directories under `results`."""
    out = {}
    for run_dir in sorted(glob.glob(os.path.join(results, "*__*"))):
        r = row(run_dir)
        family = "bipedalwalker" if r["env"].startswith("BipedalWalker") else "mujoco"
        out.setdefault(f"{r['script'][:-3]}_{family}.csv", []).append(r)
    texts = {}
    for name, rows in out.items():
        text = io.StringIO()
        writer = csv.DictWriter(text, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(sorted(rows, key=lambda r: (r["env"], r["variant"], r["seed"])))
        texts[name] = text.getvalue()
    return texts


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.error = lambda message: p.exit(2, f"results_csv.py: error: {message}\n")
    p.add_argument("--results", default=os.path.join(ROOT, "docs", "bench", "results"))
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "results"))
    p.add_argument("--check", action="store_true", help="compare, write nothing")
    a = p.parse_args()
    if not glob.glob(os.path.join(a.results, "*__*")):
        p.error(f"no run directories in '{a.results}'")
    texts = tables(a.results)
    if a.check:
        stale = [n for n, t in texts.items() if not os.path.exists(os.path.join(a.out, n))
                 or open(os.path.join(a.out, n)).read() != t]
        print("\n".join(f"{n} differs from its run directories" for n in stale) or "docs/results/ is up to date")
        sys.exit(1 if stale else 0)
    os.makedirs(a.out, exist_ok=True)
    for name, text in texts.items():
        with open(os.path.join(a.out, name), "w") as f:
            f.write(text)
        print(f"{os.path.join(a.out, name)}: {text.count(chr(10)) - 1} runs")


if __name__ == "__main__":
    main()
