"""docs/bench/seed_triples.py: the counts it reads from run directories, and its triples counted
by hand."""

import math
import os
import subprocess
import sys

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "docs", "bench", "seed_triples.py")
sys.path.insert(0, os.path.join(ROOT, "docs", "bench"))
import seed_triples  # noqa: E402


def fake_run(folder, seed, evals, target=100.0):
    """An ars.py run directory whose iteration i (1, 2, ...) has 10 i episodes and evaluation
    evals[i - 1]."""
    import ars

    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write(f'{{"seed": {seed}, "env": "Hopper-v5", "target_return": {target}}}')
    with open(os.path.join(folder, "progress.csv"), "w") as f:
        f.write(",".join(ars.COLUMNS) + "\n")
        for i, e in enumerate(evals, 1):
            row = ["0"] * len(ars.COLUMNS)
            row[0], row[1], row[ars.COLUMNS.index("eval_return_mean")] = str(i), str(10 * i), str(e)
            f.write(",".join(row) + "\n")
    return str(folder)


def test_the_count_is_the_first_evaluation_at_the_target(tmp_path):
    assert seed_triples.count_to_target(
        fake_run(tmp_path / "a", 4, ["nan", 99.9, 100.0, 50.0])
    ) == (4, 30)
    assert seed_triples.count_to_target(fake_run(tmp_path / "b", 5, [10.0, "nan", 99.0])) == (
        5,
        math.inf,
    )


def test_triples_counted_by_hand():
    # Seeds 10, 20, 40 and never against a paper's 20: the triples (10, 20, 40), (10, 20, inf),
    # (10, 40, inf), (20, 40, inf) have medians 20, 20, 40, 40 and averages 23.3, inf, inf, inf.
    assert seed_triples.triple_counts([10, 20, 40, math.inf], 20) == {
        "triples": 4,
        "median": 2,
        "average": 0,
        "single": 2,
    }
    assert seed_triples.triple_counts([10, 20, 40, math.inf], 25)["average"] == 1


def test_the_command_line_and_its_bad_input(tmp_path):
    runs = [fake_run(tmp_path / str(s), s, e) for s, e in ((0, [100]), (1, [0, 100]), (2, [0, 0]))]
    out = subprocess.run(
        [sys.executable, SCRIPT, "--paper", "15", *runs], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "0: 10, 1: 20, 2: not reached" in out.stdout
    assert "triples whose median is at or under it: 0 of 1" in out.stdout
    steps = subprocess.run(
        [sys.executable, SCRIPT, "--paper", "15", "--count", "env_steps", *runs],
        capture_output=True,
        text=True,
    )  # the fake runs log 0 env steps in every row
    assert steps.returncode == 0 and "0: 0, 1: 0, 2: not reached" in steps.stdout
    bad_config = tmp_path / "bad"
    os.makedirs(bad_config)
    (bad_config / "config.json").write_text("{not json")
    (bad_config / "progress.csv").write_text("iteration\n")
    inf_count = fake_run(
        tmp_path / "inf", 3, [100]
    )  # an episodes column that is not a finite number
    rows = (tmp_path / "inf" / "progress.csv").read_text().splitlines()
    (tmp_path / "inf" / "progress.csv").write_text(
        rows[0] + "\n" + rows[1].replace("1,10,", "1,inf,", 1) + "\n"
    )
    for argv in (
        ["--paper", "15", *runs[:2]],
        ["--paper", "15", *runs[:2], str(tmp_path / "nothing")],
        ["--paper", "-1", *runs],
        ["--paper", "15", *runs[:2], str(bad_config)],
        ["--paper", "15", *runs[:2], inf_count],
        [*runs],
        ["--paper", "x", *runs],
    ):
        bad = subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True)
        assert bad.returncode == 2, (argv, bad.stderr)
        assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
        assert bad.stdout == ""
    assert sorted(os.listdir(tmp_path)) == ["0", "1", "2", "bad", "inf"]  # nothing written


def test_the_counts_come_from_a_docs_results_csv(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(
        "script,env,seed,variant,reached_episodes,reached_env_steps\n"
        "ars.py,Hopper-v5,0,avx512,40,4000\nars.py,Hopper-v5,1,avx512,,\n"
        "ars.py,Hopper-v5,2,,10,1000\nars.py,Swimmer-v5,3,avx512,20,2000\n"
    )
    assert seed_triples.counts_from_csv(str(path), "Hopper-v5", "avx512") == [
        (0, 40),
        (1, math.inf),
    ]
    assert seed_triples.counts_from_csv(str(path), "Hopper-v5", "", "env_steps") == [(2, 1000)]
    out = subprocess.run(
        [sys.executable, SCRIPT, "--paper", "15", "--csv", str(path), "--env", "Hopper-v5"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "give at least 3 runs" in out.stderr
