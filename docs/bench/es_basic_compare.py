"""Learning curves of es_basic.py: mirrored against plain sampling, centered ranks against raw
returns, 3 seeds each, on one environment; writes docs/img/es_basic_compare.png.

    python docs/bench/es_basic_compare.py --env CartPole-v1 --iterations 60

Each curve is the median over the seeds of the evaluation mean (10 episodes every 5 iterations),
with the range of the seeds shaded, against training episodes.
"""
import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
import es_basic as es  # noqa: E402
import numpy as np  # noqa: E402

VARIANTS = {"mirrored, ranks": [], "plain, ranks": ["--no-mirror"], "mirrored, raw returns": ["--fitness", "none"],
            "plain, raw returns": ["--no-mirror", "--fitness", "none"]}


def curve(env_id: str, flags: list, seed: int, iterations: int, out: str) -> np.ndarray:
    argv = ["--env", env_id, "--seed", str(seed), "--iterations", str(iterations), "--eval-every", "5",
            "--eval-episodes", "10", "--target-return", "inf", "--out-dir", os.path.join(out, *flags, str(seed)),
            *flags]  # a folder each: runs of one env and seed started in one second
    devnull, sys.stdout = sys.stdout, open(os.devnull, "w")
    try:
        result = es.train(es.configure(es.build_parser().parse_args(argv)))
    finally:
        sys.stdout.close()
        sys.stdout = devnull
    log = np.genfromtxt(os.path.join(result["run_dir"], "progress.csv"), delimiter=",", names=True)
    evaluated = ~np.isnan(log["eval_return_mean"])
    return np.stack([log["episodes"][evaluated], log["eval_return_mean"][evaluated]], axis=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.error = lambda message: p.exit(2, f"es_basic_compare.py: error: {message}\n")  # one line, no usage block
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--iterations", type=int, default=60)
    p.add_argument("--seeds", type=int, default=3)
    a = p.parse_args()
    if a.iterations < 5 or a.seeds < 1:
        p.error("--iterations must be at least 5 (one evaluation every 5) and --seeds at least 1")
    es.configure(es.build_parser().parse_args(["--env", a.env]))  # an unusable id: one line, exit 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    print(f"| variant | final evaluation mean, median of {a.seeds} seeds | min | max |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as out:
        for name, flags in VARIANTS.items():
            curves = [curve(a.env, flags, s, a.iterations, out) for s in range(a.seeds)]
            episodes, ev = curves[0][:, 0], np.stack([c[:, 1] for c in curves])
            ax.plot(episodes, np.median(ev, axis=0), label=name)
            ax.fill_between(episodes, ev.min(axis=0), ev.max(axis=0), alpha=0.15)
            final = ev[:, -1]
            print(f"| {name} | {np.median(final):.1f} | {final.min():.1f} | {final.max():.1f} |", flush=True)
    ax.set_xlabel("training episodes")
    ax.set_ylabel("evaluation return (10 episodes)")
    ax.set_title(f"es_basic.py on {a.env}: median and range of {a.seeds} seeds")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    os.makedirs(os.path.join(ROOT, "docs", "img"), exist_ok=True)
    fig.savefig(os.path.join(ROOT, "docs", "img", "es_basic_compare.png"), dpi=90)


if __name__ == "__main__":
    main()
