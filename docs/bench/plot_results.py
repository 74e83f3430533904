"""The docs' result figures, drawn from docs/results/*.csv: for each seed, the environment steps (or
episodes) a run took to its target (a cross at the top for a run that never reached it).

    python docs/bench/plot_results.py        # writes docs/img/ars_bipedalwalker_avx512.png,
                                             # es_openai_hopper_avx512.png and es_basic_compare.png
"""

import argparse
import csv
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIGURES = [  # (csv, env, [(variant, label)], paper's figure or None, title, png[, what is counted])
    (
        "ars_bipedalwalker.csv",
        "BipedalWalker-v3",
        [("avx512", "AMD EPYC with AVX-512"), ("", "earlier host")],
        None,
        "ars.py, BipedalWalker-v3 preset: env steps to solved (a 100-episode confirmation of 300)",
        "ars_bipedalwalker_avx512.png",
    ),
    (
        "es_openai_mujoco.csv",
        "Hopper-v5",
        [
            ("avx512", "preset, AMD EPYC with AVX-512"),
            ("default", "preset, AMD EPYC with AVX-512 (seed 0)"),
            ("sigma0.02", "preset's values, earlier processor"),
        ],
        31.6e6,
        "es_openai.py, Hopper-v5: env steps to TRPO's score (3403.46)",
        "es_openai_hopper_avx512.png",
    ),
    (
        "es_basic_solves.csv",
        "CartPole-v1",
        [
            ("", "mirrored, ranks (the default)"),
            ("plain", "plain, ranks"),
            ("raw", "mirrored, raw returns"),
            ("plain_raw", "plain, raw returns"),
        ],
        None,
        "es_basic.py, CartPole-v1 preset: episodes to 475 (100-episode evaluation)",
        "es_basic_compare.png",
        "episodes",
    ),
]


def draw(
    name: str, env: str, series: list, paper, title: str, png: str, what="env_steps", folder=""
) -> str:
    with open(os.path.join(ROOT, "docs", "results", name)) as f:
        rows = [r for r in csv.DictReader(f) if r["env"] == env]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    scale = 1e6 if what == "env_steps" else 1
    top = max(float(r[what]) for r in rows) / scale * 1.05
    for k, (variant, label) in enumerate(series):
        mine = [r for r in rows if r["variant"] == variant]
        got = [
            (int(r["seed"]) + 0.15 * k, float(r["reached_" + what]) / scale)
            for r in mine
            if r["reached_" + what]
        ]
        missed = [int(r["seed"]) + 0.15 * k for r in mine if not r["reached_" + what]]
        line = ax.plot(*zip(*got), "o", label=label)[0] if got else None
        if missed:
            ax.plot(
                missed,
                [top] * len(missed),
                "x",
                color=line.get_color() if line else None,
                label=f"{label}: not reached",
            )
    if paper:
        ax.axhline(paper / scale, color="gray", ls="--", lw=1, label="the paper")
    ax.set(
        xlabel="seed",
        ylabel="env steps (millions)" if scale > 1 else what.replace("_", " "),
        title=title,
    )
    ax.title.set_fontsize(9)
    ax.set_ylim(0, top * 1.08)
    ax.set_xticks(sorted({int(r["seed"]) for r in rows}))
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = os.path.join(folder, png)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main():
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    for spec in FIGURES:
        print(draw(*spec, folder=os.path.join(ROOT, "docs", "img")))


if __name__ == "__main__":
    main()
