"""The benchmark scripts of docs/bench/ refuse bad input as the training scripts do: one line on
stderr naming the script (es_openai_memory.py: es_openai.py's own), exit status 2, nothing on
stdout and nothing run."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import ROOT

BENCH = os.path.join(ROOT, "docs", "bench")
CASES = [
    ("throughput.py", ["ars.py", "--repeats", "0"], "--repeats must be at least 1"),
    ("throughput.py", ["es_openai.py", "--env", "NoSuch-v0"], "`NoSuch` doesn't exist"),
    ("results_csv.py", ["--append", "no/such/run"], "'no/such/run' holds no progress.csv"),
    ("tables.py", ["--curves", "no_such.csv"], "no docs/results/no_such.csv"),
    ("es_openai_memory.py", ["--bogus"], "es_openai.py: error: unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize(
    "script, argv, says", CASES, ids=[f"{c[0]} {' '.join(c[1])}" for c in CASES]
)
def test_bad_input_is_one_line(script, argv, says, tmp_path):
    out = subprocess.run(
        [sys.executable, os.path.join(BENCH, script), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "error:" in lines[0], out.stderr
    assert says in lines[0] and out.stdout == "" and os.listdir(tmp_path) == []


def test_es_openai_memory_help_prints_and_runs_nothing(tmp_path):
    t0 = time.time()
    out = subprocess.run(
        [sys.executable, os.path.join(BENCH, "es_openai_memory.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert (
        out.returncode == 0
        and "Every option goes to es_openai.py" in out.stdout
        and out.stderr == ""
    )
    assert time.time() - t0 < 10  # no es_openai.py run, no 1 GB table


def test_plot_runs_draws_a_setting_as_its_seeds_mean_and_range(tmp_path, capsys):
    """Three seeds of one setting and one run of another: two curves; the first is the mean of its
    seeds' return_mean, interpolated at every step any of them logged, a run's last value held."""
    sys.path.insert(0, BENCH)
    try:
        import plot_runs
    finally:
        sys.path.pop(0)
    import es_basic

    def run(*argv):
        out = tmp_path / "runs" / "_".join(argv)  # a folder each: runs are named by the second
        es_basic.main(["--iterations", "3", "--out-dir", str(out), *argv])
        (run_dir,) = out.iterdir()
        return run_dir

    dirs = [run("--seed", seed) for seed in ("0", "1", "2")]
    other = run("--sigma", "0.05")
    runs = [plot_runs.read_run(str(d), "return_mean") for d in [*dirs, other]]
    (setting, seeds, steps, mean, low, high), second = plot_runs.curves(runs)
    assert seeds == 3 and second[1] == 1 and second[0]["sigma"] == 0.05 != setting["sigma"]
    own = [plot_runs.read_run(str(d), "return_mean")[1:] for d in dirs]
    assert steps[-1] == max(s[-1] for s, _ in own)
    at = [np.interp(steps, s, v) for s, v in own]
    np.testing.assert_allclose(mean, np.mean(at, 0))
    np.testing.assert_allclose(low, np.min(at, 0))
    assert (high >= mean).all() and (high > low).any()
    assert plot_runs.label(second[0], [setting, second[0]]) == "es_basic.py --sigma 0.05"
    png = tmp_path / "runs.png"
    plot_runs.main([*map(str, [*dirs, other]), "-o", str(png)])
    assert png.read_bytes()[:4] == b"\x89PNG" and "2 curves from 4 runs" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:  # a folder that is not there: one line, nothing written
        plot_runs.main([str(other), "-o", str(tmp_path / "no" / "such.png")])
    assert stop.value.code == 2 and "cannot write" in capsys.readouterr().err
    out = subprocess.run(
        [sys.executable, os.path.join(BENCH, "plot_runs.py"), str(dirs[0]), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and out.stderr.startswith("plot_runs.py: error: cannot read the run")
