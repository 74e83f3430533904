"""Tests of the Ray backend (--ray) of ars.py, es_openai.py and the exercise: on a two-node Ray
cluster started on this machine, the results equal the local backend's; a worker or a node lost in
the middle of a run is survived with the same results, or ends the run with a clear error and a
checkpoint; a missing Ray gives one clear line. Without Ray installed only that last test runs."""

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import left_in_session

import ars
import es_openai as eo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError:
    ray = None
NEEDS_RAY = pytest.mark.skipif(ray is None, reason="Ray is not installed (pip install ray)")
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
    env="Pendulum-v1",
    iterations=3,
    population=8,
    hidden="8",
    eval_every=1,
    eval_episodes=2,
    noise_size=200_000,
    seed=5,
)


@pytest.fixture(scope="module")
def cluster():
    """A head node and a second node, each with 2 CPUs, as `ray start --head` and `ray start
    --address` would make them on two machines."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    c.add_node(num_cpus=2)
    ray.init(address=c.address, log_to_driver=False, include_dashboard=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


# ---------------------------------------------------------------- ars.py


def crash_once(marker: str, fn, *args):
    """fn(*args) in a Ray worker that dies the first time any task calls it (marker: a file that
    says it did), as a crash would: Ray must run the task again."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return fn(*args)


def node_of_a_second_task() -> str:
    time.sleep(1)  # long enough that the tasks submitted together run at once
    return ray.get_runtime_context().get_node_id()


@NEEDS_RAY
def test_ars_on_a_two_node_cluster_equals_the_local_run(cluster, tmp_path):
    local = ars.train(parse(ars, **ARS_TINY, workers=2, out_dir=tmp_path / "local"))
    remote = ars.train(parse(ars, **ARS_TINY, ray=True, out_dir=tmp_path / "ray"))
    assert remote["status"] == "done"
    np.testing.assert_array_equal(local["M"], remote["M"])
    np.testing.assert_array_equal(local["stats"][2], remote["stats"][2])
    rows = [Path(r["run_dir"], "progress.csv").read_text().splitlines() for r in (local, remote)]
    assert [r.split(",")[4:10] for r in rows[0]] == [r.split(",")[4:10] for r in rows[1]]


@NEEDS_RAY
def test_ars_workers_default_to_the_cluster_cpus_and_tasks_spread_over_both_nodes(cluster):
    args = parse(ars, **ARS_TINY, ray=True)
    assert args.workers == 4
    pool = ars.make_pool(args)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    nodes = [pool.submit(node_of_a_second_task) for _ in range(4)]
    assert len({future.result() for future in nodes}) == 2


@NEEDS_RAY
def test_ars_survives_a_killed_worker_with_the_same_results(cluster, tmp_path):
    jobs = [("train", k) for k in range(12)]
    params = (7, np.full((1, 3), 0.1), np.zeros(3), np.ones(3), 0.05)
    args = parse(ars, env="Pendulum-v1", ray=True, workers=2)
    expected = [ars.job(args, params, kind, k) for kind, k in jobs]
    pool = ars.make_pool(args)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    marker = str(tmp_path / "crashed")
    futures = [pool.submit(crash_once, marker, ars.job, args, params, *j) for j in jobs]
    got = [future.result() for future in futures]
    assert os.path.exists(marker)  # a worker died, and its task ran again
    for k in range(12):
        for side in (0, 1):
            assert got[k][side][:3] == expected[k][side][:3]


def crash_in_iteration_3(args, params, kind, k, job=ars.job):  # its worker dies in iteration 3
    if params[0] == 2:
        os._exit(1)
    return job(args, params, kind, k)


@NEEDS_RAY
def test_ars_lost_worker_beyond_the_retries_stops_with_a_checkpoint(
    cluster, tmp_path, monkeypatch, capsys
):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.setattr(ars, "job", crash_in_iteration_3)
    argv = ["--env", "Pendulum-v1", "--iterations", "4", "--n-directions", "4", "--top-b", "2"]
    argv += ["--ray", "--workers", "2", "--out-dir", str(tmp_path), "--save-every", "1"]
    with pytest.raises(SystemExit) as stop:
        ars.main(argv)
    assert stop.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "stopped: a rollout failed" in lines[0], lines
    (run_dir,) = [os.path.join(tmp_path, d) for d in os.listdir(tmp_path)]
    with np.load(os.path.join(run_dir, "checkpoints", "latest.npz")) as ck:
        assert int(ck["iteration"]) == 2  # the last finished iteration: --resume goes on from there


# ---------------------------------------------------------------- es_openai.py


@NEEDS_RAY
def test_es_on_a_two_node_cluster_equals_the_local_run(cluster, tmp_path):
    local = eo.train(parse(eo, **ES_TINY, workers=2, out_dir=tmp_path / "local"))
    remote = eo.train(parse(eo, **ES_TINY, workers=3, ray=True, out_dir=tmp_path / "ray"))
    assert remote["status"] == "done"
    np.testing.assert_array_equal(local["theta"], remote["theta"])
    np.testing.assert_array_equal(local["ob_sum"], remote["ob_sum"])
    rows = [Path(r["run_dir"], "progress.csv").read_text().splitlines() for r in (local, remote)]
    assert [r.split(",")[4:10] for r in rows[0]] == [r.split(",")[4:10] for r in rows[1]]


