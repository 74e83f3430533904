"""The class exercise: the checker (tests/nes_checker.py) passes the teacher's solution, stops at
the untouched file, and catches each wrong answer of WRONG at its part with its message; the
solution learns CartPole-v1; the command line."""

import ast
import contextlib
import importlib.util
import inspect
import itertools
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nes_checker
import nes_runner
import pytest
from conftest import POSIX_ONLY, left_in_session, with_start_method, workers_in

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDENT = os.path.join(ROOT, "nes_exercise.py")
SOLUTION = os.path.join(ROOT, "docs", "teacher", "nes_exercise_solution.py")
pytestmark = pytest.mark.skipif(
    not os.path.exists(SOLUTION), reason="the teacher's copy is not in this checkout"
)
COUNT = itertools.count()
FILES = tempfile.TemporaryDirectory(prefix="nes_")  # the students' files, kept to the end
PASSED = [("passed", "")] * 5


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # worker processes find evaluate_pair by its module's name
    spec.loader.exec_module(module)
    return module


def solved(part=None, edits=()):
    """The student's file with the teacher's five bodies under "YOUR CODE HERE", the body of
    `part` changed by edits [(old, new), ...], written to a file (a traceback shows its line) and
    loaded."""
    solution, text = load(SOLUTION, "nes_solution"), Path(STUDENT).read_text()
    for number, name in enumerate(solution.PARTS, 1):
        source = inspect.getsource(getattr(solution, name))
        start = ast.parse(source).body[0].body[0].lineno - 1
        body = "".join(source.splitlines(keepends=True)[start:])
        for old, new in edits if number == part else ():
            assert old in body, (name, old)
            body = body.replace(old, new)
        text = re.sub(
            rf"(# YOUR CODE HERE \(part {number}\)\n).*?(    # END OF YOUR CODE)",
            lambda m, body=body: m.group(1) + body + m.group(2),
            text,
            flags=re.S,
        )
    path = os.path.join(tempfile.mkdtemp(dir=FILES.name), "nes_exercise.py")
    Path(path).write_text(text)
    return load(path, f"nes_solved_{next(COUNT)}")


def outcome(ex) -> list:
    return [nes_checker.run_part(ex, part) for part in nes_checker.PARTS]


def run(*argv, **kw):
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=120, **kw
    )


def test_the_teacher_solution_passes_every_part():
    lines = []
    assert nes_checker.check(solved(), out=lines.append)
    assert lines[-1].startswith("All five parts pass")


def test_the_untouched_file_says_what_to_do_next(tmp_path):
    out = run(STUDENT, "--check")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stdout.startswith("Part 1 (initial_policy): not implemented yet")
    assert "Next: open nes_exercise.py, find 'Part 1'" in out.stdout and "Part 2" not in out.stdout
    out = run(STUDENT)
    assert out.returncode == 2 and "run: python nes_exercise.py --check" in out.stderr
    (tmp_path / "nes_exercise.py").write_text(Path(STUDENT).read_text())  # without tests/ beside
    out = run("nes_exercise.py", "--check", cwd=tmp_path)
    missing = "nes_exercise.py: error: tests/nes_runner.py is missing (see the repository)\n"
    assert (out.returncode, out.stderr) == (1, missing)


def test_centered_ranks_is_an_identical_copy_of_es_basic():
    import es_basic

    ex = load(STUDENT, "nes_copy")
    assert inspect.getsource(ex.centered_ranks) == inspect.getsource(es_basic.centered_ranks)


def wrong(part, says, *edits):  # a wrong answer: its part, the message's words, (old, new) ...
    return pytest.param(part, list(zip(edits[::2], edits[1::2])), says, id=f"part{part}-{says}")


