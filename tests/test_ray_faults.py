"""What Ray survives in a run of ars.py or es_openai.py, on a Ray cluster started on this
machine: a lost worker (its task runs again, the same results; beyond the retries, one line and a
checkpoint), a lost node, and a SIGTERM (ray.init's own handler must not replace the script's)."""

import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import ROOT
from test_ray import ES_TINY, NEEDS_RAY, parse, pytestmark  # noqa: F401 (no cluster on Windows)

import ars
import es_openai as eo

try:
    import ray
except ImportError:
    ray = None
NODES = 1  # the cluster's head alone; the lost node's test adds one


def crash_in_iteration_3(args, params, kind, k, job=ars.job):  # its worker dies in iteration 3
    if params[0] == 2:
        os._exit(1)
    return job(args, params, kind, k)


@NEEDS_RAY
def test_ars_lost_worker_beyond_the_retries_stops_with_a_checkpoint(
    cluster, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(ars, "job", crash_in_iteration_3)
    monkeypatch.setattr(ars.RayExecutor, "retries", 0)  # 3 in a run: the same path, more waits
    argv = ["--env", "Pendulum-v1", "--iterations", "4", "--n-directions", "4", "--top-b", "2"]
    argv += ["--ray", "--workers", "2", "--out-dir", str(tmp_path), "--save-every", "1"]
    with pytest.raises(SystemExit) as stop:
        ars.main(argv)
    assert stop.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "stopped: a rollout failed" in lines[0], lines
    (run_dir,) = tmp_path.iterdir()
    with np.load(run_dir / "checkpoints" / "latest.npz") as ck:
        assert int(ck["iteration"]) == 2  # the last finished iteration: --resume goes on from there


def crash_once_in(marker: str, work):
    """es_openai.work, but the Ray worker that first runs it dies (marker: a file that says it
    did), as a crash would: Ray must run the task again."""

    def crashing(*args):
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return work(*args)

    return crashing


@NEEDS_RAY
def test_es_survives_a_killed_worker_with_the_same_results(cluster, tmp_path, monkeypatch):
    expected = eo.train(parse(eo, **ES_TINY, workers=1, out_dir=tmp_path / "local"))
    marker = str(tmp_path / "crashed")
    monkeypatch.setattr(eo, "work", crash_once_in(marker, eo.work))
    got = eo.train(parse(eo, **ES_TINY, workers=2, ray=True, out_dir=tmp_path / "ray"))
    assert os.path.exists(marker)  # a worker died, and its task ran again
    np.testing.assert_array_equal(expected["theta"], got["theta"])


@NEEDS_RAY
def test_sigterm_stops_a_ray_run_with_a_checkpoint_and_no_traceback(cluster, tmp_path):
    """ray.init installs its own SIGTERM handler; the script keeps its own, which saves the run
    (es_openai.py's main sets them in the same place, after configure)."""
    argv = [os.path.join(ROOT, "ars.py"), "--env", "Pendulum-v1", "--ray", "--ray-address"]
    argv += [cluster.address, "--workers", "2", "--iterations", "100000"]
    proc = subprocess.Popen(
        [sys.executable, *argv, "--out-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    for line in proc.stdout:  # wait until a few iterations have run
        if line.startswith("it ") and int(line.split()[1]) >= 3:
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "--resume" in err and "Traceback" not in err, err
    (run_dir,) = tmp_path.iterdir()
    with np.load(run_dir / "checkpoints" / "latest.npz") as ck:
        assert int(ck["iteration"]) >= 2  # 3 shown


@NEEDS_RAY
def test_a_lost_node_is_survived_when_the_cluster_has_room(cluster):
    """A second node joins and is removed in the middle of a run: its tasks run again on the
    head, with the same results."""
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
    assert len(ray.nodes()) == 2 and sum(n["Alive"] for n in ray.nodes()) == 1
