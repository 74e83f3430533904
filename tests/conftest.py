"""Lets the tests import the scripts (ars.py, ...) as modules from the repository root, and the
helpers they share."""

import contextlib
import io
import multiprocessing
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
START_METHODS = ("fork", "forkserver", "spawn")  # Linux to 3.13, Linux from 3.14, macOS and Windows
SITE = os.path.join(ROOT, "tests", "site")  # its sitecustomize.py applies START_METHOD
POSIX_ONLY = pytest.mark.skipif(
    sys.platform == "win32", reason="sends POSIX signals and reads processes with pgrep and ps"
)


def with_start_method(method: str, **more) -> dict:
    """The environment of a subprocess whose multiprocessing starts processes by `method`."""
    path = os.pathsep.join([SITE, os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, START_METHOD=method, PYTHONPATH=path, **more)


def pytest_configure(config):
    # pytest-xdist from 3.8 would hand out the test files by their count of tests, not in the
    # order of pytest_collection_modifyitems below
    config.option.loadscopereorder = False
    # START_METHOD=spawn python -m pytest: the suite under another platform's start method, in
    # this process and in every Python it starts.
    if os.environ.get("START_METHOD"):
        multiprocessing.set_start_method(os.environ["START_METHOD"], force=True)
        os.environ.update(with_start_method(os.environ["START_METHOD"]))


def pytest_xdist_auto_num_workers(config):
    """-n auto (pyproject.toml): a worker more than the cores, as the Ray and command-line tests
    wait on processes starting (2 cores: 49-58 s, against 57-61 s with 2 workers)."""
    if not os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):  # (that one says how many)
        cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        return (len(cores) if cores else os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(config, items):
    """The Ray tests run last: once Ray has started in a process, a process forked from it can crash
    in Ray's code (Python 3.13: a SIGSEGV in GcsClient's destructor). Two files, each starting its
    cluster once: one can run beside the other tests' last file, one beside the other."""
    items.sort(key=lambda item: item.path.name.startswith("test_ray"))  # stable: the same order


@pytest.fixture(scope="module")
def cluster(request):
    """A head node and a second node (the file's NODES: 1, the head only), 2 CPUs each, as `ray
    start --head` and `ray start --address` would make them on two machines; the test file's own
    functions go to Ray by value."""
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    if getattr(request.module, "NODES", 2) == 2:
        c.add_node(num_cpus=2)
    ray.init(address=c.address, log_to_driver=False, include_dashboard=False)
    c.wait_for_nodes()
    ray.cloudpickle.register_pickle_by_value(request.module)  # its task helpers
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def fork_start():
    """The test's processes start by fork, whatever START_METHOD says: for workers that need what
    only this process holds (an environment registered by the test, a module loaded from a path)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this system")
    method = multiprocessing.get_start_method()
    multiprocessing.set_start_method("fork", force=True)
    yield
    multiprocessing.set_start_method(method, force=True)


def only_builtin_types(x) -> bool:
    """Whether x holds only built-in containers and scalars, None and numpy arrays and scalars:
    what a worker may send back (through Ray, an object of a class defined in a script run as
    __main__ travels with the class's whole definition)."""
    import numpy as np  # (not at the top: a script sets OMP_NUM_THREADS before numpy starts)

    if type(x) in (tuple, list):
        return all(only_builtin_types(v) for v in x)
    if type(x) is dict:
        return all(type(k) is str and only_builtin_types(v) for k, v in x.items())
    return (
        x is None or type(x) in (str, int, float, bool) or isinstance(x, (np.ndarray, np.generic))
    )


def refused(module, tmp_path, *argv) -> str:
    """Runs module.main(argv + --out-dir, unless it resumes) in this process and checks that the
    input is refused as every script refuses bad input: exit status 2, one line on stderr naming
    the script, nothing written. Returns that line."""
    out_dir, err = tmp_path / "out", io.StringIO()
    where = [] if "--resume" in argv else ["--out-dir", str(out_dir)]  # a resumed run stays put
    with (
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
        pytest.raises(SystemExit) as stop,
    ):
        module.main([*argv, *where])
    lines = err.getvalue().strip().splitlines()
    assert stop.value.code == 2, err.getvalue()
    assert len(lines) == 1 and lines[0].startswith(f"{module.__name__}.py: error:"), err.getvalue()
    assert not out_dir.exists()
    return lines[0]


def processes_in(sid: int) -> list:
    """(pid, parent pid, state, command) of each process of session sid (Linux and macOS)."""
    pids = subprocess.run(["pgrep", "-s", str(sid)], capture_output=True, text=True).stdout.split()
    if not pids:
        return []
    argv = ["ps", "-ww", "-o", "pid=,ppid=,stat=,args=", "-p", ",".join(pids)]
    out = subprocess.run(argv, capture_output=True, text=True).stdout
    return [line.split(None, 3) for line in out.splitlines()]


def left_in_session(sid: int) -> str:
    """The processes of session sid still running, one 'pid state command' a line (a zombie, which
    has ended and waits for its new parent to reap it, is not one)."""
    left = [f"{pid} {state} {args}" for pid, _, state, args in processes_in(sid) if state[0] != "Z"]
    return "\n".join(left)


def workers_in(sid: int) -> list:
    """The worker processes of the run in session sid: its processes with no children, but the
    master and multiprocessing's resource tracker."""
    procs = processes_in(sid)
    parents = {ppid for _, ppid, _, _ in procs}
    return [
        int(pid)
        for pid, _, _, args in procs
        if pid not in parents and int(pid) != sid and "resource_tracker" not in args
    ]


class _Trap:
    """An object whose unpickling creates a file."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


def booby_trapped(marker: str):
    """An object array that creates the file `marker` if a loader unpickles it: a checkpoint
    holding it tells whether the script loads with allow_pickle=False."""
    import numpy as np

    trap = np.empty(1, dtype=object)
    trap[0] = _Trap(marker)
    return trap
