"""docs/bench/results_csv.py: docs/results/ holds what the kept run directories give, and a row
reports the first evaluation (or confirmation) at the target."""
import json
import os
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "docs", "bench"))
import results_csv  # noqa: E402


def test_docs_results_match_the_run_directories():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "bench", "results_csv.py"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


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
