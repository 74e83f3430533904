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
    assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"{script}: error:"), (
        out.stderr
    )
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
        and "Everything after -- goes to es_openai.py" in out.stdout
        and out.stderr == ""
    )
    assert time.time() - t0 < 10  # no es_openai.py run, no 1 GB table
