"""--ray without Ray, or with an address where no cluster answers: one line at once, nothing
written; a Ray client URL passes the check. No cluster here: these run beside the other files."""

import os
import socket
import subprocess
import sys
import time

import pytest
from conftest import ROOT
from test_ray import NEEDS_RAY, SOLUTION

import ars

try:
    import ray
except ImportError:
    ray = None


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
