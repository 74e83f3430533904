"""Tests of es_basic.py: the math, the behaviour of a run, the command line and its bad inputs."""

import contextlib
import glob
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
    START_METHODS,
    left_in_session,
    processes_in,
    refused,
    with_start_method,
    workers_in,
)

import es_basic as es


def cli(*argv, timeout=240, **popen):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "es_basic.py"), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        **popen,
    )


def config(*flags, **kw):
    argv = list(flags)
    for key, value in kw.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return es.configure(es.parse(argv))


def rows(run_dir) -> list:
    header, *lines = Path(run_dir, "progress.csv").read_text().splitlines()
    return [dict(zip(header.split(","), line.split(","))) for line in lines]


# ---------------------------------------------------------------- the math

C = np.linspace(-1.0, 1.0, 10)


def quadratic(theta):  # f(theta) = -|theta - c|^2, gradient -2 (theta - c)
    return -np.sum((theta - C) ** 2, axis=-1)


def estimate(theta, n, sigma, mirror, rng):
    """One ES gradient estimate from n evaluations of the quadratic with raw fitness."""
    eps = rng.standard_normal((n // 2 if mirror else n, theta.size))
    members = np.repeat(eps, 2, axis=0) * np.tile([1.0, -1.0], n // 2)[:, None] if mirror else eps
    F = quadratic(theta + sigma * members)
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


def test_centered_ranks_span_minus_half_to_half_and_sum_to_zero():
    r = es.centered_ranks(np.array([3.0, -1.0, 10.0, 2.5, 7.0]))
    np.testing.assert_allclose(r, [0.0, -0.5, 0.5, -0.25, 0.25])
    assert es.centered_ranks(np.random.default_rng(0).normal(size=101)).sum() == pytest.approx(0.0)


def test_equal_returns_share_their_rank():
    r = es.centered_ranks(np.array([5.0, 1.0, 5.0, 3.0]))
    np.testing.assert_allclose(
        r, [1 / 3, -0.5, 1 / 3, -1 / 6]
    )  # ranks 2.5, 0, 2.5, 1 over 3, minus 0.5
    eps = np.ones((1, 3))
    np.testing.assert_array_equal(
        es.es_gradient(eps, es.centered_ranks(np.array([9.0, 9.0])), 0.1, True), 0.0
    )


def test_the_rank_step_can_point_against_the_gradient():
    # docs/es_basic.md's example: R(x) = -x below 3 and 10**6 above, sigma = 1, 50 mirrored pairs
    # at x = 0. dJ/dx = -Phi(3) + 3 phi(3) + 10**6 phi(3) = +4431; the mean rank step is -0.28.
    phi = math.exp(-4.5) / math.sqrt(2 * math.pi)
    grad = -0.5 * (1 + math.erf(3 / math.sqrt(2))) + 3 * phi + 1e6 * phi
    rng = np.random.default_rng(0)
    steps = []
    for _ in range(1000):
        eps = rng.standard_normal((50, 1))
        x = np.ravel(np.column_stack([eps, -eps]))  # [x_1+, x_1-, x_2+, ...]
        F = es.centered_ranks(np.where(x < 3, -x, 1e6))
        steps.append(es.es_gradient(eps, F, 1.0, True)[0])
    assert round(grad) == 4431 and round(np.mean(steps), 2) == -0.28


def test_fitness_shaping_options():
    x = np.array([1.0, 2.0, 4.0])
    z = es.shape_fitness(x, "standardize")
    assert z.mean() == pytest.approx(0.0) and z.std() == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_array_equal(es.shape_fitness(x, "none"), x)
    np.testing.assert_array_equal(es.shape_fitness(x, "rank"), [-0.5, 0.0, 0.5])


def test_an_update_computed_by_hand():
    """Eqs. (3) and (5) for two pairs, written out term by term."""
    eps, F, sigma = np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([0.5, -0.5, -1 / 6, 1 / 6]), 0.1
    by_hand = ((0.5 - -0.5) * eps[0] + (-1 / 6 - 1 / 6) * eps[1]) / (4 * sigma)
    np.testing.assert_allclose(es.es_gradient(eps, F, sigma, True), by_hand)
    np.testing.assert_allclose(
        es.es_gradient(np.vstack([eps, eps]), F, sigma, False),
        (F[:2] @ eps + F[2:] @ eps) / (4 * sigma),
    )


def test_mirrored_gradient_equals_the_plain_formula_over_the_signed_population():
    rng = np.random.default_rng(2)
    eps, F = rng.normal(size=(3, 4)), rng.normal(size=6)
    signed = np.repeat(eps, 2, axis=0) * np.array([1, -1, 1, -1, 1, -1])[:, None]
    np.testing.assert_allclose(
        es.es_gradient(eps, F, 0.1, True), es.es_gradient(signed, F, 0.1, False)
    )


def test_es_drives_a_quadratic_to_its_optimum():
    theta, rng = np.full(10, 3.0), np.random.default_rng(3)
    start = np.linalg.norm(theta - C)
    for _ in range(300):
        eps = rng.standard_normal((10, 10))
        F = es.centered_ranks(
            quadratic(theta + 0.1 * np.repeat(eps, 2, axis=0) * np.tile([1.0, -1.0], 10)[:, None])
        )
        theta = theta + 0.1 * es.es_gradient(eps, F, 0.1, True)
    assert np.linalg.norm(theta - C) < 0.05 * start


def test_noise_is_regenerated_from_its_name():
    np.testing.assert_array_equal(es.sample_eps(3, 7, 2, 5), es.sample_eps(3, 7, 2, 5))
    assert not np.allclose(es.sample_eps(3, 7, 2, 5), es.sample_eps(3, 7, 3, 5))
    assert not np.allclose(es.sample_eps(3, 7, 2, 5), es.sample_eps(3, 8, 2, 5))


def test_policy_maps_flat_parameters_to_actions():
    sizes = [4, 3, 2]
    theta = np.arange(4 * 3 + 3 + 3 * 2 + 2, dtype=float)
    (W1, b1), (W2, b2) = es.unflatten(theta, sizes)
    assert W1.shape == (3, 4) and b1.shape == (3,) and W2.shape == (2, 3) and b2[-1] == theta[-1]
    assert np.shares_memory(W1, theta)  # views, not copies
    box = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
    squash = es.unflatten(np.array([1e6, -1e6, 0.0, 0.0]), [1, 2])  # y = (1e6, -1e6) obs
    np.testing.assert_allclose(
        es.act(squash, np.ones(1), "tanh", box), [2.0, 0.0]
    )  # tanh onto [low, high]
    np.testing.assert_allclose(
        es.act(squash, np.zeros(1), "tanh", box), [0.0, 0.5]
    )  # y = 0: the middle
    assert (
        es.act(squash, np.array([0.5]), "tanh", gym.spaces.Discrete(2)) == 0
    )  # argmax of the logits
    assert es.act(squash, np.array([-0.5]), "tanh", gym.spaces.Discrete(2)) == 1
    hidden = es.unflatten(np.array([-1.0, 0.0, 1.0, 0.5]), [1, 1, 1])  # h = f(-obs), y = h + 0.5
    line = gym.spaces.Box(-10.0, 10.0, (1,))
    np.testing.assert_allclose(es.act(hidden, np.array([2.0]), "relu", line), 10 * np.tanh(0.5))
    np.testing.assert_allclose(
        es.act(hidden, np.array([2.0]), "tanh", line), 10 * np.tanh(np.tanh(-2.0) + 0.5)
    )


# ---------------------------------------------------------------- behaviour of a run


def run(tmp_path, *flags, **kw):
    kw = {
        "env": "CartPole-v1",
        "iterations": 4,
        "population": 10,
        "eval_every": 2,
        "eval_episodes": 3,
        "seed": 4,
        "out_dir": tmp_path,
        **kw,
    }
    return es.train(config(*flags, **kw))


def test_cartpole_improves_within_a_tiny_budget(tmp_path):
    result = run(tmp_path, iterations=15, population=50, eval_every=15, eval_episodes=10)
    log = rows(result["run_dir"])
    assert float(log[0]["return_mean"]) < 20  # theta_0 = 0 always pushes left: about 10 steps
    assert float(log[-1]["eval_return_mean"]) > 4 * float(log[0]["return_mean"])


def test_workers_give_the_same_numbers_as_serial(tmp_path):
    serial, parallel = run(tmp_path / "a", workers=1), run(tmp_path / "b", workers=3)
    np.testing.assert_array_equal(serial["theta"], parallel["theta"])
    timing = ("wall_time_s", "steps_per_s")
    assert [{k: v for k, v in r.items() if k not in timing} for r in rows(serial["run_dir"])] == [
        {k: v for k, v in r.items() if k not in timing} for r in rows(parallel["run_dir"])
    ]
    assert not np.allclose(serial["theta"], run(tmp_path / "c", seed=5)["theta"])


def test_the_log_holds_the_returns_of_the_population_and_its_elite(tmp_path):
    """The first row, recomputed here episode by episode: returns, lengths and the elite column
    (members whose return beats the population's mean)."""
    result = run(tmp_path, iterations=1, population=8)
    args = config(env="CartPole-v1", population=8, seed=4)
    R, lengths = np.array(
        [es.member_episode(args, np.zeros(result["theta"].size), 0, j) for j in range(8)]
    ).T
    (row,) = rows(result["run_dir"])
    assert float(row["return_mean"]) == R.mean() and float(row["return_max"]) == R.max()
    assert int(row["env_steps"]) == lengths.sum() and int(row["episodes"]) == 8
    assert int(row["elite"]) == (R.mean() < R).sum() and 0 < int(row["elite"]) < 8


def test_members_are_theta_plus_and_minus_sigma_eps(monkeypatch):
    played = []
    monkeypatch.setattr(
        es, "rollout", lambda env, theta, args, seeds, frames=None: played.append(theta) or (0.0, 1)
    )
    monkeypatch.setattr(es, "new_env", lambda env_id: None)
    args = es.parse(["--sigma", "0.5", "--seed", "2"])
    theta, eps = np.ones(3), [es.sample_eps(2, 7, i, 3) for i in range(2)]
    for j in range(4):
        es.member_episode(args, theta, 7, j)
    np.testing.assert_array_equal(
        played,
        [theta + 0.5 * eps[0], theta - 0.5 * eps[0], theta + 0.5 * eps[1], theta - 0.5 * eps[1]],
    )
    played.clear()
    args.mirror = False
    for j in range(2):
        es.member_episode(args, theta, 7, j)
    np.testing.assert_array_equal(played, [theta + 0.5 * eps[0], theta + 0.5 * eps[1]])


def test_an_iteration_of_train_is_eq_6_computed_by_hand(tmp_path):
    """Iteration 2 redone from the public functions: the members' returns, ranks, the mirrored
    estimate and the step with weight decay give the bits train() gives."""
    flags = ["--weight-decay", "0.5"]
    one = run(tmp_path / "one", *flags, iterations=1, population=6, eval_every=100)
    two = run(tmp_path / "two", *flags, iterations=2, population=6, eval_every=100)
    args, theta = config(*flags, env="CartPole-v1", population=6, seed=4), one["theta"]
    R = np.array([es.member_episode(args, theta, 1, j)[0] for j in range(6)])
    eps = np.stack([es.sample_eps(4, 1, i, theta.size) for i in range(3)])
    g = es.es_gradient(eps, es.centered_ranks(R), args.sigma, True)
    np.testing.assert_array_equal(two["theta"], theta + args.alpha * g - args.alpha * 0.5 * theta)


def test_mirroring_and_fitness_options_change_the_update(tmp_path):
    thetas = {}
    for flags in ([], ["--no-mirror"], ["--fitness", "none"], ["--fitness", "standardize"]):
        result = run(tmp_path / "-".join(flags or ["default"]), *flags, iterations=2, population=6)
        assert result["status"] == "done" and np.isfinite(result["theta"]).all()
        thetas[" ".join(flags)] = result["theta"]
    names = list(thetas)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not np.allclose(thetas[a], thetas[b]), (a, b)


def test_weight_decay_and_linear_policies_on_continuous_actions(tmp_path):
    plain = run(tmp_path / "a", env="Pendulum-v1", iterations=2, population=4, hidden="")
    decayed = run(
        tmp_path / "b",
        "--weight-decay",
        "0.5",
        env="Pendulum-v1",
        iterations=2,
        population=4,
        hidden="",
    )
    assert plain["theta"].size == (3 + 1) * 1 and plain["env_steps"] == 8 * 200
    assert not np.allclose(plain["theta"], decayed["theta"])


def test_both_members_of_a_mirrored_pair_start_from_one_environment_seed():
    from test_ars import SeedRecorder  # records every reset's seed

    SeedRecorder.seeds.clear()
    args = es.parse([])
    args.sizes, args.mirror, args.sigma, args.env = [1, 2], True, 0.1, "SeedRecorder-v0"
    for j in range(4):  # the pairs +/- eps_0 and +/- eps_1
        es.member_episode(args, np.zeros(4), 0, j)
    first, second = SeedRecorder.seeds[:2], SeedRecorder.seeds[2:]
    assert first[0] == first[1] and second[0] == second[1] and first[0] != second[0], (
        SeedRecorder.seeds
    )
    assert first[0] == int(es.stream(args.seed, es.ENV, 0, 0).integers(2**31))
    SeedRecorder.seeds.clear()
    es.eval_episode(args, np.zeros(4), 3, 1)  # evaluations on streams of their own
    assert SeedRecorder.seeds == [int(es.stream(args.seed, es.EVAL, 3, 1).integers(2**31))]


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


def test_a_diverged_run_stops_and_keeps_the_last_good_policy(tmp_path, capsys):
    argv = [
        "--alpha",
        "1e308",
        "--fitness",
        "none",
        "--iterations",
        "3",
        "--out-dir",
        str(tmp_path),
    ]
    with pytest.raises(SystemExit) as stop:
        es.main(argv)
    assert stop.value.code == 1 and "diverged after iteration 0" in capsys.readouterr().err
    (run_dir,) = glob.glob(str(tmp_path / "*"))
    with np.load(os.path.join(run_dir, "policy.npz"), allow_pickle=False) as f:
        assert int(f["iteration"]) == 0 and not f["theta"].any()  # theta_0, the last finite one


# ---------------------------------------------------------------- the command line


def test_command_line_run_writes_the_run_directory_and_plays_it(tmp_path):
    flags = "--iterations 3 --population 6 --eval-every 1 --eval-episodes 2 --workers 2".split()
    out = cli(*flags, "--out-dir", str(tmp_path))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    (run_dir,) = glob.glob(str(tmp_path / "CartPole-v1__es_basic__0__*"))
    cfg = json.loads(Path(run_dir, "config.json").read_text())
    assert cfg["sigma"] == es.GENERIC["sigma"] and cfg["population"] == 6
    assert cfg["numpy"] == np.__version__ and cfg["python"] == platform.python_version()
    assert cfg["gymnasium"] == gym.__version__ and cfg["mujoco"] is None  # CartPole loads no MuJoCo
    with open(os.path.join(run_dir, "progress.csv")) as f:
        header = f.readline().strip().split(",")
    shared = "iteration episodes env_steps wall_time_s return_mean return_std return_min"
    shared += " return_max eval_return_mean eval_return_std steps_per_s"  # every script's first
    assert header[:11] == shared.split()
    assert header[-1] == "elite" and len(rows(run_dir)) == 3
    assert os.path.getsize(os.path.join(run_dir, "progress.png")) > 1000
    assert out.stdout.count("\nit ") == 3 and "ETA" in out.stdout
    played = cli("--play", run_dir, "--episodes", "2", "--video", "--env", "Pendulum-v1")
    assert played.returncode == 0, played.stderr
    assert "CartPole-v1: mean return" in played.stdout and "over 2 episodes" in played.stdout
    assert Path(run_dir, "video", "CartPole-v1.gif").read_bytes()[:6] == b"GIF89a"


def test_help_shows_the_papers_symbols_the_defaults_and_the_presets():
    out = cli("--help")
    assert out.returncode == 0 and "σ" in out.stdout and "α" in out.stdout
    assert "--no-mirror" in out.stdout and "(default: 0.05)" in out.stdout  # CartPole's alpha
    table = out.stdout[out.stdout.index("presets") :].splitlines()
    assert table[1].split()[:3] == ["--env", "sigma", "alpha"]
    assert table[3].split()[:4] == ["LunarLander-v3", "0.1", "0.03", "200"]
    lunar = cli("--env", "LunarLander-v3", "--help").stdout  # the defaults of --env's preset
    assert "updates of theta (default: 500)" in " ".join(lunar.split())


class MultiBinaryEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,))
    action_space = gym.spaces.MultiBinary(3)


gym.register("MultiBinaryTest-v0", entry_point=MultiBinaryEnv, max_episode_steps=10)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env", "CartPole-v7"], "It provides versioned environments: [ `v0`, `v1` ]"),
        (["--env", "CartPol-v1"], "Did you mean: `CartPole`?"),
        (["--env", "MultiBinaryTest-v0"], "Discrete or bounded Box actions"),
        (["--env", "Blackjack-v1"], "takes Box observations"),
        (["--sigma", "0"], "--sigma: must be > 0"),
        (["--sigma", "nan"], "--sigma: must be > 0"),
        (["--alpha", "-1"], "--alpha: must be > 0"),
        (["--population", "1", "--no-mirror"], "--population: must be >= 2"),
        (["--population", "7"], "must be even with mirrored sampling"),
        (["--hidden", "16,x"], "--hidden: invalid sizes value"),
        (["--hidden", "16,0"], "--hidden: must be >= 1"),
        (["--workers", "0"], "--workers: must be >= 1"),
        (["--seed", "-3"], "--seed: must be >= 0"),
        (["--play", "/nonexistent/run"], "cannot read the policy '/nonexistent/run/policy.npz'"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, argv, message):
    assert message in refused(es, tmp_path, *argv)


def test_an_output_folder_that_cannot_be_written_is_one_line(tmp_path):
    (tmp_path / "a_file").write_text("")
    out = cli("--out-dir", str(tmp_path / "a_file" / "runs"), timeout=60)
    assert out.returncode == 2 and out.stderr.startswith("es_basic.py: error: cannot write")
    assert len(out.stderr.strip().splitlines()) == 1 and os.listdir(tmp_path) == ["a_file"]


def test_a_policy_plays_on_its_own_environment_and_layers(tmp_path):
    """policy.npz names its environment and layers, so no flag can play it on others: a policy of
    another environment or shape cannot reach the episodes."""
    done = run(tmp_path, env="Pendulum-v1", iterations=1, population=4, hidden="3")
    with np.load(os.path.join(done["run_dir"], "policy.npz"), allow_pickle=False) as f:
        assert str(f["env"]) == "Pendulum-v1" and list(f["sizes"]) == [3, 3, 1]
    R = es.main(
        ["--play", done["run_dir"], "--env", "CartPole-v1", "--hidden", "64,64", "--episodes", "2"]
    )
    assert len(R) == 2 and (R < 0).all()  # Pendulum's returns are negative; CartPole's positive


def long_run(tmp_path, method, at=3, **env):
    """A long two-worker run in a session of its own, its workers started by `method`, returned
    once iteration `at` is logged (at=0: at once)."""
    argv = ["--iterations", "100000", "--target-return", "1e9", "--workers", "2"]
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "es_basic.py"), *argv, "--out-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=with_start_method(method, **env),
    )
    for line in proc.stdout if at else ():
        if line.startswith("it ") and int(line.split()[1]) >= at:
            break
    return proc