def table_seen_by_a_task(table) -> tuple:  # what a Ray task receives for the table's reference
    return table[[0, 99_999]].tolist(), table.flags.writeable


@NEEDS_RAY
def test_es_noise_table_is_read_from_the_object_store_without_a_copy(cluster):
    args = parse(eo, **ES_TINY, workers=4, ray=True)
    _, table = eo.noise_table(args.noise_size, 123, shared=False)
    expected = table[[0, 99_999]].copy()
    pool = eo.make_pool(args)
    ref = pool.ray.put(table)
    workers = eo.Workers(args, pool, pool.ray.get(ref), ref, depth=2)  # as Run makes it
    assert not workers.table.flags.writeable  # the master reads the object store's copy too
    np.testing.assert_array_equal(workers.table[[0, 99_999]], expected)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    seen = workers.pool.submit(table_seen_by_a_task, workers.table_ref).result()
    assert seen == (expected.tolist(), False)  # read-only: a view of the node's store, not a copy


def crash_once_in(marker: str, work):  # es_openai.work, but its worker dies on its first message
    def crashing(*args):
        return crash_once(marker, work, *args)

    return crashing


@NEEDS_RAY
def test_es_survives_a_killed_worker_with_the_same_results(cluster, tmp_path, monkeypatch):
    expected = eo.train(parse(eo, **ES_TINY, workers=1, out_dir=tmp_path / "local"))
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    marker = str(tmp_path / "crashed")
    monkeypatch.setattr(eo, "work", crash_once_in(marker, eo.work))
    got = eo.train(parse(eo, **ES_TINY, workers=2, ray=True, out_dir=tmp_path / "ray"))
    assert os.path.exists(marker)  # a worker died, and its task ran again
    np.testing.assert_array_equal(expected["theta"], got["theta"])


# ---------------------------------------------------------------- the exercise


@NEEDS_RAY
@pytest.mark.skipif(
    not os.path.exists(os.path.join(ROOT, "docs", "teacher", "nes_exercise_solution.py")),
    reason="the teacher's copy is not in this checkout",
)
def test_the_exercise_gives_the_same_policy_on_ray_and_on_local_processes(cluster):
    sys.path.insert(0, os.path.join(ROOT, "docs", "teacher"))
    try:
        import nes_exercise_solution as solution
        import nes_runner
    finally:
        sys.path.pop(0)
    kw = dict(
        env_name="CartPole-v1",
        iterations=3,
        n_pairs=4,
        sigma=0.1,
        alpha=0.05,
        seed=2,
        log=lambda *a: None,
    )
    with ProcessPoolExecutor(2) as pool:
        local = solution.train(executor=pool, **kw)
    executor = nes_runner.RayExecutor()
    try:
        remote = solution.train(executor=executor, **kw)
    finally:
        executor.shutdown()
    assert ray.is_initialized()  # the executor joined the running cluster and leaves it running
    for key in local:
        np.testing.assert_array_equal(local[key], remote[key])


