"""The Ray backend (--ray) of ars.py, es_openai.py and the exercise, on a two-node Ray cluster
started on this machine: the results equal the local backend's, and the tasks use both nodes
(test_ray_faults.py: what a run survives; test_ray_address.py: a missing or unreachable Ray)."""

import os
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
