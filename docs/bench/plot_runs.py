"""Evaluation curves of several runs (one line per seed) in one figure for the docs.

    python docs/bench/plot_runs.py --out docs/img/ars_bipedalwalker.png runs/bench/BipedalWalker-v3__ars__*

Runs given after --dashed (another configuration, e.g. a previous preset) are drawn dashed, in
the same color for the same seed, and every line is labelled with its N and b, or with --names
(the solid runs' name, then the dashed runs'):

    python docs/bench/plot_runs.py --out docs/img/ars_bipedalwalker_nu_switch.png --threshold 300 \
        docs/bench/results/*__nu_switch --dashed docs/bench/results/BipedalWalker-v3__ars__{8,9,10,11} \
        --names "nu 0.05, then 0.03" "preset"

--labels names each solid run instead (one label per run, in order, each in a color of its own),
for runs of one seed, or of es_openai.py:

    python docs/bench/plot_runs.py --out docs/img/es_openai_hopper_seed4.png --threshold 3403.46 \
        docs/bench/results/Hopper-v5__es_openai__4__* --labels "preset" "sigma 0.02, alpha 0.01" \
        "from 240: alpha 0.003" "from 240: sigma 0.01, alpha 0.005"
"""
import argparse
import csv
import json
import os


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not the whole usage block
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


COLORS = [f"C{i}" for i in range(10)] + ["black", "magenta", "teal", "navy"]  # one color per seed, 0-13


def load(run: str, p) -> tuple:
    """A run directory's config.json and its evaluations: (config, env steps in millions, returns)."""
    try:
        with open(os.path.join(run, "config.json")) as f:
            cfg = json.load(f)
        with open(os.path.join(run, "progress.csv"), newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["eval_return_mean"] not in ("", "nan")]
        missing = {"seed", "env", "eval_episodes"} - set(cfg)
        if missing:
            raise KeyError(f"config.json lacks {sorted(missing)}")
        return cfg, [float(r["env_steps"]) / 1e6 for r in rows], [float(r["eval_return_mean"]) for r in rows]
    except (OSError, ValueError, KeyError, TypeError) as e:
        p.error(f"'{run}' is not a run directory of ars.py or es_openai.py ({type(e).__name__}: {e})")


def main():
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--threshold", type=float, help="draw the solved threshold")
    p.add_argument("--dashed", nargs="+", default=[], help="runs drawn dashed (another configuration)")
    p.add_argument("--names", nargs=2, metavar=("SOLID", "DASHED"), help="name the two configurations")
    p.add_argument("--labels", nargs="+", help="one label per solid run, in order (a color for each)")
    p.add_argument("runs", nargs="+")
    a = p.parse_args()
    if a.labels and len(a.labels) != len(a.runs):
        p.error(f"--labels names {len(a.labels)} runs, but {len(a.runs)} are given")
    runs = [(load(run, p), "-") for run in a.runs] + [(load(run, p), "--") for run in a.dashed]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, ((cfg, steps, evals), style) in enumerate(runs):
        label, color = f"seed {cfg['seed']}", COLORS[cfg["seed"] % len(COLORS)]
        if a.dashed and "n_directions" in cfg:  # ars.py's runs: which N and b
            label += f", N={cfg['n_directions']}, b={cfg['top_b']}"
        if a.names:
            label = f"seed {cfg['seed']}, {a.names[style == '--']}"
        if a.labels and style == "-":
            label, color = f"seed {cfg['seed']}, {a.labels[i]}", COLORS[i % len(COLORS)]
        ax.plot(steps, evals, style, label=label, color=color)
    if a.threshold is not None:
        ax.axhline(a.threshold, color="gray", linestyle=":", label=f"threshold {a.threshold:g}")
    ax.set_xlabel("training environment steps (millions)")
    ax.set_ylabel(f"evaluation return ({cfg['eval_episodes']} episodes)")
    what = (f" (solid: {a.names[0]}; dashed: {a.names[1]})" if a.names else " (dashed: another configuration)"
            if a.dashed else "" if a.labels else " with its preset")
    ax.set_title(f"{cfg['env']}: {cfg.get('script', 'ars.py')}{what}")
    ax.grid(alpha=0.3)
    if len(runs) > 10:  # a long legend goes beside the axes, where it hides no line
        fig.set_size_inches(8.5, 4)
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")
    else:
        ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    partial = a.out + ".partial.png"  # a figure that cannot be written leaves nothing behind
    try:
        fig.savefig(partial, dpi=90)
        os.replace(partial, a.out)
    except OSError as e:
        if os.path.exists(partial):
            os.remove(partial)
        p.exit(2, f"plot_runs.py: error: cannot write '{a.out}': {e.strerror}\n")


if __name__ == "__main__":
    main()
