"""The Ray backend (--ray) of ars.py, es_openai.py and the exercise, on a two-node Ray cluster
started on this machine: the results equal the local backend's, and the tasks use both nodes; a
missing or unreachable Ray is one line (test_ray_faults.py: what a run survives). Without Ray
installed only the missing-Ray cases run."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import nes_checker
import numpy as np
import pytest

import ars
import es_openai as eo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOLUTION = os.path.join(ROOT, "docs", "teacher", "nes_exercise_solution.py")
try:
    import ray
except ImportError:
    ray = None
NEEDS_RAY = pytest.mark.skipif(ray is None, reason="Ray is not installed (pip install ray)")
NEEDS_SOLUTION = pytest.mark.skipif(
    not os.path.exists(SOLUTION), reason="the teacher's copy is not in this checkout"
)
pytestmark = pytest.mark.skipif(  # Ray's multi-node test cluster (cluster_utils): Linux and macOS
    sys.platform == "win32", reason="Ray's test cluster does not run on Windows"
)


def parse(module, **kw):
    argv = []
    for key, value in kw.items():
        argv += [f"--{key.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return module.configure(module.build_parser().parse_args(argv))


ARS_TINY = dict(
    env="Pendulum-v1", iterations=4, n_directions=6, top_b=3, eval_every=2, eval_episodes=2, seed=3
)
ES_TINY = dict(
    env="Pendulum-v1", iterations=3, population=8, hidden="8", eval_every=1, eval_episodes=2
)
ES_TINY.update(noise_size=200_000, seed=5)


def node_of_a_second_task() -> str:
    time.sleep(1)  # long enough that the tasks submitted together run at once
    return ray.get_runtime_context().get_node_id()


def same_rows(local, remote):
    rows = [Path(r["run_dir"], "progress.csv").read_text().splitlines() for r in (local, remote)]
    assert [r.split(",")[4:10] for r in rows[0]] == [r.split(",")[4:10] for r in rows[1]]


@NEEDS_RAY
def test_ars_on_a_two_node_cluster_equals_the_local_run_and_uses_both_nodes(cluster, tmp_path):
    local = ars.train(parse(ars, **ARS_TINY, workers=2, out_dir=tmp_path / "local"))
    args = parse(ars, **ARS_TINY, ray=True, out_dir=tmp_path / "ray")
    assert args.workers == 4  # the cluster's CPUs
    remote = ars.train(args)
    assert remote["status"] == "done"
    np.testing.assert_array_equal(local["M"], remote["M"])
    np.testing.assert_array_equal(local["stats"][2], remote["stats"][2])
    same_rows(local, remote)
    pool = ars.make_pool(args)
    nodes = [pool.submit(node_of_a_second_task) for _ in range(4)]
    assert len({future.result() for future in nodes}) == 2


@NEEDS_RAY
def test_es_on_a_two_node_cluster_equals_the_local_run(cluster, tmp_path):
    local = eo.train(parse(eo, **ES_TINY, workers=2, out_dir=tmp_path / "local"))
    remote = eo.train(parse(eo, **ES_TINY, workers=3, ray=True, out_dir=tmp_path / "ray"))
    assert remote["status"] == "done"
    np.testing.assert_array_equal(local["theta"], remote["theta"])
    np.testing.assert_array_equal(local["ob_sum"], remote["ob_sum"])
    same_rows(local, remote)


@NEEDS_RAY
@NEEDS_SOLUTION
def test_the_exercise_gives_the_same_policy_on_ray_and_in_this_process(cluster):
    import nes_runner

    sys.path.insert(0, os.path.dirname(SOLUTION))
    try:
        import nes_exercise_solution as solution
    finally:
        sys.path.pop(0)
    kw = dict(env_name="CartPole-v1", iterations=3, n_pairs=4, sigma=0.1, alpha=0.05, seed=2)
    sys.modules["nes_exercise"]._envs.clear()  # as nes_runner.main does: no env goes to Ray
    remote = solution.train(executor=nes_runner.RayExecutor(), **kw, log=lambda *a: None)
    local = solution.train(executor=nes_checker.Recorder(), **kw, log=lambda *a: None)
    assert ray.is_initialized()  # the executor joined the running cluster and leaves it running
    for key in local:
        np.testing.assert_array_equal(local[key], remote[key])


@NEEDS_RAY
@NEEDS_SOLUTION
def test_the_teachers_solution_runs_on_ray_from_another_folder(cluster, tmp_path):
    """Its functions go to the Ray workers by value, and so do nes_exercise's they call: the
    workers need not find either file."""
    argv = [SOLUTION, "--ray-address", cluster.address, "--iterations", "2", "--pairs", "2"]
    out = subprocess.run(
        [sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and "mean policy:" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize(
    "script, argv, says",
    [
        ("ars.py", [], "pip install ray"),  # Ray hidden
        ("nes_exercise.py", [], "pip install ray"),  # the teacher's copy, which gets to Ray
        ("ars.py", ["--ray-address", "127.0.0.1:9"], "no Ray cluster answers at 127.0.0.1:9"),
        (  # a Ray client URL, with --workers too: refused before any file
            "es_openai.py",
            ["--ray-address", "ray://127.0.0.1:9", "--workers", "2"],
            "no Ray cluster answers at ray://127.0.0.1:9",
        ),
        ("nes_exercise.py", ["--ray-address", "127.0.0.1:9"], "no Ray cluster answers at"),
    ],
)
def test_a_missing_or_unreachable_ray_is_one_line_at_once(tmp_path, script, argv, says):
    env = None
    if not argv:  # Ray hidden
        (tmp_path / "hide").mkdir()
        (tmp_path / "hide" / "ray.py").write_text("raise ImportError('No module named ray')\n")
        env = dict(os.environ, PYTHONPATH=str(tmp_path / "hide"))
    elif ray is None:
        pytest.skip("Ray is not installed")
    if script == "nes_exercise.py":  # the student's file refuses to train before Ray
        if not os.path.exists(SOLUTION):
            pytest.skip("the teacher's copy is not in this checkout")
        argv = [SOLUTION, "--iterations", "1", *argv]
    else:
        argv = [os.path.join(ROOT, script), "--env", "Pendulum-v1", *argv]
        argv += ["--iterations", "1", "--out-dir", str(tmp_path / "runs")]
    t0 = time.time()
    out = subprocess.run(
        [sys.executable, *argv, "--ray"], capture_output=True, text=True, timeout=120, env=env
    )
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and says in lines[0], out.stderr
    assert time.time() - t0 < 60 and not (tmp_path / "runs").exists()


@NEEDS_RAY
@pytest.mark.parametrize("script", ["ars.py", "nes_exercise.py"])
def test_a_reachable_ray_client_url_passes_the_address_check(script, monkeypatch):
    """The check that refuses an unreachable address at once lets a Ray client URL through: its
    "ray://" is not part of the host name. Ray itself is not started: init is recorded."""
    if script == "nes_exercise.py":
        import nes_runner

        start = nes_runner.RayExecutor
    else:
        start = ars.start_ray
    server = socket.create_server(("127.0.0.1", 0))  # something that answers
    address = f"ray://127.0.0.1:{server.getsockname()[1]}"
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw["address"]))
    try:
        start(address)
    finally:
        server.close()
    assert calls == [address]
