"""docs/bench/python_versions.sh: bad input is refused in one line before any virtualenv is made
(a whole run, a virtualenv and this suite per Python, is a benchmark)."""

import os
import subprocess

import pytest
from conftest import ROOT

SCRIPT = os.path.join(ROOT, "docs", "bench", "python_versions.sh")


def run(*args, cwd=None):
    return subprocess.run(
        ["bash", SCRIPT, *args], capture_output=True, text=True, cwd=cwd, timeout=60
    )


@pytest.mark.parametrize(
    "args, says",
    [
        ([], "usage: bash docs/bench/python_versions.sh PYTHON [PYTHON ...]"),
        (["python3", "no-such-python"], "no-such-python: no such interpreter"),  # before python3
    ],
)
def test_bad_input_is_one_line(args, says, tmp_path):
    r = run(*args, cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr.strip().splitlines()) == (2, "", [says])


def test_a_relative_interpreter_path_means_the_callers_directory(tmp_path):
    """The script works from the repository's root; ./python must still name the caller's file. A
    stand-in that gives its version and refuses to make a virtualenv shows which file ran."""
    fake = tmp_path / "python"
    fake.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo "Python 0.0 (stand-in)"; exit 0; }\nexit 1\n'
    )
    fake.chmod(0o755)
    r = run("./python", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == [
        f"== Python 0.0 (stand-in) ({tmp_path}/./python)",
        "   venv failed",
    ]
