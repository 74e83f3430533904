"""Tests of the class exercise: the checker against the teacher's solution, against the untouched
student file and against deliberately wrong answers; the solution learns CartPole-v1."""
import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDENT = os.path.join(ROOT, "nes_exercise.py")
SOLUTION = os.path.join(ROOT, "docs", "teacher", "nes_exercise_solution.py")
# The tests of the repository as shipped: the teacher's copy is present and the student's file untouched.
pytestmark = pytest.mark.skipif(not os.path.exists(SOLUTION), reason="the teacher's copy is not in this checkout")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # worker processes find evaluate_pair by its module's name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def solution():
    return load(SOLUTION, "nes_solution")


@pytest.fixture(scope="module")
def student():
    return load(STUDENT, "nes_student")


def test_centered_ranks_is_an_identical_copy_of_es_basic(student):
    import inspect
    import es_basic
    assert inspect.getsource(student.centered_ranks) == inspect.getsource(es_basic.centered_ranks)


def test_every_check_passes_on_the_solution(solution):
    for part in solution.PARTS:
        assert solution.run_check(part) == ("passed", ""), part[0]


def test_every_part_of_the_untouched_file_reports_not_implemented(student):
    for part in student.PARTS:
        status, message = student.run_check(part)
        assert status == "not implemented yet" and part[1] in message, part[0]


