"""Tests of the class exercise: the checker against the teacher's solution, against the untouched
student file and against deliberately wrong answers; the solution learns CartPole-v1."""
import importlib.util
import os
import re
import subprocess
import sys
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
                                           (["--sigma", "0"], "--sigma must be positive")])
def test_bad_input_gets_one_line(argv, message):
    out = subprocess.run([sys.executable, SOLUTION, *argv], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and message in out.stderr
