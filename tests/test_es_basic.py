"""Tests of es_basic.py: the math, the behaviour of a run, the command line and its bad inputs."""

import contextlib
import glob
import itertools
import json
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import (
    POSIX_ONLY,
    ROOT,
    left_in_session,
    refused,
    workers_in,
)

import es_basic as es


def cli(*argv):
    script = [sys.executable, os.path.join(ROOT, "es_basic.py")]
    return subprocess.run([*script, *argv], capture_output=True, text=True, timeout=240, cwd=ROOT)


def config(*flags, **kw):
    argv = list(flags)
    for key, value in kw.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return es.configure(es.parse(argv))


def rows(run_dir) -> list:
    header, *lines = Path(run_dir, "progress.csv").read_text().splitlines()
    return [dict(zip(header.split(","), line.split(","))) for line in lines]


def untimed(run_dir) -> list:  # progress.csv without the columns of the machine's pace
    timing = ("wall_time_s", "steps_per_s")
    return [{k: v for k, v in row.items() if k not in timing} for row in rows(run_dir)]


# ---------------------------------------------------------------- the math

C = np.linspace(-1.0, 1.0, 10)


def quadratic(theta):  # f(theta) = -|theta - c|^2, gradient -2 (theta - c)
    return -np.sum((theta - C) ** 2, axis=-1)


def signed(eps):  # the mirrored members' noise: [eps_1, -eps_1, eps_2, -eps_2, ...]
    return np.repeat(eps, 2, axis=0) * np.tile([1.0, -1.0], len(eps))[:, None]