STEP = "alpha / (2 * n * sigma)"
SHAPES = "policy_shapes(obs_dim, n_out, hidden)"
BOTH = "rollout(plus, env_name, seed), rollout(minus, env_name, seed)"
PAIRS = "pair_seeds(seed, iteration, n_pairs)"
SUBMIT = "futures = [executor.submit(evaluate_pair, mu, s, sigma, env_name)"
RESULTS = "results = [f.result() for f in futures]"
LOG = '        log(f"iteration {iteration:3d}: mean return {R.mean():8.2f}")\n'
PAIR = (
    "plus = {k: policy[k] + sigma * eps[k] for k in KEYS}\n"
    "    minus = {k: policy[k] - sigma * eps[k] for k in KEYS}\n"
)
IN_PLACE = "    for k in KEYS:\n        plus[k] += sigma * eps[k]\n"
WRONG = [  # docs/teacher/README.md counts them
    wrong(1, "float zeros", "np.zeros(shape)", "np.zeros(shape, dtype=int)"),
    wrong(1, "not those of policy_shapes", SHAPES, "policy_shapes(n_out, obs_dim, hidden)"),
    wrong(1, "ignore its hidden argument", "n_out, hidden).items()", "n_out).items()"),
    wrong(1, "ignore its obs_dim argument", SHAPES, "policy_shapes(4, n_out, hidden)"),
    wrong(
        2,
        "the very arrays of the policy",
        PAIR,
        "plus = dict(policy)\n    minus = dict(policy)\n"
        + IN_PLACE
        + "        minus[k] -= sigma * eps[k]\n",
    ),
    wrong(2, "plus and minus are swapped", "return plus, minus", "return minus, plus"),
    wrong(2, "eps is not scaled", "policy[k] + sigma * eps[k]", "policy[k] + eps[k]"),
    wrong(
        2,
        "in place",
        "eps = sample_noise(policy, seed)\n",
        "eps = sample_noise(policy, seed)\n    plus = dict(policy)\n" + IN_PLACE,
    ),
    wrong(
        2,
        "minus uses other noise",
        "{k: policy[k] - sigma * eps[k] for k in KEYS}",
        "{k: policy[k] - sigma * sample_noise(policy, seed + 1)[k] for k in KEYS}",
    ),
    wrong(2, "by sigma twice", "policy[k] + sigma * eps[k]", "policy[k] + sigma * sigma * eps[k]"),
    wrong(2, "minus is the mean", "{k: policy[k] - sigma * eps[k] for k in KEYS}", "dict(policy)"),
    wrong(
        2, "the seed you were given", "sample_noise(policy, seed)", "sample_noise(policy, seed + 1)"
    ),
    wrong(3, "pair 2's term only", "new[k] += alpha", "new[k] = policy[k] + alpha"),
    wrong(3, "wrong sign", "* (fp - fm) *", "* (fm - fp) *"),
    wrong(3, "divided by n sigma", STEP, "alpha / (n * sigma)"),
    wrong(3, "divided by 4 n sigma", STEP, "alpha / (4 * n * sigma)"),
    wrong(3, "with the parentheses", STEP, "alpha / 2 * n * sigma"),
    wrong(3, "1/sigma is missing", STEP, "alpha / (2 * n)"),
    wrong(3, "only F_plus is used", "(fp - fm)", "fp"),
    wrong(3, "F_plus + F_minus is used", "(fp - fm)", "(fp + fm)"),
    wrong(3, "first pair's noise", "sample_noise(policy, seed)", "sample_noise(policy, seeds[0])"),
    wrong(
        3,
        "pair 0 is left out",
        "zip(seeds, F_plus, F_minus)",
        "zip(seeds[1:], F_plus[1:], F_minus[1:])",
    ),
    wrong(3, "changed the arrays", "new = {k: policy[k].copy() for k in KEYS}", "new = policy"),
    wrong(3, "sigma multiplies", STEP, "alpha * sigma / (2 * n)"),
    wrong(3, "not divided by 2 n", STEP, "alpha / sigma"),
    wrong(3, "divided by 2 sigma only", STEP, "alpha / (2 * sigma)"),
    wrong(3, "from the index i", "zip(seeds, F_plus", "zip(range(n), F_plus"),
    wrong(3, "another pair's noise", "zip(seeds, F_plus", "zip(seeds[1:] + seeds[:1], F_plus"),
    wrong(
        4,
        "are swapped",
        "return seed, " + BOTH,
        "return seed, rollout(minus, env_name, seed), rollout(plus, env_name, seed)",
    ),
    wrong(
        4,
        "both episodes play plus",
        "rollout(minus, env_name, seed)",
        "rollout(plus, env_name, seed)",
    ),
    wrong(4, "from env_seed 0", BOTH, "rollout(plus, env_name, 0), rollout(minus, env_name, 0)"),
    wrong(
        4,
        "built from another seed",
        "mirrored_pair(policy, seed, sigma)",
        "mirrored_pair(policy, seed + 1, sigma)",
    ),
    wrong(4, "never the weights", "return seed, " + BOTH, "return seed, plus, minus"),
    wrong(4, "the seed you were given", "return seed, rollout", "return 0, rollout"),
    wrong(
        4,
        "both episodes play minus",
        "rollout(plus, env_name, seed), rollout",
        "rollout(minus, env_name, seed), rollout",
    ),
    wrong(
        4,
        "the mean policy",
        BOTH,
        "rollout(policy, env_name, seed), rollout(policy, env_name, seed)",
    ),
    wrong(
        4,
        "wrong env_seed",
        BOTH,
        "rollout(plus, env_name, seed + 1), rollout(minus, env_name, seed + 1)",
    ),
    wrong(
        4,
        "different env_seeds",
        "rollout(minus, env_name, seed)",
        "rollout(minus, env_name, seed + 1)",
    ),
    wrong(4, "return a tuple (seed, return_plus", "return seed, rollout", "return rollout"),
    wrong(5, "raw returns", "F = centered_ranks(R)", "F = R"),
    wrong(
        5,
        "ranked separately",
        "F = centered_ranks(R)",
        "F = np.concatenate([centered_ranks(R[:n_pairs]), centered_ranks(R[n_pairs:])])",
    ),
    wrong(5, "split wrongly", "F[:n_pairs], F[n_pairs:]", "F[::2], F[1::2]"),
    wrong(5, "the same seeds", PAIRS, "pair_seeds(seed, 0, n_pairs)"),
    wrong(5, "ignore --seed", PAIRS, "pair_seeds(0, iteration, n_pairs)"),
    wrong(5, "count from 0", PAIRS, "pair_seeds(seed, iteration + 1, n_pairs)"),
    wrong(
        5,
        "global random",
        "pairs = " + PAIRS,
        "pairs = list(map(int, np.random.randint(2**31, size=n_pairs)))",
    ),
    wrong(
        5,
        "before every pair",
        SUBMIT,
        "futures = [executor.submit(evaluate_pair, mu, s, sigma, env_name).result()",
        RESULTS,
        "results = futures",
    ),
    wrong(5, "it shows the fitness", "R.mean():8.2f", "F.mean():8.2f"),
    wrong(
        5,
        "matched to the wrong seeds",
        RESULTS,
        "results = [f.result() for f in futures][::-1]",
        "seeds = [r[0] for r in results]",
        "seeds = pair_seeds(seed, iteration, n_pairs)",
    ),
    wrong(
        5,
        "by position",
        "evaluate_pair, mu, s, sigma, env_name)",
        "evaluate_pair, mu, s, sigma=sigma, env_name=env_name)",
    ),
    wrong(
        5,
        "with train's hidden",
        "n_outputs(env.action_space), hidden)",
        "n_outputs(env.action_space))",
    ),
    wrong(5, "not print", 'log(f"iteration', 'print(f"iteration'),
    wrong(
        5,
        "another policy than the current mean",
        "mu = update_mean_policy(mu, seeds, F[:n_pairs], F[n_pairs:], sigma, alpha)",
        "update_mean_policy(mu, seeds, F[:n_pairs], F[n_pairs:], sigma, alpha)",
    ),
    wrong(
        5,
        "nothing was submitted",
        SUBMIT,
        "futures = [evaluate_pair(mu, s, sigma, env_name)",
        RESULTS,
        "results = futures",
    ),
    wrong(
        5,
        "submit evaluate_pair itself",
        "executor.submit(evaluate_pair, mu",
        "executor.submit(lambda *a: evaluate_pair(*a), mu",
    ),
    wrong(
        5,
        "18 calls of executor.submit for 3 iterations of 5 pairs",
        "pairs = " + PAIRS,
        "pairs = pair_seeds(seed, iteration, n_pairs + 1)",
    ),
    wrong(5, "with train's sigma and env_name", "mu, s, sigma, env_name)", "mu, s, 0.5, env_name)"),
    wrong(
        5,
        "update_mean_policy was called 1 times in 3 iterations",
        "mu = update_mean_policy(",
        "mu = mu if iteration else update_mean_policy(",
    ),
    wrong(5, "2 log lines for 3 iterations", 'log(f"iteration', 'iteration > 1 or log(f"iteration'),
    wrong(
        5,
        "return the mean policy after",
        "    return mu",
        "    return initial_policy(4, 2, hidden)",
    ),
    wrong(
        5,
        "train goes on after iteration 1",
        "        if target is not None and R.mean() >= target:\n            break\n",
        "",
    ),
    wrong(5, "before the mean return", "R.mean() >= target", "F.mean() >= target"),
    wrong(
        5,
        "from before the update",
        "mu = update_mean_policy(",
        "mu = mu if target is not None and R.mean() >= target else update_mean_policy(",
    ),
    wrong(5, "stops before it logs", LOG, "", "            break\n", "            break\n" + LOG),
]


