"""docs/bench/results_csv.py: a row reports the first evaluation (or confirmation) at the target;
docs/results/ holds the runs the docs cite."""
import json
import os
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "docs", "bench"))
import results_csv  # noqa: E402


def test_the_published_tables_have_their_runs():
    import csv
    counts = {name: len(list(csv.DictReader(open(os.path.join(ROOT, "docs", "results", name)))))
              for name in ("ars_bipedalwalker.csv", "ars_mujoco.csv", "es_openai_mujoco.csv")}
    assert counts == {"ars_bipedalwalker.csv": 31, "ars_mujoco.csv": 163, "es_openai_mujoco.csv": 49}
    out = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "bench", "results_csv.py"), "--results",
                          os.path.join(ROOT, "no", "such", "folder")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.startswith("results_csv.py: error: no run directories")


def write_run(folder, cfg: dict, rows: list):
    os.makedirs(folder)
    json.dump(cfg, open(os.path.join(folder, "config.json"), "w"))
    with open(os.path.join(folder, "progress.csv"), "w") as f:
        f.write("iteration,episodes,env_steps,wall_time_s,eval_return_mean,confirm_return_mean\n")
        f.writelines(",".join(map(str, r)) + "\n" for r in rows)


def test_a_row_reports_the_first_evaluation_or_confirmation_at_the_target(tmp_path):
    rows = [(10, 640, 1000, 5.0, 250.0, "nan"), (20, 1280, 2000, 9.0, 310.0, 290.0),
            (30, 1920, 3000, 14.0, 305.0, 301.5), (40, 2560, 4000, 20.0, 320.0, "nan")]
    cfg = {"env": "BipedalWalker-v3", "seed": 3, "target_return": 300.0, "nu": 0.05, "alpha": 0.02,
           "run_dir": "runs/BipedalWalker-v3__ars__3__20261125-002328", "versions": {"git_commit": "abcdef0123"}}
    write_run(tmp_path / "BipedalWalker-v3__ars__3__probe", cfg, rows)
    screen = results_csv.row(str(tmp_path / "BipedalWalker-v3__ars__3__probe"))
    assert (screen["reached_iteration"], screen["reached_env_steps"]) == ("20", "2000")  # no confirmation asked
    assert screen["flags"] == "--nu 0.05" and screen["variant"] == "probe" and screen["commit"] == "abcdef0"
    assert (screen["best_eval"], screen["best_eval_iteration"], screen["env_steps"]) == (320.0, "40", "4000")
    assert screen["started"] == "2026-11-25 00:23"
    write_run(tmp_path / "BipedalWalker-v3__ars__4", {**cfg, "confirm_episodes": 100}, rows)
    solved = results_csv.row(str(tmp_path / "BipedalWalker-v3__ars__4"))
    assert (solved["reached_iteration"], solved["confirm_return"]) == ("30", "301.5")  # the first confirmation >= 300
