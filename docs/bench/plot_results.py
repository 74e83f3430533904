"""The docs' result figures, drawn from docs/results/*.csv: for each seed, the environment steps a
run took to its target (a cross at the top for a run that never reached it).

    python docs/bench/plot_results.py        # writes docs/img/ars_bipedalwalker_avx512.png and
                                             # docs/img/es_openai_hopper_avx512.png
"""
import csv
import os

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIGURES = [  # (csv, env, [(variant, label)], paper's figure in env steps or None, title, png)
    ("ars_bipedalwalker.csv", "BipedalWalker-v3", [("avx512", "AMD EPYC with AVX-512"), ("", "earlier host")],
     None, "ars.py, BipedalWalker-v3 preset: env steps to solved (a 100-episode confirmation of 300)",
     "ars_bipedalwalker_avx512.png"),
    ("es_openai_mujoco.csv", "Hopper-v5", [("avx512", "preset, AMD EPYC with AVX-512"),
                                           ("default", "preset, AMD EPYC with AVX-512 (seed 0)"),
                                           ("sigma0.02", "preset's values, earlier processor")],
     31.6e6, "es_openai.py, Hopper-v5: env steps to TRPO's score (3403.46)", "es_openai_hopper_avx512.png"),
]


def draw(name: str, env: str, series: list, paper, title: str, png: str, folder: str) -> str:
    with open(os.path.join(ROOT, "docs", "results", name)) as f:
        rows = [r for r in csv.DictReader(f) if r["env"] == env]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    top = max(float(r["env_steps"]) for r in rows) / 1e6 * 1.05
    for k, (variant, label) in enumerate(series):
        mine = [r for r in rows if r["variant"] == variant]
        got = [(int(r["seed"]) + 0.15 * k, float(r["reached_env_steps"]) / 1e6) for r in mine if r["reached_env_steps"]]
        missed = [int(r["seed"]) + 0.15 * k for r in mine if not r["reached_env_steps"]]
        line = ax.plot(*zip(*got), "o", label=label)[0] if got else None
        if missed:
            ax.plot(missed, [top] * len(missed), "x", color=line.get_color() if line else None,
                    label=f"{label}: not reached")
    if paper:
        ax.axhline(paper / 1e6, color="gray", ls="--", lw=1, label="the paper")
    ax.set(xlabel="seed", ylabel="env steps (millions)", title=title)
    ax.title.set_fontsize(9)
    ax.set_ylim(0, top * 1.08)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = os.path.join(folder, png)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main():
    for spec in FIGURES:
        print(draw(*spec, folder=os.path.join(ROOT, "docs", "img")))


if __name__ == "__main__":
    main()
