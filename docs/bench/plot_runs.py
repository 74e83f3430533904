"""Learning curves of several runs in one figure, over environment steps. Runs of one setting (the
same options but the seed) draw one curve, the mean over their seeds with the range around it (a
run that ended sooner, at its target, keeps its last value); runs of different settings draw one
curve each, labelled by the options in which they differ; each environment has a panel of its own.

    python docs/bench/plot_runs.py runs/CartPole-v1__es_basic__* -o cartpole.png
    python docs/bench/plot_runs.py RUN_DIR... --column eval_return_mean --title "LunarLander-v3"
    python docs/bench/plot_runs.py docs/results/curves/BipedalWalker-v3__ars__*  # the results' runs
"""

import argparse
import csv
import json
import os
import sys

import numpy as np

# Options that do not change a run's numbers, or only where it stops: one setting across them.
NOT_SETTING = {"seed", "command", "out_dir", "workers", "ray", "ray_address", "resume", "play"}
NOT_SETTING |= {"video", "video_every", "save_every", "iterations", "target_return"}
NOT_SETTING |= {"python", "numpy", "gymnasium", "mujoco", "versions", "run_dir"}


def fail(message: str):  # a mistake on the command line: one line, exit status 2
    print(f"plot_runs.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def read_run(run_dir: str, column: str, by_name=False) -> tuple:
    """(its setting as a dict, env_steps, the column), the rows where the column has a value.
    by_name: the setting is the folder's name without the seed and start (docs/results/curves/:
    `<env>__<script>__<seed>[__<variant>][__<start>]`), not the options of its config.json."""
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            config = json.load(f)
        with open(os.path.join(run_dir, "progress.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        steps = np.array([float(row["env_steps"]) for row in rows])
        values = np.array([float(row[column] or "nan") for row in rows])
    except (OSError, ValueError, KeyError) as e:  # not a run directory, or not this column
        fail(f"cannot read the run {run_dir} ({type(e).__name__}: {e})")
    setting = {key: value for key, value in config.items() if key not in NOT_SETTING}
    if by_name:
        env, script, _, *variant = os.path.basename(os.path.normpath(run_dir)).split("__")
        variant = [v for v in variant if not (len(v) == 15 and v[8] == "-")]  # not a start
        setting = dict(env=env, script=f"{script}.py", variant="__".join(variant) or "default")
    ok = ~np.isnan(values)
    return setting, steps[ok], values[ok]


def curves(runs: list) -> list:
    """[(setting, seeds, steps, mean, low, high)]: one per setting, in the order first seen."""
    settings = []
    for setting, steps, values in runs:
        if setting not in [s for s, _ in settings]:
            settings.append((setting, []))
        next(group for s, group in settings if s == setting).append((steps, values))
    out = []
    for setting, group in settings:
        grid = np.unique(np.concatenate([steps for steps, _ in group]))
        values = np.array([np.interp(grid, steps, v) for steps, v in group])  # (seeds, steps)
        # np.interp holds a run's last value past its end: a run that reached its target stays there
        out.append((setting, len(group), grid, values.mean(0), values.min(0), values.max(0)))
    return out


def label(setting: dict, settings: list) -> str:  # the script and the options that differ
    same = [s for s in settings if s.get("env") == setting.get("env")]
    differ = [k for k in setting if len({json.dumps(s.get(k)) for s in same}) > 1]
    options = []
    for key in (k for k in differ if k != "script"):
        flag, value = "--" + key.replace("_", "-"), setting[key]
        if key == "variant":  # (by_name)
            options.append(value)
        elif isinstance(value, bool):
            options.append(flag if value else f"--no-{flag[2:]}")
        else:
            options.append(f"{flag} {value}")
    return " ".join([setting.get("script", "?"), *options])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories of any script")
    p.add_argument("-o", "--out", default="runs.png", help="the PNG to write (default runs.png)")
    p.add_argument("--column", default="return_mean", help="of progress.csv (default return_mean)")
    p.add_argument("--title", default="", help="the figure's title")
    p.add_argument("--by-name", action="store_true", help="settings by folder name, as in curves/")
    a = p.parse_args(argv)
    runs = [read_run(run_dir, a.column, a.by_name) for run_dir in a.runs]
    if not all(len(steps) for _, steps, _ in runs):
        fail(f"a run has no row with a {a.column}")

    from matplotlib.figure import Figure

    drawn = curves(runs)
    envs = list(dict.fromkeys(setting.get("env") for setting, *_ in drawn))  # a panel each
    fig = Figure((7, 1 + 3.5 * len(envs)))
    axes = fig.subplots(len(envs), squeeze=False)[:, 0]
    for setting, seeds, steps, mean, low, high in drawn:
        ax = axes[envs.index(setting.get("env"))]
        text = label(setting, [s for s, *_ in drawn]) + (f" ({seeds} seeds)" if seeds > 1 else "")
        (line,) = ax.plot(steps, mean, label=text)
        if seeds > 1:
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
    for env, ax in zip(envs, axes):
        ax.set(ylabel=a.column, title=" ".join(filter(None, [a.title, env])))
        ax.legend(loc="best", fontsize=8)
    axes[-1].set(xlabel="environment steps")
    fig.tight_layout()
    try:  # whole or not at all
        fig.savefig(a.out + ".tmp.png", dpi=90)
        os.replace(a.out + ".tmp.png", a.out)
    except OSError as e:
        fail(f"cannot write {a.out} ({e.strerror})")
    print(f"{a.out}: {len(drawn)} curves from {len(runs)} runs")


if __name__ == "__main__":
    main()