@pytest.mark.parametrize("part, edits, says", WRONG)
def test_each_wrong_answer_is_caught_at_its_part_with_its_message(part, edits, says):
    got = outcome(solved(part, edits))
    assert got[: part - 1] == PASSED[: part - 1], got  # the parts before it pass
    status, message = got[part - 1]
    assert status == "wrong" and says in message, message


@pytest.mark.parametrize(
    "part, edits",
    [
        (1, [("np.zeros(shape)", "np.zeros(shape, dtype=np.float32) + 0.0")]),
        (5, [("F = centered_ranks(R)", "F = centered_ranks(R) + 1.0")]),  # a constant on all
        (5, [("F[:n_pairs], F[n_pairs:]", "list(F[:n_pairs]), list(F[n_pairs:])")]),
        (5, [('R.mean():8.2f}")', 'R.mean():.0f}", flush=True)')]),  # print's keywords, rounded
        (
            5,  # in any order: matched by seed
            [
                ("for f in futures]", "for f in as_completed(futures)]"),
                (
                    "    env = gym.make",
                    "    from concurrent.futures import as_completed\n    env = gym.make",
                ),
            ],
        ),
    ],
)
def test_an_answer_that_changes_nothing_the_algorithm_computes_passes(part, edits):
    assert outcome(solved(part, edits)) == PASSED


