"""The benchmark scripts of docs/bench/ refuse bad input as the training scripts do: one line on
stderr naming the script, exit status 2, nothing on stdout and nothing run."""
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT

BENCH = os.path.join(ROOT, "docs", "bench")
CASES = [
    ("ars_throughput.py", ["--repeats", "0"], "--repeats at least 1"),
    ("es_openai_throughput.py", ["--population", "3"], "--population must be even"),
    ("es_openai_throughput.py", ["--env", "NoSuch-v0"], "`NoSuch` doesn't exist"),
    ("es_basic_compare.py", ["--seeds", "0,x"], "--seeds must be comma-separated integers"),
    ("results_csv.py", ["--append", "no/such/run"], "'no/such/run' holds no progress.csv"),
    ("es_openai_memory.py", ["--bogus"], "give --script FILE or nothing before --"),
    ("es_openai_memory.py", ["--workers", "2"], "give --script FILE or nothing before --"),
]


@pytest.mark.parametrize("script, argv, says", CASES, ids=[f"{c[0]} {' '.join(c[1])}" for c in CASES])
def test_bad_input_is_one_line(script, argv, says, tmp_path):
    out = subprocess.run([sys.executable, os.path.join(BENCH, script), *argv], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"{script}: error:"), out.stderr
    assert says in lines[0] and out.stdout == "" and os.listdir(tmp_path) == []


def test_es_openai_memory_help_prints_and_runs_nothing(tmp_path):
    t0 = time.time()
    out = subprocess.run([sys.executable, os.path.join(BENCH, "es_openai_memory.py"), "--help"], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0 and "Everything after -- goes to es_openai.py" in out.stdout and out.stderr == ""
    assert time.time() - t0 < 10  # no es_openai.py run, no 1 GB table


def test_a_run_becomes_one_row_appended_under_its_header(tmp_path):
    sys.path.insert(0, BENCH)
    import es_basic
    import results_csv
    argv = ["--env", "CartPole-v1", "--iterations", "3", "--eval-every", "2", "--eval-episodes", "3", "--alpha", "0.2",
            "--target-return", "20", "--out-dir", str(tmp_path)]
    run_dir = es_basic.main(argv)["run_dir"]
    with open(os.path.join(run_dir, "play.txt"), "w") as f:
        f.write("CartPole-v1: mean return 41.5 +- 3.0 over 7 episodes (min 1.0, max 2.0), policy of iteration 3\n")
    with open(os.path.join(run_dir, "progress.csv")) as f:
        log = f.read().splitlines()
    r = results_csv.row(run_dir, "probe")
    evals = [(line.split(",")[0], float(line.split(",")[8])) for line in log[1:] if line.split(",")[8] != "nan"]
    first = next((it for it, e in evals if e >= 20), "")
    assert (r["script"], r["env"], r["seed"], r["variant"]) == ("es_basic.py", "CartPole-v1", 0, "probe")
    assert r["flags"] == "--alpha 0.2 --eval-episodes 3 --eval-every 2"  # not --iterations or --target-return
    assert str(r["reached_iteration"]) == first and r["best_eval"] == round(max(e for _, e in evals), 2)
    assert (r["play_return"], r["play_episodes"], r["iterations"]) == ("41.5", "7", log[-1].split(",")[0])
    assert r["started"] == f"{run_dir[-15:-11]}-{run_dir[-11:-9]}-{run_dir[-9:-7]} {run_dir[-6:-4]}:{run_dir[-4:-2]}"
    for _ in range(2):
        path = results_csv.append("rows.csv", [r], results_csv.COLUMNS, out=str(tmp_path))
    with open(path) as f:
        lines = f.read().splitlines()
    assert lines[0] == ",".join(results_csv.COLUMNS) and len(lines) == 3 and lines[1] == lines[2]
    with pytest.raises(SystemExit, match="its header is not"):  # another layout: nothing appended
        results_csv.append("rows.csv", [{k: r[k] for k in results_csv.COLUMNS[:-1]}], results_csv.COLUMNS[:-1],
                           out=str(tmp_path))
    assert open(path).read().splitlines() == lines