def test_checker_stops_at_the_first_unfinished_part_without_crashing():
    out = subprocess.run([sys.executable, STUDENT, "--check"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stdout.splitlines()[0] == ("Part 1 (initial_policy): not implemented yet: initial_policy still "
                                          "raises NotImplementedError")
    assert "Next: open nes_exercise.py, find 'Part 1'" in out.stdout and "Part 2" not in out.stdout


def test_training_refuses_to_start_before_every_part_passes():
    out = subprocess.run([sys.executable, STUDENT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip() == ("nes_exercise.py: error: some parts are not done yet; "
                                                          "run: python nes_exercise.py --check")


def outside_the_marked_parts(path):
    text = open(path).read()
    return re.sub(r"# YOUR CODE HERE \(part \d\)\n.*?# END OF YOUR CODE", "<part>", text, flags=re.S)


def test_student_file_and_solution_are_identical_outside_the_marked_parts():
    student, solution = outside_the_marked_parts(STUDENT), outside_the_marked_parts(SOLUTION)
    assert student.count("<part>") == 5
    assert student == solution


def test_a_sign_error_in_the_update_is_caught(solution, monkeypatch):
    right = solution.update_mean_policy

    def wrong(policy, seeds, F_plus, F_minus, sigma, alpha):
        return right(policy, seeds, F_minus, F_plus, sigma, alpha)
    monkeypatch.setattr(solution, "update_mean_policy", wrong)
    status, message = solution.run_check(solution.PARTS[2])
    assert status == "wrong" and "sign error" in message


def test_an_update_that_ignores_the_minus_member_is_caught(solution, monkeypatch):
    right = solution.update_mean_policy

    def wrong(policy, seeds, F_plus, F_minus, sigma, alpha):
        return right(policy, seeds, 2 * np.asarray(F_plus), 0 * np.asarray(F_minus), sigma, alpha)
    monkeypatch.setattr(solution, "update_mean_policy", wrong)
    assert solution.run_check(solution.PARTS[2])[0] == "wrong"


def test_a_missing_one_over_sigma_is_caught(solution, monkeypatch):
    right = solution.update_mean_policy

    def wrong(policy, seeds, F_plus, F_minus, sigma, alpha):
        return right(policy, seeds, F_plus, F_minus, sigma, alpha * sigma)  # alpha / (2 n) instead of / (2 n sigma)
    monkeypatch.setattr(solution, "update_mean_policy", wrong)
    status, message = solution.run_check(solution.PARTS[2])
    assert status == "wrong" and "missing 1/sigma" in message


def test_returning_vectors_instead_of_seeds_is_caught(solution, monkeypatch):
    def wrong(policy, seed, sigma, env_name):
        plus, minus = solution.mirrored_pair(policy, seed, sigma)
        return seed, plus, minus
    monkeypatch.setattr(solution, "evaluate_pair", wrong)
    status, message = solution.run_check(solution.PARTS[3])
    assert status == "wrong" and "never the weights" in message


def test_an_unmirrored_pair_is_caught(solution, monkeypatch):
    def wrong(policy, seed, sigma):
        eps, eps2 = solution.sample_noise(policy, seed), solution.sample_noise(policy, seed + 1)
        return ({k: policy[k] + sigma * eps[k] for k in solution.KEYS},
                {k: policy[k] - sigma * eps2[k] for k in solution.KEYS})
    monkeypatch.setattr(solution, "mirrored_pair", wrong)
    status, message = solution.run_check(solution.PARTS[1])
    assert status == "wrong" and "mirror image" in message


def test_the_checker_output_names_the_failing_part(solution, monkeypatch):
    monkeypatch.setattr(solution, "evaluate_pair", lambda *args: (0, 1.0, 2.0))
    lines = []
    assert not solution.check_all(out=lines.append)
    assert lines[:3] == ["Part 1 (initial_policy): passed", "Part 2 (mirrored_pair): passed",
                         "Part 3 (update_mean_policy): passed"]
    assert lines[3].startswith("Part 4 (evaluate_pair): wrong: the first element should be the seed")
    assert lines[4].startswith("Next: fix evaluate_pair")


def test_the_solution_solves_cartpole_in_parallel_within_a_small_budget(solution):
    with ProcessPoolExecutor(2) as executor:
        mu = solution.train("CartPole-v1", executor, iterations=50, n_pairs=25, sigma=0.1, alpha=0.05, seed=0,
                            log=lambda line: None)
    assert solution.evaluate_mean(mu, "CartPole-v1", 100).mean() >= 475


@pytest.mark.parametrize("argv, message", [(["--seed", "-1"], "--seed must be 0 or more"),
                                           (["--env", "CartPole-v7"], "unknown environment"),
                                           (["--sigma", "0"], "--sigma must be positive"),
                                           (["--sigma", "nan"], "--sigma must be positive and finite"),
                                           (["--alpha", "inf"], "--alpha must be positive and finite"),
                                           (["--iterations", "0"], "--iterations must be positive"),
                                           (["--pairs", str(10**12)], "--pairs must be between 1 and 10000"),
                                           (["--workers", str(10**12)], "--workers must be between 1 and"),
                                           (["--workers", "0"], "--workers must be between 1 and")])
def test_bad_input_gets_one_line(argv, message, tmp_path):
    out = subprocess.run([sys.executable, SOLUTION, *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("script", [STUDENT, SOLUTION])
@pytest.mark.parametrize("env, message", [
    ("HalfCheetah-v2", "cannot make 'HalfCheetah-v2': The mujoco v2 and v3 based environments have been moved"),
    ("phys2d/CartPole-v1", "cannot make 'phys2d/CartPole-v1': ")])
def test_a_registered_environment_that_cannot_be_made_gets_one_line(script, env, message, tmp_path):
    """gymnasium knows these ids but cannot make them here: an old MuJoCo version, a jax environment."""
    out = subprocess.run([sys.executable, script, "--env", env], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith(f"nes_exercise.py: error: {message}"), out.stderr
    assert os.listdir(tmp_path) == []


def test_any_exception_of_make_becomes_the_error_line_with_the_newest_version(student):
    import gymnasium as gym

    def broken():
        raise RuntimeError("no display\nsecond line of the message")
    for version in (1, 2):
        gym.register(f"BrokenForTest-v{version}", entry_point=broken)
    try:
        assert student.env_error("BrokenForTest-v1") == ("cannot make 'BrokenForTest-v1': no display; "
                                                         "try BrokenForTest-v2, the newest version")
        assert student.env_error("BrokenForTest-v2") == "cannot make 'BrokenForTest-v2': no display"
    finally:
        for version in (1, 2):
            del gym.registry[f"BrokenForTest-v{version}"]


def test_a_malformed_ray_address_gets_one_line():
    pytest.importorskip("ray")
    for address in ("abc", "127.0.0.1:99999"):  # not HOST:PORT; a port out of range
        out = subprocess.run([sys.executable, SOLUTION, "--ray", "--ray-address", address], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 2 and out.stderr == (f"nes_exercise.py: error: --ray-address must be HOST:PORT, "
                                                      f"ray://HOST:PORT, auto or local, got '{address}'\n")


@pytest.mark.parametrize("program", ["student", "solution"])
def test_a_ray_address_without_ray_is_refused(program):
    """Without --ray the pairs run on local processes: an address would be ignored, so it is refused,
    as ars.py and es_openai.py refuse it (in the student's file too, before its parts are checked)."""
    path = SOLUTION if program == "solution" else os.path.join(ROOT, "nes_exercise.py")
    out = subprocess.run([sys.executable, path, "--ray-address", "127.0.0.1:6379", "--iterations", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr == "nes_exercise.py: error: --ray-address needs --ray (see --help)\n"


def test_a_mean_policy_that_becomes_nan_stops_with_a_message():
    out = subprocess.run([sys.executable, SOLUTION, "--sigma", "1e-320", "--iterations", "2", "--pairs", "2",
                          "--workers", "1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr and "mean policy:" not in out.stdout
    assert out.stderr.strip().splitlines()[-1] == ("nes_exercise.py: error: the mean policy became NaN or inf; "
                                                   "try a smaller --alpha or a larger --sigma")


def test_an_error_during_a_stop_is_a_stop_and_an_error_in_train_is_not(solution, monkeypatch):
    # A Ctrl-C or SIGTERM can land inside the pool's locking and come out of train as another error
    # (RuntimeError: cannot release un-acquired lock); after a stop signal that is a stop (exit 130)
    def failing(*args, **kwargs):
        raise RuntimeError("cannot release un-acquired lock")
    monkeypatch.setattr(solution, "train", failing)
    monkeypatch.setattr(solution, "run_check", lambda part: ("passed", ""))  # the check of train would fail
    argv = ["--iterations", "1", "--pairs", "1", "--workers", "1"]
    with pytest.raises(RuntimeError, match="un-acquired lock"):  # no stop under way: the student's error
        solution.main(argv)
    monkeypatch.setattr(solution, "STOPS", [signal.SIGTERM])
    with pytest.raises(KeyboardInterrupt):
        solution.main(argv)


@pytest.mark.parametrize("how", ["to the script", "to its process group", "started in the background", "SIGTERM",
                                 "kill -9"])
def test_a_stopped_training_ends_at_once_with_no_worker_left(how):
    """Ctrl-C in a terminal signals the whole process group (the workers too); a job started in the
    background begins with SIGINT ignored, which Python keeps unless the script installs its handler.
    SIGTERM (kill, timeout) stops it the same way; after kill -9 the workers end on their own."""
    background = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if how == "started in the background" else None
    # -X faulthandler: a master that does not stop in time is sent SIGABRT, which prints where each of
    # its threads stood into the failure message (such a hang was seen once in many runs of the suite)
    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", SOLUTION, "--iterations", "100000", "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=background)
    try:
        assert proc.stdout.readline().startswith("iteration   1:")  # training has started
        if how == "to its process group":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal({"SIGTERM": signal.SIGTERM, "kill -9": signal.SIGKILL}.get(how, signal.SIGINT))
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            pytest.fail("the master did not stop within 20 s; its threads:\n" + proc.communicate(timeout=20)[1][-6000:])
        if how == "kill -9":
            assert proc.returncode == -signal.SIGKILL
        else:
            assert proc.returncode == 130 and err == "nes_exercise.py: interrupted\n", err
        for _ in range(40):  # no worker process is left behind
            leftover = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout
            if not leftover.strip():
                break
            time.sleep(0.25)
        assert leftover.strip() == ""
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # only if the test failed: nothing left otherwise
        except ProcessLookupError:
            pass
        proc.wait()
