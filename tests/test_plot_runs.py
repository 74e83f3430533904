"""docs/bench/plot_runs.py, the script behind the docs' multi-run figures: it draws what the run
directories hold, and refuses bad input in one line with nothing written."""
import os
import runpy
import subprocess
import sys

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "docs", "bench", "plot_runs.py")
RESULTS = os.path.join(ROOT, "docs", "bench", "results")


def plot(*argv):
    return subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True, cwd=ROOT)


def fake_run(folder, script, evals):
    """A run directory with a config.json and a progress.csv whose evaluations are `evals`."""
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write(f'{{"seed": 3, "env": "Pendulum-v1", "eval_episodes": 5, "script": "{script}"}}')
    with open(os.path.join(folder, "progress.csv"), "w") as f:
        f.write("iteration,env_steps,eval_return_mean\n")
        f.writelines(f"{i},{1000 * i},{e}\n" for i, e in enumerate(evals, 1))
    return str(folder)


def test_the_lines_are_the_runs_evaluations(tmp_path, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    a = fake_run(tmp_path / "a", "es_openai.py", [1.0, "nan", 3.0])
    b = fake_run(tmp_path / "b", "es_openai.py", [-2.0, -1.0, "nan"])
    seen = {}
    real_savefig = plt.Figure.savefig

    def keep(fig, *args, **kw):
        ax = fig.axes[0]
        seen["title"] = ax.get_title()
        seen["lines"] = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.get_lines()}
        return real_savefig(fig, *args, **kw)

    monkeypatch.setattr(sys, "argv", [SCRIPT, "--out", str(tmp_path / "f.png"), a, b, "--labels", "first", "second"])
    monkeypatch.setattr(plt.Figure, "savefig", keep)
    runpy.run_path(SCRIPT, run_name="__main__")
    assert seen["title"] == "Pendulum-v1: es_openai.py"
    assert seen["lines"] == {"seed 3, first": ([0.001, 0.003], [1.0, 3.0]),
                             "seed 3, second": ([0.001, 0.002], [-2.0, -1.0])}
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "f.png"]


def test_a_long_legend_goes_beside_the_axes(tmp_path, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    seen = {}
    real_savefig = plt.Figure.savefig

    def keep(fig, *args, **kw):
        fig.canvas.draw()
        ax = fig.axes[0]
        legend, axes = ax.get_legend().get_window_extent(), ax.get_window_extent()
        seen["beside"] = bool(legend.x0 >= axes.x1)  # wholly right of the axes: it hides no line
        seen["labels"] = [t.get_text() for t in ax.get_legend().get_texts()]
        return real_savefig(fig, *args, **kw)

    monkeypatch.setattr(plt.Figure, "savefig", keep)
    for n, beside in ((3, False), (11, True)):
        runs = [fake_run(tmp_path / f"{n}_{i}", "ars.py", [float(i), float(i + 1)]) for i in range(n)]
        labels = [f"run {i}" for i in range(n)]
        monkeypatch.setattr(sys, "argv", [SCRIPT, "--out", str(tmp_path / f"{n}.png"), *runs, "--labels", *labels])
        runpy.run_path(SCRIPT, run_name="__main__")
        assert seen["beside"] is beside, n
        assert seen["labels"] == [f"seed 3, run {i}" for i in range(n)]


def test_the_kept_runs_of_both_scripts_plot(tmp_path):
    for run in ("Hopper-v5__es_openai__4__preset", "BipedalWalker-v3__ars__8"):
        out = plot("--out", str(tmp_path / f"{run}.png"), os.path.join(RESULTS, run), "--threshold", "300")
        assert out.returncode == 0 and os.path.getsize(tmp_path / f"{run}.png") > 0, out.stderr


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    good = fake_run(tmp_path / "run", "ars.py", [1.0])
    out_png = str(tmp_path / "f.png")
    cases = [
        ([str(tmp_path / "missing")], "is not a run directory"),
        ([str(tmp_path)], "is not a run directory"),  # a folder without config.json
        ([good, "--labels", "a", "b"], "--labels names 2 runs, but 1 are given"),
    ]
    for argv, message in cases:
        out = plot("--out", out_png, *argv)
        assert out.returncode == 2 and message in out.stderr, (argv, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
        assert not os.path.exists(out_png)
    out = plot("--out", str(tmp_path / "no" / "f.png"), good)
    assert out.returncode == 2 and "cannot write" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["run"]
