"""docs/bench/results_csv.py: a row reports the first evaluation (or confirmation) at the target and
the --play return; rows are appended under their header only; docs/results/ holds the runs the
docs cite."""

import csv
import json
import os
import sys
from pathlib import Path

import pytest
from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "docs", "bench"))
import results_csv  # noqa: E402

RESULTS = os.path.join(ROOT, "docs", "results")


def test_the_published_tables_have_their_columns():
    """Every row of docs/results/ lines up under its file's header (append() refuses any other)."""
    own = ("memory.csv", "python_versions.csv", "nes_exercise.csv")  # headers of their own
    for name in sorted(f for f in os.listdir(RESULTS) if f.endswith(".csv")):
        with open(os.path.join(RESULTS, name)) as f:
            rows = list(csv.reader(f))
        header = results_csv.THROUGHPUT if name == "throughput.csv" else results_csv.COLUMNS
        assert rows[0] == (rows[0] if name in own else header), name
        assert len(rows) > 1 and all(len(r) == len(rows[0]) for r in rows), name


def write_run(folder, cfg: dict, rows: list) -> str:
    os.makedirs(folder)
    Path(folder, "config.json").write_text(json.dumps(cfg))
    with open(os.path.join(folder, "progress.csv"), "w") as f:
        f.write("iteration,episodes,env_steps,wall_time_s,eval_return_mean,confirm_return_mean\n")
        f.writelines(",".join(map(str, r)) + "\n" for r in rows)
    return str(folder)


def test_a_row_reports_the_first_evaluation_or_confirmation_at_the_target(tmp_path):
    rows = [
        (10, 640, 1000, 5.0, 250.0, "nan"),
        (20, 1280, 2000, 9.0, 310.0, 290.0),
        (30, 1920, 3000, 14.0, 305.0, 301.5),
        (40, 2560, 4000, 20.0, 320.0, "nan"),
    ]
    cfg = dict(env="BipedalWalker-v3", seed=3, target_return=300.0, nu=0.05, alpha=0.02)
    r = results_csv.row(
        write_run(tmp_path / "BipedalWalker-v3__ars__3__probe__20261125-002328", cfg, rows)
    )
    assert (r["reached_iteration"], r["reached_env_steps"]) == ("20", "2000")  # no confirmation
    assert (r["flags"], r["variant"]) == ("--nu 0.05", "probe")
    assert (r["best_eval"], r["best_eval_iteration"], r["env_steps"]) == (320.0, "40", "4000")
    assert r["started"] == "2026-11-25 00:23"
    cfg["confirm_episodes"] = 100
    r = results_csv.row(write_run(tmp_path / "BipedalWalker-v3__ars__4", cfg, rows))
    assert (r["reached_iteration"], r["confirm_return"]) == ("30", "301.5")  # the first >= 300


def test_a_run_becomes_one_row_appended_under_its_header(tmp_path):
    import es_basic

    argv = ["--env", "CartPole-v1", "--iterations", "3", "--eval-every", "2", "--eval-episodes"]
    argv += ["3", "--alpha", "0.2", "--target-return", "20", "--out-dir", str(tmp_path)]
    run_dir = es_basic.main(argv)["run_dir"]
    Path(run_dir, "play.txt").write_text(
        "CartPole-v1: mean return 41.5 +- 3.0 over 7 episodes (min 1.0, max 2.0), "
        "policy of iteration 3\n"
    )
    log = [line.split(",") for line in Path(run_dir, "progress.csv").read_text().splitlines()]
    evals = [(row[0], float(row[8])) for row in log[1:] if row[8] != "nan"]
    r = results_csv.row(run_dir, "probe")
    assert (r["script"], r["env"], r["seed"], r["variant"]) == (
        "es_basic.py",
        "CartPole-v1",
        0,
        "probe",
    )
    assert r["flags"] == "--alpha 0.2 --eval-episodes 3 --eval-every 2"  # not --iterations
    assert str(r["reached_iteration"]) == next((it for it, e in evals if e >= 20), "")
    assert r["best_eval"] == round(max(e for _, e in evals), 2)
    assert (r["play_return"], r["play_episodes"], r["iterations"]) == ("41.5", "7", log[-1][0])
    stamp = run_dir[-15:]  # YYYYmmdd-HHMMSS
    assert r["started"] == f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}"
    for _ in range(2):
        path = results_csv.append("rows.csv", [r], results_csv.COLUMNS, out=str(tmp_path))
    lines = Path(path).read_text().splitlines()
    assert lines[0] == ",".join(results_csv.COLUMNS) and len(lines) == 3 and lines[1] == lines[2]
    fewer = results_csv.COLUMNS[:-1]
    with pytest.raises(SystemExit, match="its header is not"):  # another layout: nothing appended
        results_csv.append("rows.csv", [{k: r[k] for k in fewer}], fewer, out=str(tmp_path))
    assert Path(path).read_text().splitlines() == lines
    curve = results_csv.keep_curve(run_dir, out=str(tmp_path / "docs"))  # what plot_runs draws
    kept = [line.split(",") for line in Path(curve, "progress.csv").read_text().splitlines()]
    assert kept[0] == ["iteration", "episodes", "env_steps", "return_mean", "eval_return_mean"]
    assert [row[2] for row in kept[1:]] == [row[2] for row in log[1:]]
    assert Path(curve, "config.json").read_text() == Path(run_dir, "config.json").read_text()