@NEEDS_RAY
@pytest.mark.skipif(
    not os.path.exists(os.path.join(ROOT, "docs", "teacher", "nes_exercise_solution.py")),
    reason="the teacher's copy is not in this checkout",
)
def test_the_teachers_solution_runs_on_ray_from_another_folder(cluster, tmp_path):
    """Its functions go to the Ray workers by value, and so do nes_exercise's they call: the
    workers need not find either file."""
    solution = os.path.join(ROOT, "docs", "teacher", "nes_exercise_solution.py")
    argv = [solution, "--ray-address", cluster.address, "--iterations", "2", "--pairs", "2"]
    out = subprocess.run(
        [sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and "mean policy:" in out.stdout, out.stderr[-2000:]


@NEEDS_RAY
@pytest.mark.parametrize(
    "script, own, extra",
    [
        ("ars.py", True, []),
        ("es_openai.py", False, ["--noise-size", "100000", "--population", "8"]),
    ],
)
def test_sigterm_stops_a_ray_run_with_a_checkpoint_and_no_traceback(
    cluster, tmp_path, script, own, extra
):
    """ray.init installs its own SIGTERM handler; the scripts keep theirs, which saves the run.
    ars.py starts a Ray instance of its own (--ray-address local), whose processes must end with
    it; es_openai.py, whose start_ray is the same, joins the cluster the other tests share."""
    address = "local" if own else cluster.address
    proc = subprocess.Popen(
        [
            sys.executable,
            os.path.join(ROOT, script),
            "--env",
            "Pendulum-v1",
            "--ray",
            "--ray-address",
            address,
            "--workers",
            "2",
            "--iterations",
            "100000",
            "--out-dir",
            str(tmp_path),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    for line in proc.stdout:  # wait until a few iterations have run
        if line.split()[0] in ("it", "gen") and int(line.split()[1]) >= 3:
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "--resume" in err and "Traceback" not in err, err
    (run_dir,) = [os.path.join(tmp_path, d) for d in os.listdir(tmp_path)]
    assert (
        int(np.load(os.path.join(run_dir, "checkpoints", "latest.npz"))["iteration"]) >= 2
    )  # 3 shown
    for _ in range(30):  # Ray's own processes of this run exit too, within seconds
        leftover = left_in_session(proc.pid)
        if not leftover.strip():
            break
        time.sleep(0.5)
    assert leftover.strip() == ""


# ---------------------------------------------------------------- without Ray


@NEEDS_RAY
def test_a_lost_node_is_survived_when_the_cluster_has_room(cluster):
    """A third node joins the shared cluster and is removed in the middle of a run: its tasks run
    again on the nodes left, with the same results. (Placed after the tests that count the CPUs.)"""
    node = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    jobs = [("train", k) for k in range(64)]  # about a second of episodes: the node goes mid-run
    params = (1, np.full((1, 3), 0.1), np.zeros(3), np.ones(3), 0.05)
    args = parse(ars, env="Pendulum-v1", ray=True, workers=2)
    pool = ars.make_pool(args)
    before = ars.run_jobs(pool, args, params, jobs)
    timer = threading.Timer(0.1, cluster.remove_node, (node,))
    timer.start()
    after = ars.run_jobs(pool, args, params, jobs)  # the lost node's tasks run on the others
    timer.join()
    assert all(after[k][0][:3] == before[k][0][:3] for k in range(64))
    assert len(ray.nodes()) == 3 and sum(n["Alive"] for n in ray.nodes()) == 2


@pytest.mark.parametrize(
    "script, extra",
    [
        ("ars.py", ["--env", "Pendulum-v1"]),
        ("es_openai.py", ["--env", "Pendulum-v1", "--noise-size", "1000"]),
        ("nes_exercise.py", None),
    ],
)
def test_a_missing_ray_gives_one_clear_line_and_writes_nothing(tmp_path, script, extra):
    (tmp_path / "ray.py").write_text("raise ImportError('No module named ray')\n")  # Ray hidden
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    if (
        script == "nes_exercise.py"
    ):  # the student's file refuses to train; the teacher's copy gets to Ray
        argv = [
            os.path.join(ROOT, "docs", "teacher", "nes_exercise_solution.py"),
            "--iterations",
            "1",
        ]
        if not os.path.exists(argv[0]):
            pytest.skip("the teacher's copy is not in this checkout")
    else:
        argv = [
            os.path.join(ROOT, script),
            *extra,
            "--iterations",
            "1",
            "--out-dir",
            str(tmp_path / "runs"),
        ]
    out = subprocess.run(
        [sys.executable, *argv, "--ray"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().count("\n") == 0 and "pip install ray" in out.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(  # a GCS address, a Ray client URL; with --workers too, before any file
    "address, workers", [("127.0.0.1:9", []), ("ray://127.0.0.1:9", ["--workers", "2"])]
)
@pytest.mark.parametrize("script", ["ars.py", "es_openai.py", "nes_exercise.py"])
def test_an_unreachable_cluster_is_refused_at_once(tmp_path, script, address, workers):
    if ray is None:
        pytest.skip("Ray is not installed")
    if (
        script == "nes_exercise.py"
    ):  # the student's file refuses to train; the teacher's copy gets to Ray
        argv = [os.path.join(ROOT, "docs", "teacher", "nes_exercise_solution.py")]
        if not os.path.exists(argv[0]):
            pytest.skip("the teacher's copy is not in this checkout")
    else:
        argv = [
            os.path.join(ROOT, script),
            "--env",
            "Pendulum-v1",
            "--out-dir",
            str(tmp_path / "runs"),
        ]
    t0 = time.time()
    out = subprocess.run(
        [sys.executable, *argv, "--ray", "--ray-address", address, *workers],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 2 and f"no Ray cluster answers at {address}" in out.stderr, out.stderr
    assert time.time() - t0 < 60 and not (tmp_path / "runs").exists()


@NEEDS_RAY
@pytest.mark.parametrize("script", ["ars.py", "es_openai.py", "nes_exercise.py"])
def test_a_reachable_ray_client_url_passes_the_address_check(script, monkeypatch):
    # The check that refuses an unreachable address at once must let a Ray client URL through: its
    # "ray://" prefix is not part of the host name. Ray itself is not started: init is recorded.
    if script == "nes_exercise.py":
        path = os.path.join(ROOT, "docs", "teacher", "nes_exercise_solution.py")
        if not os.path.exists(path):
            pytest.skip("the teacher's copy is not in this checkout")
        import nes_runner

        start = nes_runner.RayExecutor
    else:
        start = (ars if script == "ars.py" else eo).start_ray
    server = __import__("socket").create_server(("127.0.0.1", 0))  # something that answers
    address = f"ray://127.0.0.1:{server.getsockname()[1]}"
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw["address"]))
    try:
        start(address)
    finally:
        server.close()
    assert calls == [address]
