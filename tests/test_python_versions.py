"""docs/bench/python_versions.sh: bad input is refused in one line before any virtualenv is made.
(A whole run installs the requirements and runs this suite once per Python: a benchmark, not a
test.)"""

import os
import subprocess

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "docs", "bench", "python_versions.sh")


def run(*args, cwd=None):
    return subprocess.run(
        ["bash", SCRIPT, *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def test_no_interpreter_given_prints_the_usage_in_one_line():
    r = run()
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "usage: bash docs/bench/python_versions.sh PYTHON [PYTHON ...]"
    ]


def test_a_missing_interpreter_is_refused_before_any_other_is_used(tmp_path):
    # The real interpreter comes first: the missing one must be caught before it is installed into.
    r = run("python3", str(tmp_path / "no-such-python"), cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"{tmp_path / 'no-such-python'}: no such interpreter"]


def test_a_relative_interpreter_path_means_the_callers_directory(tmp_path):
    """The script works from the repository's root; a path like ./python must still name the file
    the caller meant. A stand-in interpreter that gives its version and refuses to make a
    virtualenv shows which file was run, and ends the run before any install."""
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