def estimate(theta, n, sigma, mirror, rng):
    """One ES gradient estimate from n evaluations of the quadratic with raw fitness."""
    eps = rng.standard_normal((n // 2 if mirror else n, theta.size))
    F = quadratic(theta + sigma * (signed(eps) if mirror else eps))
    return es.es_gradient(eps, F, sigma, mirror)


def test_estimator_matches_the_analytic_gradient():
    theta = np.zeros(10)
    g = estimate(theta, 20000, 0.05, True, np.random.default_rng(0))
    true = -2 * (theta - C)
    assert g @ true / (np.linalg.norm(g) * np.linalg.norm(true)) > 0.99
    np.testing.assert_allclose(g, true, atol=0.15)


def test_mirrored_sampling_lowers_the_variance_of_the_estimator():
    theta, rng = np.zeros(10), np.random.default_rng(1)
    mirrored = np.array([estimate(theta, 100, 0.05, True, rng) for _ in range(300)])
    plain = np.array([estimate(theta, 100, 0.05, False, rng) for _ in range(300)])
    assert mirrored.var(axis=0).sum() < 0.1 * plain.var(axis=0).sum()


def test_fitness_shaping_by_hand():
    r = es.centered_ranks(np.array([3.0, -1.0, 10.0, 2.5, 7.0]))
    np.testing.assert_allclose(r, [0.0, -0.5, 0.5, -0.25, 0.25])
    assert es.centered_ranks(np.random.default_rng(0).normal(size=101)).sum() == pytest.approx(0.0)
    # equal returns share their rank (2.5, 0, 2.5, 1 over 3, minus 0.5): an equal pair takes no step
    r = es.centered_ranks(np.array([5.0, 1.0, 5.0, 3.0]))
    np.testing.assert_allclose(r, [1 / 3, -0.5, 1 / 3, -1 / 6])
    tie = es.centered_ranks(np.array([9.0, 9.0]))
    np.testing.assert_array_equal(es.es_gradient(np.ones((1, 3)), tie, 0.1, True), 0.0)
    x = np.array([1.0, 2.0, 4.0])
    z = es.shape_fitness(x, "standardize")
    assert z.mean() == pytest.approx(0.0) and z.std() == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_array_equal(es.shape_fitness(x, "none"), x)
    np.testing.assert_array_equal(es.shape_fitness(x, "rank"), [-0.5, 0.0, 0.5])


def test_the_rank_step_can_point_against_the_gradient():
    # docs/es_basic.md's example: R(x) = -x below 3 and 10**6 above, sigma = 1, 50 mirrored pairs
    # at x = 0. dJ/dx = -Phi(3) + 3 phi(3) + 10**6 phi(3) = +4431; the mean rank step is -0.28.
    phi = math.exp(-4.5) / math.sqrt(2 * math.pi)
    grad = -0.5 * (1 + math.erf(3 / math.sqrt(2))) + 3 * phi + 1e6 * phi
    rng = np.random.default_rng(0)
    steps = []
    for _ in range(1000):
        eps = rng.standard_normal((50, 1))
        x = signed(eps).ravel()
        F = es.centered_ranks(np.where(x < 3, -x, 1e6))
        steps.append(es.es_gradient(eps, F, 1.0, True)[0])
    assert round(grad) == 4431 and round(np.mean(steps), 2) == -0.28


def test_the_gradient_estimates_by_hand():
    """Eqs. (3) and (5) for two pairs, term by term; Eq. (5) is Eq. (3) over the signed members."""
    eps, F, sigma = np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([0.5, -0.5, -1 / 6, 1 / 6]), 0.1
    by_hand = ((0.5 - -0.5) * eps[0] + (-1 / 6 - 1 / 6) * eps[1]) / (4 * sigma)
    np.testing.assert_allclose(es.es_gradient(eps, F, sigma, True), by_hand)
    plain = (F[:2] @ eps + F[2:] @ eps) / (4 * sigma)
    np.testing.assert_allclose(es.es_gradient(np.vstack([eps, eps]), F, sigma, False), plain)
    rng = np.random.default_rng(2)
    eps, F = rng.normal(size=(3, 4)), rng.normal(size=6)
    mirrored = es.es_gradient(eps, F, 0.1, True)
    np.testing.assert_allclose(mirrored, es.es_gradient(signed(eps), F, 0.1, False))


def test_es_drives_a_quadratic_to_its_optimum():
    theta, rng = np.full(10, 3.0), np.random.default_rng(3)
    start = np.linalg.norm(theta - C)
    for _ in range(300):
        eps = rng.standard_normal((10, 10))
        F = es.centered_ranks(quadratic(theta + 0.1 * signed(eps)))
        theta = theta + 0.1 * es.es_gradient(eps, F, 0.1, True)
    assert np.linalg.norm(theta - C) < 0.05 * start


def test_policy_maps_flat_parameters_to_actions():
    theta = np.arange(4 * 3 + 3 + 3 * 2 + 2, dtype=float)
    (W1, b1), (W2, b2) = es.unflatten(theta, [4, 3, 2])
    assert W1.shape == (3, 4) and b1.shape == (3,) and W2.shape == (2, 3) and b2[-1] == theta[-1]
    assert np.shares_memory(W1, theta)  # views, not copies
    box = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
    squash = es.unflatten(np.array([1e6, -1e6, 0.0, 0.0]), [1, 2])  # y = (1e6, -1e6) obs
    np.testing.assert_allclose(es.act(squash, np.ones(1), "tanh", box), [2.0, 0.0])
    np.testing.assert_allclose(es.act(squash, np.zeros(1), "tanh", box), [0.0, 0.5])  # the middle
    assert es.act(squash, np.array([0.5]), "tanh", gym.spaces.Discrete(2)) == 0  # argmax of y
    assert es.act(squash, np.array([-0.5]), "tanh", gym.spaces.Discrete(2)) == 1
    hidden = es.unflatten(np.array([-1.0, 0.0, 1.0, 0.5]), [1, 1, 1])  # h = f(-obs), y = h + 0.5
    line, two = gym.spaces.Box(-10.0, 10.0, (1,)), np.array([2.0])
    np.testing.assert_allclose(es.act(hidden, two, "relu", line), 10 * np.tanh(0.5))
    np.testing.assert_allclose(es.act(hidden, two, "tanh", line), 10 * np.tanh(np.tanh(-2.0) + 0.5))


# ---------------------------------------------------------------- behaviour of a run


def run(tmp_path, *flags, **kw):
    defaults = dict(env="CartPole-v1", iterations=4, population=10, eval_every=2, eval_episodes=3)
    return es.train(config(*flags, **{**defaults, "seed": 4, "out_dir": tmp_path, **kw}))


def test_cartpole_improves_within_a_tiny_budget(tmp_path):
    result = run(tmp_path, iterations=15, population=50, eval_every=15, eval_episodes=10)
    log = rows(result["run_dir"])
    assert float(log[0]["return_mean"]) < 20  # theta_0 = 0 always pushes left: about 10 steps
    assert float(log[-1]["eval_return_mean"]) > 4 * float(log[0]["return_mean"])


def test_workers_give_the_same_numbers_as_serial(tmp_path):
    serial, parallel = run(tmp_path / "a", workers=1), run(tmp_path / "b", workers=3)
    np.testing.assert_array_equal(serial["theta"], parallel["theta"])
    assert untimed(serial["run_dir"]) == untimed(parallel["run_dir"])
    assert not np.allclose(serial["theta"], run(tmp_path / "c", seed=5)["theta"])


def test_two_iterations_of_train_redone_by_hand(tmp_path):
    """The members' returns, ranks, mirrored estimate and step with weight decay (Eq. 6), from the
    public functions: the bits train() gives, and progress.csv's rows (the elite: members whose
    return beats the population's mean)."""
    flags = ["--weight-decay", "0.5"]
    result = run(tmp_path, *flags, iterations=2, population=8, eval_every=100)
    args = config(*flags, env="CartPole-v1", population=8, seed=4)
    theta, steps = np.zeros(result["theta"].size), 0
    log = rows(result["run_dir"])
    for t, row in enumerate(log):
        R, lengths = np.array([es.member_episode(args, theta, t, j) for j in range(8)]).T
        steps += lengths.sum()
        assert float(row["return_mean"]) == R.mean() and float(row["return_max"]) == R.max()
        assert int(row["env_steps"]) == steps and int(row["episodes"]) == 8 * (t + 1)
        assert int(row["elite"]) == (R.mean() < R).sum()
        eps = np.stack([es.sample_eps(4, t, i, theta.size) for i in range(4)])
        g = es.es_gradient(eps, es.centered_ranks(R), args.sigma, True)
        theta = theta + args.alpha * g - args.alpha * 0.5 * theta
    np.testing.assert_array_equal(result["theta"], theta)
    assert len(log) == 2 and 0 < int(log[0]["elite"]) < 8


def test_a_mirrored_pair_plays_theta_plus_and_minus_sigma_eps_on_one_environment_seed(monkeypatch):
    played = []  # (theta, environment seed) of each episode

    def rollout(env, theta, args, seeds):
        played.append((theta, int(seeds.integers(2**31))))
        return 0.0, 1

    monkeypatch.setattr(es, "rollout", rollout)
    monkeypatch.setattr(es, "new_env", lambda env_id: None)
    args, theta = es.parse(["--sigma", "0.5", "--seed", "2"]), np.ones(3)
    for j in range(4):
        es.member_episode(args, theta, 7, j)
    for j, (member, seed) in enumerate(played):  # +eps_0, -eps_0, +eps_1, -eps_1
        i, sign = j // 2, (-1) ** j
        np.testing.assert_array_equal(member, theta + sign * 0.5 * es.sample_eps(2, 7, i, 3))
        assert seed == int(es.stream(2, es.ENV, 7, i).integers(2**31))
    assert played[0][1] != played[2][1]
    played.clear()
    args.mirror = False
    es.member_episode(args, theta, 7, 1)  # no pairs: member 1 plays +eps_1
    np.testing.assert_array_equal(played[0][0], theta + 0.5 * es.sample_eps(2, 7, 1, 3))
    played.clear()
    es.eval_episode(args, theta, 3, 1)  # theta itself, on a stream of the evaluations' own
    ((member, seed),) = played
    assert member is theta and seed == int(es.stream(2, es.EVAL, 3, 1).integers(2**31))


def test_each_option_of_the_update_changes_it(tmp_path):
    """--no-mirror, --fitness and --weight-decay reach the update, here of a linear policy on
    continuous actions."""
    options = [], ["--no-mirror"], ["--fitness", "none"], ["--fitness", "standardize"]
    thetas = []
    for i, flags in enumerate([*options, ["--weight-decay", "0.5"]]):
        kw = dict(env="Pendulum-v1", iterations=2, population=4, eval_episodes=1)
        result = run(tmp_path / str(i), *flags, "--hidden", "", **kw)
        assert result["status"] == "done" and result["theta"].size == (3 + 1) * 1
        assert result["env_steps"] == 2 * 4 * 200  # Pendulum's episodes last 200 steps
        thetas.append(result["theta"])
    for a, b in itertools.combinations(thetas, 2):
        assert not np.allclose(a, b)


def test_a_stop_ends_the_run_after_its_iteration(tmp_path, monkeypatch):
    """Ctrl-C during the evaluation of iteration 4: that iteration is finished and logged, then
    the run ends; policy.npz holds the theta of iteration 4, the same bits as a run of 4."""
    four = run(tmp_path / "four", iterations=4, eval_every=100)
    evaluation = es.eval_episode

    def interrupted(args, theta, t, k):
        if t == 4 and k == 0:
            es.on_stop(signal.SIGINT, None)  # what Ctrl-C calls
        return evaluation(args, theta, t, k)

    monkeypatch.setattr(es, "eval_episode", interrupted)
    half = run(tmp_path / "half", iterations=8, eval_every=4)
    es.STOP.clear()
    assert half["status"] == "interrupted" and half["iteration"] == 4
    assert [r["iteration"] for r in rows(half["run_dir"])] == ["1", "2", "3", "4"]
    with np.load(os.path.join(half["run_dir"], "policy.npz"), allow_pickle=False) as f:
        np.testing.assert_array_equal(f["theta"], four["theta"])
        assert int(f["iteration"]) == 4
    assert os.path.getsize(os.path.join(half["run_dir"], "progress.png")) > 1000


def test_a_diverged_run_keeps_the_last_good_policy_and_main_restores_the_handlers(tmp_path, capsys):
    """NaN or inf: exit status 1 and theta_0 kept. main() leaves the signal handlers as it found
    them, so that a notebook's own Ctrl-C works again."""
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    argv = "--alpha 1e308 --fitness none --iterations 3".split() + ["--out-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as stop:
        es.main(argv)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    assert stop.value.code == 1 and "diverged after iteration 0" in capsys.readouterr().err
    (run_dir,) = glob.glob(str(tmp_path / "*"))
    with np.load(os.path.join(run_dir, "policy.npz"), allow_pickle=False) as f:
        assert int(f["iteration"]) == 0 and not f["theta"].any()  # theta_0, the last finite one


# ---------------------------------------------------------------- the command line


def test_a_command_line_run_its_run_directory_its_command_and_play(tmp_path):
    flags = "--iterations 3 --population 6 --eval-every 1 --eval-episodes 2 --workers 2".split()
    out = cli(*flags, "--hidden", "", "--out-dir", str(tmp_path / "a"))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    (run_dir,) = glob.glob(str(tmp_path / "a" / "CartPole-v1__es_basic__0__*"))
    cfg = json.loads(Path(run_dir, "config.json").read_text())
    assert cfg["sigma"] == es.GENERIC["sigma"] and cfg["population"] == 6 and cfg["hidden"] == []
    assert cfg["numpy"] == np.__version__ and cfg["python"] == platform.python_version()
    assert cfg["gymnasium"] == gym.__version__ and cfg["mujoco"] is None  # CartPole loads no MuJoCo
    header = Path(run_dir, "progress.csv").read_text().splitlines()[0].split(",")
    shared = "iteration episodes env_steps wall_time_s return_mean return_std return_min"
    shared += " return_max eval_return_mean eval_return_std steps_per_s"  # every script's first
    assert header[:11] == shared.split() and header[-1] == "elite" and len(rows(run_dir)) == 3
    assert os.path.getsize(os.path.join(run_dir, "progress.png")) > 1000
    assert out.stdout.count("\nit ") == 3 and "ETA" in out.stdout
    # config.json's command makes the same run again (here into another folder)
    assert cfg["command"].startswith("python es_basic.py ") and "--hidden ''" in cfg["command"]
    again = cli(*shlex.split(cfg["command"])[2:], "--out-dir", str(tmp_path / "b"))
    assert again.returncode == 0, again.stderr
    (second,) = glob.glob(str(tmp_path / "b" / "*"))
    assert untimed(second) == untimed(run_dir)
    # the policy names its environment and layers: no flag plays it on others
    played = cli(
        "--play", run_dir, "--episodes", "2", "--video", "--env", "Pendulum-v1", "--hidden", "64,64"
    )
    assert played.returncode == 0, played.stderr
    assert "CartPole-v1: mean return" in played.stdout and "over 2 episodes" in played.stdout
    assert Path(run_dir, "video", "CartPole-v1.gif").read_bytes()[:6] == b"GIF89a"


def test_help_shows_the_papers_symbols_the_defaults_and_the_presets(capsys):
    for env_id, iterations in (("CartPole-v1", 100), ("LunarLander-v3", 500)):
        with pytest.raises(SystemExit):
            es.parse(["--env", env_id, "--help"])
        out = capsys.readouterr().out
        assert f"updates of theta (default: {iterations})" in " ".join(out.split())  # --env's
    assert "σ" in out and "α" in out and "--no-mirror" in out
    table = out[out.index("presets") :].splitlines()
    assert table[1].split()[:3] == ["--env", "sigma", "alpha"]
    assert table[3].split()[:4] == ["LunarLander-v3", "0.1", "0.03", "200"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env", "CartPol-v1"], "Did you mean: `CartPole`?"),
        (["--env", "Blackjack-v1"], "takes Box observations"),
        (["--sigma", "nan"], "--sigma: must be > 0"),
        (["--population", "1", "--no-mirror"], "--population: must be >= 2"),
        (["--population", "7"], "must be even with mirrored sampling"),
        (["--hidden", "16,x"], "--hidden: invalid sizes value"),
        (["--play", "/nonexistent/run"], "cannot read the policy '/nonexistent/run/policy.npz'"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, argv, message):
    assert message in refused(es, tmp_path, *argv)


def test_an_output_folder_that_cannot_be_written_is_one_line(tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(SystemExit) as stop:
        es.main(["--out-dir", str(tmp_path / "a_file" / "runs")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("es_basic.py: error: cannot write")
    assert len(err.strip().splitlines()) == 1 and os.listdir(tmp_path) == ["a_file"]


# ---------------------------------------------------------------- stops (the whole process group)


@contextlib.contextmanager
def long_run(tmp_path):
    """A long two-worker run in a session of its own, yielded
    once iteration 3 is logged; afterwards, if the test failed, nothing of its session is left."""
    argv = ["--iterations", "100000", "--target-return", "1e9", "--workers", "2"]
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "es_basic.py"), *argv, "--out-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        for line in proc.stdout:
            if line.startswith("it ") and int(line.split()[1]) >= 3:
                break
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def nothing_left(sid: int, seconds=5) -> bool:  # the workers end once they see their master's end
    deadline = time.time() + seconds
    while left_in_session(sid) and time.time() < deadline:
        time.sleep(0.2)
    return left_in_session(sid) == ""


def kept_files(tmp_path):
    """The run directory's files after a stop: the log, the last logged policy, the plot."""
    (run_dir,) = glob.glob(str(tmp_path / "*"))
    with np.load(os.path.join(run_dir, "policy.npz"), allow_pickle=False) as f:
        assert int(f["iteration"]) == len(rows(run_dir)) >= 3
    assert os.path.isfile(os.path.join(run_dir, "progress.png"))
    assert not glob.glob(os.path.join(run_dir, "*.tmp"))


@POSIX_ONLY
@pytest.mark.parametrize(
    "stop", ["Ctrl-C", "a second Ctrl-C", "a killed worker", "a killed master"]
)
def test_a_stop_of_a_run_with_workers(tmp_path, stop):
    """Ctrl-C in a terminal reaches the whole process group: the workers ignore it, the master ends
    the run after its iteration (status 130), or at once on a second Ctrl-C. A worker killed mid-run
    (out of memory, kill -9): one line, status 1. A master killed with kill -9 cannot stop its
    workers (or the forkserver, or the resource tracker): they notice and end. No traceback, no
    process left; after a Ctrl-C or a dead worker, the log, the last logged policy and the plot.
    Under the suite's start method (.ci/run runs it under each)."""
    with long_run(tmp_path) as proc:
        if stop == "a killed worker":
            os.kill(workers_in(proc.pid)[0], signal.SIGKILL)
        elif stop == "a killed master":
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGINT)
            if stop == "a second Ctrl-C":
                os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=2 if stop == "a second Ctrl-C" else 60)
        if stop != "a killed worker":
            assert nothing_left(proc.pid), left_in_session(proc.pid)
    status = {"a killed worker": 1, "a killed master": -signal.SIGKILL}.get(stop, 130)
    assert proc.returncode == status and "Traceback" not in err, err
    if stop == "a killed worker":
        (line,) = err.strip().splitlines()
        assert "a worker process died" in line
    if stop == "Ctrl-C":
        assert "interrupted after" in err
    if stop in ("Ctrl-C", "a killed worker"):
        kept_files(tmp_path)