@contextlib.contextmanager
def ended(proc):
    """proc, and afterwards, if the test failed, nothing of its session left running."""
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def kept_files(tmp_path):
    """The run directory's files after a stop: the log, the last logged policy, the plot."""
    (run_dir,) = glob.glob(str(tmp_path / "*"))
    with np.load(os.path.join(run_dir, "policy.npz"), allow_pickle=False) as f:
        assert int(f["iteration"]) == len(rows(run_dir)) >= 3
    assert os.path.isfile(os.path.join(run_dir, "progress.png"))
    assert not glob.glob(os.path.join(run_dir, "*.tmp"))


@POSIX_ONLY
@pytest.mark.parametrize("method", START_METHODS)
def test_a_killed_worker_ends_the_run_with_one_line_and_keeps_its_files(tmp_path, method):
    """A worker killed mid-run (out of memory, kill -9): one line, exit status 1, no traceback
    from any process, and the run directory keeps its log, the last logged policy and the plot."""
    with ended(long_run(tmp_path, method)) as proc:
        os.kill(workers_in(proc.pid)[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "a worker process died" in lines[0], err
    kept_files(tmp_path)


@POSIX_ONLY
@pytest.mark.parametrize("method", START_METHODS)
def test_ctrl_c_stops_the_workers_and_keeps_the_log(tmp_path, method):
    """Ctrl-C in a terminal reaches the whole process group: the workers ignore it, the master
    ends the run with its log, policy.npz and plot, exit status 130, and no process is left."""
    with ended(long_run(tmp_path, method)) as proc:
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        time.sleep(1)
        assert left_in_session(proc.pid) == ""
    assert proc.returncode == 130 and "interrupted after" in err and "Traceback" not in err, err
    kept_files(tmp_path)


@POSIX_ONLY
@pytest.mark.parametrize("method", START_METHODS)
def test_a_second_ctrl_c_ends_the_run_at_once(tmp_path, method):
    with ended(long_run(tmp_path, method)) as proc:
        os.killpg(proc.pid, signal.SIGINT)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=2)
        deadline = time.time() + 5  # the workers end once they see their master's end
        while left_in_session(proc.pid) and time.time() < deadline:
            time.sleep(0.2)
        assert left_in_session(proc.pid) == ""
    assert proc.returncode == 130 and "Traceback" not in err, err


@POSIX_ONLY
@pytest.mark.parametrize("method", START_METHODS)
def test_a_killed_master_leaves_no_worker(tmp_path, method):
    """kill -9 gives the master no chance to stop its workers (or the forkserver, or the
    resource tracker): they notice on their own and end."""
    with ended(long_run(tmp_path, method)) as proc:
        proc.kill()
        proc.wait()
        deadline = time.time() + 5
        while left_in_session(proc.pid) and time.time() < deadline:
            time.sleep(0.2)
        assert left_in_session(proc.pid) == ""


@POSIX_ONLY
@pytest.mark.parametrize("method, delay", [("fork", 0.1), ("forkserver", 0.2), ("spawn", 0.15)])
def test_a_ctrl_c_while_the_run_starts_ends_it(tmp_path, method, delay):
    """During the imports, the environment's creation, the workers' start: exit status 130 and
    no process left. (Under spawn and forkserver, a worker or the forkserver hit while its own
    interpreter starts prints Python's traceback before the run ends.)"""
    for attempt in range(4):  # before, during and after the imports, whatever this machine's pace
        with ended(long_run(tmp_path / str(attempt), method, at=0)) as proc:
            time.sleep(0.15 + delay * attempt)
            os.killpg(proc.pid, signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # a hang: which processes are left, in what state
                pytest.fail(f"no end after a Ctrl-C at attempt {attempt}: {processes_in(proc.pid)}")
            time.sleep(0.5)
            assert left_in_session(proc.pid) == ""
        assert proc.returncode == 130, err
        assert "Traceback" not in err or method != "fork", err


@POSIX_ONLY
def test_a_full_disk_is_one_line_and_keeps_the_last_complete_files(tmp_path):
    """Files may not grow past 3000 bytes (as on a full disk): progress.csv, rewritten whole each
    iteration, soon cannot be. One line naming it, and the files as they last were written."""
    import resource

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))

    out = cli("--workers", "2", "--out-dir", str(tmp_path), preexec_fn=small_files)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert "cannot write" in lines[0] and "progress.csv: File too large" in lines[0]
    (run_dir,) = glob.glob(str(tmp_path / "*"))
    logged = rows(run_dir)
    assert len(logged) >= 3 and all(len(row) == len(es.COLUMNS) for row in logged)
    with np.load(os.path.join(run_dir, "policy.npz"), allow_pickle=False) as f:
        assert int(f["iteration"]) == len(logged)  # the policy of the last row that fitted
    assert sorted(os.listdir(run_dir)) == ["config.json", "policy.npz", "progress.csv"]