def test_a_students_exception_shows_the_students_line():
    ex = solved(2, [("sample_noise(policy, seed)", "sample_noise(policy, seed)['W3']")])
    status, message = nes_checker.run_part(ex, nes_checker.PARTS[1])
    assert status == "wrong" and "KeyError" in message and "nes_exercise.py, line" in message
    assert "sample_noise(policy, seed)['W3']" in message and "nes_checker" not in message


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seed", "-1"], "--seed: must be finite, >= 0; got -1"),
        (["--alpha", "inf"], "--alpha: must be finite, > 0"),
        (["--iterations", "1e3"], "--iterations: invalid int value"),
        (["--env", "CartPole-v7"], "doesn't exist"),
        (["--env", "HalfCheetah-v2"], "mujoco"),  # gymnasium 1.1: mujoco_py; 1.2 on: moved
    ],
)
def test_bad_input_gets_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        nes_runner.main(solved(), argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("nes_exercise.py: error:")
    assert message in err[0], err


def test_a_mean_policy_that_becomes_nan_stops_with_a_message():
    out = run(SOLUTION, "--sigma", "1e-320", "--iterations", "2", "--pairs", "2", "--workers", "1")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "mean policy:" not in out.stdout
    assert out.stderr.strip().splitlines()[-1] == (
        "nes_exercise.py: error: the mean became NaN or inf: alpha / sigma too large"
    )


@POSIX_ONLY
@pytest.mark.parametrize("how", ["ctrl-c", "a worker killed"])
def test_a_stop_or_a_dead_worker_ends_the_run_with_no_process_left(how):
    """Ctrl-C in a terminal signals the whole process group (the workers ignore it): the run ends
    after its iteration's line, status 130. A worker killed ends the run with one line."""
    argv = [SOLUTION, "--iterations", "100000", "--target-return", "1e9", "--workers", "2"]
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout.readline().startswith("iteration   0:")  # training has started
        started = time.time()  # a worker starts when a job waits for one; under spawn and
        for _ in proc.stdout if multiprocessing.get_start_method() != "fork" else ():
            if time.time() > started + 3:  # forkserver, it ignores Ctrl-C once it is up
                break
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(workers_in(proc.pid)[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=20)
        if how == "ctrl-c":
            assert (proc.returncode, err) == (130, "nes_exercise.py: interrupted\n"), err
        else:
            assert (proc.returncode, err) == (1, "nes_exercise.py: error: a worker process died\n")
        deadline = time.time() + 10
        while left_in_session(proc.pid) and time.time() < deadline:
            time.sleep(0.25)
        assert left_in_session(proc.pid) == ""
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # only if the test failed: nothing left otherwise
        proc.wait()


def test_three_iterations_on_a_simulated_windows(tmp_path):
    """No fork, no signal.pthread_sigmask, workers started by spawn (tests/site/)."""
    env = with_start_method("spawn", SIMULATED_WINDOWS="1")
    out = run(SOLUTION, "--iterations", "3", "--workers", "2", cwd=tmp_path, env=env)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.count("iteration") == 3 and "mean policy:" in out.stdout
