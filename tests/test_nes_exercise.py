"""Tests of the class exercise: the checker (tests/nes_checker.py) passes the teacher's solution,
stops at the untouched student file, and catches each wrong answer below at its own part with its
message; the solution learns CartPole-v1; the command line."""

import contextlib
import importlib.util
import inspect
import itertools
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
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
FILES = tempfile.TemporaryDirectory(
    prefix="nes_"
)  # the students' files, removed when the tests end


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # worker processes find evaluate_pair by its module's name
    spec.loader.exec_module(module)
    return module


def solved(**replace):
    """The student's file with the teacher's five bodies pasted under "YOUR CODE HERE", each body
    edited by replace[name] = [(old, new), ...], written to a file and loaded: how a student's file
    with those answers behaves."""
    import ast
    import re

    solution, text = load(SOLUTION, "nes_solution"), Path(STUDENT).read_text()
    for part, name in enumerate(solution.PARTS, 1):
        source = inspect.getsource(getattr(solution, name))
        start = ast.parse(source).body[0].body[0].lineno - 1
        body = "".join(source.splitlines(keepends=True)[start:])
        for old, new in replace.get(name, []):
            assert old in body, (name, old)
            body = body.replace(old, new)
        text = re.sub(
            rf"(# YOUR CODE HERE \(part {part}\)\n).*?(    # END OF YOUR CODE)",
            lambda m, body=body: m.group(1) + body + m.group(2),
            text,
            flags=re.S,
        )
    folder = tempfile.mkdtemp(
        dir=FILES.name
    )  # kept to the end: a traceback shows the student's line
    with open(os.path.join(folder, "nes_exercise.py"), "w") as f:
        f.write(text)
    return load(f.name, f"nes_solved_{next(COUNT)}")


def outcome(ex) -> list:
    return [nes_checker.run_part(ex, part) for part in nes_checker.PARTS]


def test_the_teacher_solution_passes_every_part():
    assert outcome(solved()) == [("passed", "")] * 5
    lines = []
    assert nes_checker.check(solved(), out=lines.append) and lines[-1].startswith(
        "All five parts pass"
    )