def test_config_json_holds_the_command_that_makes_the_same_run_again(tmp_path):
    flags = ["--iterations", "3", "--population", "6", "--hidden", "", "--seed", "2"]
    first = es.main([*flags, "--eval-every", "1", "--out-dir", str(tmp_path / "a")])
    es.STOP.clear()
    command = json.loads(Path(first["run_dir"], "config.json").read_text())["command"]
    assert command.startswith("python es_basic.py ") and "--hidden ''" in command
    time.sleep(1)  # a run directory's name ends with the second it started
    python, *argv = shlex.split(command)  # 'python': this test's own interpreter
    again = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    (second,) = set(glob.glob(str(tmp_path / "a" / "*"))) - {first["run_dir"]}
    timing = ("wall_time_s", "steps_per_s")
    strip = [{k: v for k, v in r.items() if k not in timing} for r in rows(first["run_dir"])]
    assert strip == [{k: v for k, v in r.items() if k not in timing} for r in rows(second)]


def test_a_notebook_imports_the_script_and_trains_with_main(tmp_path):
    """Importing installs no signal handler; main() trains, returns the result, and leaves the
    handlers as they were, so that the notebook's own Ctrl-C works again."""
    code = (
        "import signal\n"
        "handlers = lambda: (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))\n"
        "before = handlers()\n"
        "import es_basic\n"
        "assert handlers() == before, handlers()\n"
        f"result = es_basic.main(['--iterations', '2', '--out-dir', {str(tmp_path)!r}])\n"
        "assert result['status'] == 'done' and result['iteration'] == 2, result\n"
        "assert handlers() == before, handlers()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_bipedal_walker_gives_the_same_numbers_with_any_worker_count(tmp_path):
    """A new environment each episode: Box2D's world keeps no trace of the episodes before."""
    flags = dict(env="BipedalWalker-v3", iterations=2, population=6, hidden="", eval_episodes=2)
    serial, parallel = run(tmp_path / "a", **flags), run(tmp_path / "b", workers=2, **flags)
    np.testing.assert_array_equal(serial["theta"], parallel["theta"])