def test_the_untouched_file_is_not_implemented_yet_and_the_checker_stops_there():
    status, message = nes_checker.run_part(load(STUDENT, "nes_untouched"), nes_checker.PARTS[0])
    assert status == "not implemented yet" and "initial_policy" in message
    out = subprocess.run(
        [sys.executable, STUDENT, "--check"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stdout.splitlines()[0] == (
        "Part 1 (initial_policy): not implemented yet: initial_policy still "
        "raises NotImplementedError"
    )
    assert "Next: open nes_exercise.py, find 'Part 1'" in out.stdout and "Part 2" not in out.stdout
    out = subprocess.run([sys.executable, STUDENT], capture_output=True, text=True, timeout=120)
    assert (
        out.returncode == 2
        and "some parts are not done yet; run: python nes_exercise.py --check" in out.stderr
    )


def test_the_students_file_alone_says_what_is_missing(tmp_path):
    """A copy of nes_exercise.py without the repository's tests/ folder: one line, no traceback."""
    (tmp_path / "nes_exercise.py").write_text(Path(STUDENT).read_text())
    out = subprocess.run(
        [sys.executable, "nes_exercise.py", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 1 and out.stderr == (
        "nes_exercise.py: error: tests/nes_runner.py is missing (see the repository)\n"
    )


def test_centered_ranks_is_an_identical_copy_of_es_basic():
    import es_basic

    ex = load(STUDENT, "nes_copy")
    assert inspect.getsource(ex.centered_ranks) == inspect.getsource(es_basic.centered_ranks)


# Each wrong answer, caught at its part: (part, {function: [(old, new), ...]}, the message's words).
WRONG = [
    (1, {"initial_policy": [("np.zeros(shape)", "np.zeros(shape, dtype=int)")]}, "float zeros"),
    (
        1,
        {
            "initial_policy": [
                ("policy_shapes(obs_dim, n_out, hidden)", "policy_shapes(n_out, obs_dim, hidden)")
            ]
        },
        "not those of policy_shapes",
    ),
    (
        1,
        {"initial_policy": [("n_out, hidden).items()", "n_out).items()")]},
        "ignore its hidden argument",
    ),
    (
        1,
        {
            "initial_policy": [
                ("policy_shapes(obs_dim, n_out, hidden)", "policy_shapes(4, n_out, hidden)")
            ]
        },
        "ignore its obs_dim argument",
    ),
    (
        2,
        {
            "mirrored_pair": [
                (
                    "plus = {k: policy[k] + sigma * eps[k] for k in KEYS}\n"
                    "    minus = {k: policy[k] - sigma * eps[k] for k in KEYS}\n",
                    "plus = dict(policy)\n    minus = dict(policy)\n    for k in KEYS:\n"
                    "        plus[k] += sigma * eps[k]\n        minus[k] -= sigma * eps[k]\n",
                )
            ]
        },
        "the very arrays of the policy",
    ),
    (
        3,
        {"update_mean_policy": [("new[k] += alpha", "new[k] = policy[k] + alpha")]},
        "pair 2's term only",
    ),
    (
        2,
        {"mirrored_pair": [("return plus, minus", "return minus, plus")]},
        "plus and minus are swapped",
    ),
    (
        2,
        {"mirrored_pair": [("policy[k] + sigma * eps[k]", "policy[k] + eps[k]")]},
        "eps is not scaled",
    ),
    (
        2,
        {
            "mirrored_pair": [
                (
                    "eps = sample_noise(policy, seed)\n",
                    "eps = sample_noise(policy, seed)\n    plus = dict(policy)\n"
                    "    for k in KEYS:\n        plus[k] += sigma * eps[k]\n",
                )
            ]
        },
        "in place",
    ),
    (
        2,
        {
            "mirrored_pair": [
                (
                    "{k: policy[k] - sigma * eps[k] for k in KEYS}",
                    "{k: policy[k] - sigma * sample_noise(policy, seed + 1)[k] for k in KEYS}",
                )
            ]
        },
        "minus uses other noise",
    ),
    (3, {"update_mean_policy": [("* (fp - fm) *", "* (fm - fp) *")]}, "wrong sign"),
    (
        3,
        {"update_mean_policy": [("alpha / (2 * n * sigma)", "alpha / (n * sigma)")]},
        "divided by n sigma",
    ),
    (
        3,
        {"update_mean_policy": [("alpha / (2 * n * sigma)", "alpha / (4 * n * sigma)")]},
        "divided by 4 n sigma",
    ),
    (
        3,
        {"update_mean_policy": [("alpha / (2 * n * sigma)", "alpha / 2 * n * sigma")]},
        "with the parentheses",
    ),
    (
        3,
        {"update_mean_policy": [("alpha / (2 * n * sigma)", "alpha / (2 * n)")]},
        "1/sigma is missing",
    ),
    (3, {"update_mean_policy": [("(fp - fm)", "fp")]}, "only F_plus is used"),
    (3, {"update_mean_policy": [("(fp - fm)", "(fp + fm)")]}, "F_plus + F_minus is used"),
    (
        3,
        {"update_mean_policy": [("sample_noise(policy, seed)", "sample_noise(policy, seeds[0])")]},
        "first pair's noise",
    ),
    (
        3,
        {
            "update_mean_policy": [
                ("zip(seeds, F_plus, F_minus)", "zip(seeds[1:], F_plus[1:], F_minus[1:])")
            ]
        },
        "pair 0 is left out",
    ),
    (
        3,
        {"update_mean_policy": [("new = {k: policy[k].copy() for k in KEYS}", "new = policy")]},
        "changed the arrays",
    ),
    (
        4,
        {
            "evaluate_pair": [
                (
                    "return seed, rollout(plus, env_name, seed), rollout(minus, env_name, seed)",
                    "return seed, rollout(minus, env_name, seed), rollout(plus, env_name, seed)",
                )
            ]
        },
        "are swapped",
    ),
    (
        4,
        {"evaluate_pair": [("rollout(minus, env_name, seed)", "rollout(plus, env_name, seed)")]},
        "both episodes play plus",
    ),
    (
        4,
        {
            "evaluate_pair": [
                (
                    "rollout(plus, env_name, seed), rollout(minus, env_name, seed)",
                    "rollout(plus, env_name, 0), rollout(minus, env_name, 0)",
                )
            ]
        },
        "from env_seed 0",
    ),
    (
        4,
        {
            "evaluate_pair": [
                ("mirrored_pair(policy, seed, sigma)", "mirrored_pair(policy, seed + 1, sigma)")
            ]
        },
        "built from another seed",
    ),
    (
        4,
        {
            "evaluate_pair": [
                (
                    "return seed, rollout(plus, env_name, seed), rollout(minus, env_name, seed)",
                    "return seed, plus, minus",
                )
            ]
        },
        "never the weights",
    ),
    (
        4,
        {"evaluate_pair": [("return seed, rollout", "return 0, rollout")]},
        "the seed you were given",
    ),
    (5, {"train": [("F = centered_ranks(R)", "F = R")]}, "raw returns"),
    (
        5,
        {
            "train": [
                (
                    "F = centered_ranks(R)",
                    "F = np.concatenate([centered_ranks(R[:n_pairs]), "
                    "centered_ranks(R[n_pairs:])])",
                )
            ]
        },
        "ranked separately",
    ),
    (5, {"train": [("F[:n_pairs], F[n_pairs:]", "F[::2], F[1::2]")]}, "split wrongly"),
    (
        5,
        {"train": [("pair_seeds(seed, iteration, n_pairs)", "pair_seeds(seed, 0, n_pairs)")]},
        "the same seeds",
    ),
    (
        5,
        {"train": [("pair_seeds(seed, iteration, n_pairs)", "pair_seeds(0, iteration, n_pairs)")]},
        "ignore --seed",
    ),
    (
        5,
        {
            "train": [
                ("pair_seeds(seed, iteration, n_pairs)", "pair_seeds(seed, iteration + 1, n_pairs)")
            ]
        },
        "count from 0",
    ),
    (
        5,
        {
            "train": [
                (
                    "pairs = pair_seeds(seed, iteration, n_pairs)",
                    "pairs = list(map(int, np.random.randint(2**31, size=n_pairs)))",
                )
            ]
        },
        "global random",
    ),
    (
        5,
        {
            "train": [
                (
                    "futures = [executor.submit(evaluate_pair, mu, s, sigma, env_name)",
                    "futures = [executor.submit(evaluate_pair, mu, s, sigma, env_name).result()",
                ),
                ("results = [f.result() for f in futures]", "results = futures"),
            ]
        },
        "before every pair",
    ),
    (5, {"train": [("R.mean():8.2f", "F.mean():8.2f")]}, "it shows the fitness"),
    (
        5,
        {
            "train": [
                (
                    "results = [f.result() for f in futures]",
                    "results = [f.result() for f in futures][::-1]",
                ),
                ("seeds = [r[0] for r in results]", "seeds = pair_seeds(seed, iteration, n_pairs)"),
            ]
        },
        "matched to the wrong seeds",
    ),
    (
        5,
        {
            "train": [
                (
                    "evaluate_pair, mu, s, sigma, env_name)",
                    "evaluate_pair, mu, s, sigma=sigma, env_name=env_name)",
                )
            ]
        },
        "by position",
    ),
    (
        5,
        {"train": [("n_outputs(env.action_space), hidden)", "n_outputs(env.action_space))")]},
        "with train's hidden",
    ),
    (5, {"train": [('log(f"iteration', 'print(f"iteration')]}, "not print"),
    (
        5,
        {
            "train": [
                (
                    "mu = update_mean_policy(mu, seeds, F[:n_pairs], F[n_pairs:], sigma, alpha)",
                    "update_mean_policy(mu, seeds, F[:n_pairs], F[n_pairs:], sigma, alpha)",
                )
            ]
        },
        "another policy than the current mean",
    ),
    (
        2,
        {"mirrored_pair": [("policy[k] + sigma * eps[k]", "policy[k] + sigma * sigma * eps[k]")]},
        "by sigma twice",
    ),
    (
        2,
        {"mirrored_pair": [("{k: policy[k] - sigma * eps[k] for k in KEYS}", "dict(policy)")]},
        "minus is the mean",
    ),
    (
        2,
        {"mirrored_pair": [("sample_noise(policy, seed)", "sample_noise(policy, seed + 1)")]},
        "the seed you were given",
    ),
    (
        3,
        {"update_mean_policy": [("alpha / (2 * n * sigma)", "alpha * sigma / (2 * n)")]},
        "sigma multiplies",
    ),
    (
        3,
        {"update_mean_policy": [("alpha / (2 * n * sigma)", "alpha / sigma")]},
        "not divided by 2 n",
    ),
    (
        3,
        {"update_mean_policy": [("alpha / (2 * n * sigma)", "alpha / (2 * sigma)")]},
        "divided by 2 sigma only",
    ),
    (
        3,
        {"update_mean_policy": [("zip(seeds, F_plus", "zip(range(n), F_plus")]},
        "from the index i",
    ),
    (
        3,
        {"update_mean_policy": [("zip(seeds, F_plus", "zip(seeds[1:] + seeds[:1], F_plus")]},
        "another pair's noise",
    ),
    (
        4,
        {
            "evaluate_pair": [
                (
                    "rollout(plus, env_name, seed), rollout",
                    "rollout(minus, env_name, seed), rollout",
                )
            ]
        },
        "both episodes play minus",
    ),
    (
        4,
        {
            "evaluate_pair": [
                (
                    "rollout(plus, env_name, seed), rollout(minus, env_name, seed)",
                    "rollout(policy, env_name, seed), rollout(policy, env_name, seed)",
                )
            ]
        },
        "the mean policy",
    ),
    (
        4,
        {
            "evaluate_pair": [
                (
                    "rollout(plus, env_name, seed), rollout(minus, env_name, seed)",
                    "rollout(plus, env_name, seed + 1), rollout(minus, env_name, seed + 1)",
                )
            ]
        },
        "wrong env_seed",
    ),
    (
        4,
        {
            "evaluate_pair": [
                ("rollout(minus, env_name, seed)", "rollout(minus, env_name, seed + 1)")
            ]
        },
        "different env_seeds",
    ),
    (
        4,
        {"evaluate_pair": [("return seed, rollout", "return rollout")]},
        "return a tuple (seed, return_plus",
    ),
    (
        5,
        {
            "train": [
                (
                    "futures = [executor.submit(evaluate_pair, mu, s, sigma, env_name)",
                    "futures = [evaluate_pair(mu, s, sigma, env_name)",
                ),
                ("results = [f.result() for f in futures]", "results = futures"),
            ]
        },
        "nothing was submitted",
    ),
    (
        5,
        {
            "train": [
                (
                    "executor.submit(evaluate_pair, mu",
                    "executor.submit(lambda *a: evaluate_pair(*a), mu",
                )
            ]
        },
        "submit evaluate_pair itself",
    ),
    (
        5,
        {
            "train": [
                (
                    "pairs = pair_seeds(seed, iteration, n_pairs)",
                    "pairs = pair_seeds(seed, iteration, n_pairs + 1)",
                )
            ]
        },
        "18 calls of executor.submit for 3 iterations of 5 pairs",
    ),
    (
        5,
        {"train": [("mu, s, sigma, env_name)", "mu, s, 0.5, env_name)")]},
        "with train's sigma and env_name",
    ),
    (
        5,
        {"train": [("mu = update_mean_policy(", "mu = mu if iteration else update_mean_policy(")]},
        "update_mean_policy was called 1 times in 3 iterations",
    ),
    (
        5,
        {"train": [('log(f"iteration', 'iteration > 1 or log(f"iteration')]},
        "2 log lines for 3 iterations",
    ),
    (
        5,
        {"train": [("    return mu", "    return initial_policy(4, 2, hidden)")]},
        "return the mean policy after",
    ),
    (
        5,
        {
            "train": [
                ("        if target is not None and R.mean() >= target:\n            break\n", "")
            ]
        },
        "train goes on after iteration 1",
    ),
    (5, {"train": [("R.mean() >= target", "F.mean() >= target")]}, "before the mean return"),
    (
        5,
        {
            "train": [
                (
                    "mu = update_mean_policy(",
                    "mu = mu if target is not None and R.mean() >= target else update_mean_policy(",
                )
            ]
        },
        "from before the update",
    ),
    (
        5,
        {
            "train": [
                ('        log(f"iteration {iteration:3d}: mean return {R.mean():8.2f}")\n', ""),
                (
                    "            break\n",
                    "            break\n"
                    '        log(f"iteration {iteration:3d}: mean return {R.mean():8.2f}")\n',
                ),
            ]
        },
        "stops before it logs",
    ),
]


@pytest.mark.parametrize("part, replace, says", WRONG, ids=[f"part{w[0]}-{w[2]}" for w in WRONG])
def test_each_wrong_answer_is_caught_at_its_part_with_its_message(part, replace, says):
    got = outcome(solved(**replace))
    assert got[: part - 1] == [("passed", "")] * (part - 1), got  # the parts before it pass
    status, message = got[part - 1]
    assert status == "wrong" and says in message, message


@pytest.mark.parametrize(
    "replace",
    [
        {
            "train": [("F = centered_ranks(R)", "F = centered_ranks(R) + 1.0")]
        },  # a constant on every rank
        {
            "train": [("F[:n_pairs], F[n_pairs:]", "list(F[:n_pairs]), list(F[n_pairs:])")]
        },  # lists, not arrays
        {"initial_policy": [("np.zeros(shape)", "np.zeros(shape, dtype=np.float32) + 0.0")]},
        {
            "train": [('R.mean():8.2f}")', 'R.mean():.0f}", flush=True)')]
        },  # print's own keywords, rounded
        {
            "train": [
                (
                    "for f in futures]",
                    "for f in as_completed(futures)]",
                ),  # any order: matched by seed
                (
                    "    env = gym.make(env_name)",
                    "    from concurrent.futures import as_completed\n    env = gym.make(env_name)",
                ),
            ]
        },
    ],
)
def test_an_answer_that_changes_nothing_the_algorithm_computes_passes(replace):
    assert outcome(solved(**replace)) == [("passed", "")] * 5


def test_a_students_exception_shows_the_students_line():
    ex = solved(
        mirrored_pair=[
            ("eps = sample_noise(policy, seed)", "eps = sample_noise(policy, seed)['W3']")
        ]
    )
    status, message = nes_checker.run_part(ex, nes_checker.PARTS[1])
    assert status == "wrong" and "KeyError" in message and "nes_exercise.py, line" in message
    assert "sample_noise(policy, seed)['W3']" in message and "nes_checker" not in message


@pytest.mark.usefixtures(
    "fork_start"
)  # the solution, loaded from its path, reaches workers by fork
def test_the_solution_solves_cartpole_in_parallel_with_the_defaults():
    ex = solved()
    d = nes_runner.build_parser().parse_args([])  # the handout's defaults
    hyper = dict(iterations=d.iterations, n_pairs=d.pairs, sigma=d.sigma, alpha=d.alpha)
    with ProcessPoolExecutor(2) as executor:
        mu = ex.train(
            "CartPole-v1", executor, **hyper, target=d.target_return, log=lambda line: None
        )
    assert ex.evaluate_mean(mu, "CartPole-v1", 100).mean() >= 475


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seed", "-1"], "--seed: must be finite, >= 0; got -1"),
        (["--env", "CartPole-v7"], "doesn't exist"),
        (["--env", "HalfCheetah-v2"], "mujoco"),  # gymnasium 1.1: mujoco_py; 1.2 on: moved
        (["--sigma", "0"], "--sigma: must be finite, > 0"),
        (["--sigma", "nan"], "--sigma: must be finite, > 0"),
        (["--alpha", "inf"], "--alpha: must be finite, > 0"),
        (["--iterations", "0"], "--iterations: must be finite, > 0"),
        (["--iterations", "1e3"], "--iterations: invalid int value"),
        (["--workers", "0"], "--workers: must be finite, > 0"),
    ],
)
def test_bad_input_gets_one_line(argv, message, tmp_path):
    out = subprocess.run(
        [sys.executable, SOLUTION, *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    ours = [line for line in out.stderr.splitlines() if line.startswith("nes_exercise.py")]
    assert (
        out.returncode == 2
        and len(ours) == 1
        and message in ours[0]
        and "Traceback" not in out.stderr
    ), out.stderr
    assert (
        out.stderr.strip().splitlines()[-1] == ours[0] and os.listdir(tmp_path) == []
    )  # after gymnasium's
    # own deprecation warning, for a retired version such as HalfCheetah-v2


def test_a_mean_policy_that_becomes_nan_stops_with_a_message():
    out = subprocess.run(
        [
            sys.executable,
            SOLUTION,
            "--sigma",
            "1e-320",
            "--iterations",
            "2",
            "--pairs",
            "2",
            "--workers",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        out.returncode == 1 and "Traceback" not in out.stderr and "mean policy:" not in out.stdout
    )
    assert out.stderr.strip().splitlines()[-1] == (
        "nes_exercise.py: error: the mean became NaN or inf: alpha / sigma too large"
    )


@POSIX_ONLY
@pytest.mark.parametrize(
    "how",
    [
        "to the script",
        "to its process group",
        "started in the background",
        "SIGTERM",
        "twice",
        "kill -9",
        "a worker killed",
    ],
)
def test_a_stopped_training_ends_with_no_worker_left(how):
    """Ctrl-C in a terminal signals the whole process group (the workers ignore it); a job started
    in the background begins with SIGINT ignored; SIGTERM stops it the same way: the run ends after
    its iteration's line, status 130. A second Ctrl-C ends it at once; after kill -9 the workers
    end on their own; a worker killed ends the run with one line."""
    background = (
        (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        if how == "started in the background"
        else None
    )
    argv = [SOLUTION, "--iterations", "100000", "--target-return", "1e9", "--workers", "2"]
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=background,
    )
    try:
        assert proc.stdout.readline().startswith("iteration   0:")  # training has started
        started = time.time()  # a worker starts when a job waits for one; under spawn and
        for _ in proc.stdout if multiprocessing.get_start_method() != "fork" else ():
            if time.time() > started + 3:  # forkserver, it ignores Ctrl-C once it is up
                break
        if how == "to its process group":
            os.killpg(proc.pid, signal.SIGINT)
        elif how == "a worker killed":
            os.kill(workers_in(proc.pid)[0], signal.SIGKILL)
        elif how == "twice":
            proc.send_signal(signal.SIGINT)
            proc.send_signal(signal.SIGINT)
        else:
            proc.send_signal(
                {"SIGTERM": signal.SIGTERM, "kill -9": signal.SIGKILL}.get(how, signal.SIGINT)
            )
        _, err = proc.communicate(timeout=20)
        if how == "kill -9":
            assert proc.returncode == -signal.SIGKILL
        elif how == "a worker killed":
            assert proc.returncode == 1, err
            assert err == "nes_exercise.py: error: a worker process died\n"
        elif how == "twice":
            assert proc.returncode == 130 and "Traceback" not in err, err
        else:
            assert proc.returncode == 130 and err == "nes_exercise.py: interrupted\n", err
        for _ in range(40):  # no worker process is left behind
            leftover = left_in_session(proc.pid)
            if not leftover.strip():
                break
            time.sleep(0.25)
        assert leftover.strip() == ""
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # only if the test failed: nothing left otherwise
        proc.wait()


def test_three_iterations_on_a_simulated_windows(tmp_path):
    """No fork, no signal.pthread_sigmask, workers started by spawn (tests/site/)."""
    out = subprocess.run(
        [sys.executable, SOLUTION, "--iterations", "3", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=with_start_method("spawn", SIMULATED_WINDOWS="1"),
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.count("iteration") == 3 and "mean policy:" in out.stdout
