"""Tests of es_basic.py: the estimator, the behaviour of a run, the command line, bad input."""
import glob
import inspect
import json
import os
import signal
import subprocess
import sys
import time

import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv
import numpy as np
import pytest

import ars
import es_basic as es
from conftest import interrupted_runs, refused, sigint_during_close

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(*argv, timeout=240):
    return subprocess.run([sys.executable, os.path.join(ROOT, "es_basic.py"), *argv], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def config(*flags, **kw):
    argv = list(flags)
    for key, value in kw.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return es.resolve_config(es.build_parser().parse_args(argv))


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
    x = np.array([3.0, -1.0, 10.0, 2.5, 7.0])
    r = es.centered_ranks(x)
    np.testing.assert_allclose(r, [0.0, -0.5, 0.5, -0.25, 0.25])
    assert r.sum() == pytest.approx(0.0)
    assert es.centered_ranks(np.random.default_rng(0).normal(size=101)).sum() == pytest.approx(0.0)


def test_equal_returns_share_their_rank():
    r = es.centered_ranks(np.array([5.0, 1.0, 5.0, 3.0]))
    np.testing.assert_allclose(r, [1 / 3, -0.5, 1 / 3, -1 / 6])  # ranks 2.5, 0, 2.5, 1 over 3, minus 0.5
    assert r.sum() == pytest.approx(0.0)
    eps = np.ones((1, 3))
    np.testing.assert_array_equal(es.es_gradient(eps, es.centered_ranks(np.array([9.0, 9.0])), 0.1, True), 0.0)


def test_fitness_shaping_options():
    x = np.array([1.0, 2.0, 4.0])
    z = es.shape_fitness(x, "standardize")
    assert z.mean() == pytest.approx(0.0) and z.std() == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_array_equal(es.shape_fitness(x, "none"), x)


def test_mirrored_gradient_equals_the_plain_formula_over_the_signed_population():
    rng = np.random.default_rng(2)
    eps, F = rng.normal(size=(3, 4)), rng.normal(size=6)
    signed = np.repeat(eps, 2, axis=0) * np.array([1, -1, 1, -1, 1, -1])[:, None]
    np.testing.assert_allclose(es.es_gradient(eps, F, 0.1, True), es.es_gradient(signed, F, 0.1, False))


def test_es_drives_a_quadratic_to_its_optimum():
    theta, rng = np.full(10, 3.0), np.random.default_rng(3)
    start = np.linalg.norm(theta - C)
    for _ in range(300):
        eps = rng.standard_normal((10, 10))
        F = es.centered_ranks(quadratic(theta + 0.1 * np.repeat(eps, 2, axis=0) * np.tile([1.0, -1.0], 10)[:, None]))
        theta = theta + 0.1 * es.es_gradient(eps, F, 0.1, True)
    assert np.linalg.norm(theta - C) < 0.05 * start


def test_policy_maps_flat_parameters_to_actions():
    sizes = es.layer_sizes(4, [3], 2)
    theta = np.arange(es.n_params(sizes), dtype=float)
    (W1, b1), (W2, b2) = es.unflatten(theta, sizes)
    assert W1.shape == (3, 4) and b1.shape == (3,) and W2.shape == (2, 3) and b2.shape == (2,)
    assert es.n_params(sizes) == 4 * 3 + 3 + 3 * 2 + 2 and b2[-1] == theta[-1]
    box = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
    np.testing.assert_allclose(es.to_action(np.array([1e6, -1e6]), box), [2.0, 0.0])
    np.testing.assert_allclose(es.to_action(np.zeros(2), box), [0.0, 0.5])
    assert es.to_action(np.array([0.1, 0.7, -1.0]), gym.spaces.Discrete(3)) == 1


# ---------------------------------------------------------------- behaviour of a run


def run(tmp_path, *flags, **kw):
    kw = {"env": "CartPole-v1", "iterations": 4, "population": 10, "eval_every": 2, "eval_episodes": 3,
          "seed": 4, "out_dir": tmp_path, **kw}
    return es.train(config(*flags, **kw))


def test_cartpole_improves_within_a_tiny_budget(tmp_path):
    result = run(tmp_path, iterations=15, population=50, eval_every=15, eval_episodes=10)
    rows = open(os.path.join(result["run_dir"], "progress.csv")).read().splitlines()[1:]
    first_mean, last_eval = float(rows[0].split(",")[4]), float(rows[-1].split(",")[8])
    assert first_mean < 20 and last_eval > 4 * first_mean  # theta_0 = 0 always pushes left: ~10 steps


def test_workers_give_the_same_result_as_serial(tmp_path):
    serial = run(tmp_path / "a", workers=1)
    parallel = run(tmp_path / "b", workers=2)
    np.testing.assert_array_equal(serial["theta"], parallel["theta"])
    assert serial["env_steps"] == parallel["env_steps"]
    assert not np.allclose(serial["theta"], run(tmp_path / "c", seed=5)["theta"])


def test_mirroring_and_fitness_options_change_the_update(tmp_path):
    thetas = {}
    for flags in ([], ["--no-mirror"], ["--fitness", "none"], ["--fitness", "standardize"]):
        result = run(tmp_path / "-".join(flags or ["default"]), *flags, iterations=2, population=6)
        assert result["status"] == "done" and np.isfinite(result["theta"]).all()
        thetas[" ".join(flags)] = result["theta"]
    names = list(thetas)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not np.allclose(thetas[a], thetas[b]), (a, b)


def test_continuous_actions_work(tmp_path):
    result = run(tmp_path, env="Pendulum-v1", iterations=2, population=4)
    assert result["episodes"] == 8 and result["env_steps"] == 8 * 200


def test_resume_equals_an_uninterrupted_run(tmp_path):
    full = run(tmp_path / "full", iterations=6)
    half = run(tmp_path / "half", iterations=3)
    resumed = es.main(["--resume", half["run_dir"], "--iterations", "6"])
    np.testing.assert_array_equal(full["theta"], resumed["theta"])
    assert resumed["episodes"] == full["episodes"] and resumed["env_steps"] == full["env_steps"]


def test_an_interrupt_during_an_evaluation_resumes_to_the_uninterrupted_run(tmp_path, monkeypatch):
    # A stop while iteration 4 is evaluated must leave iteration 3 to resume from, so that the
    # resumed run redoes iteration 4 with its evaluation; it once saved iteration 4 and skipped both.
    full = run(tmp_path / "full", iterations=6)
    evaluation = es.run_evaluation

    def interrupted(theta, iteration, episodes):
        if iteration == 4:
            raise KeyboardInterrupt
        return evaluation(theta, iteration, episodes)

    monkeypatch.setattr(es, "run_evaluation", interrupted)
    half = run(tmp_path / "half", iterations=6, workers=1)
    assert half["status"] == "interrupted" and half["iteration"] == 3
    monkeypatch.setattr(es, "run_evaluation", evaluation)
    resumed = es.main(["--resume", half["run_dir"], "--iterations", "6"])
    np.testing.assert_array_equal(full["theta"], resumed["theta"])
    full_rows = open(os.path.join(full["run_dir"], "progress.csv")).read().splitlines()
    rows = open(os.path.join(half["run_dir"], "progress.csv")).read().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "3", "4", "5", "6"]
    assert [r.split(",")[8] for r in rows] == [r.split(",")[8] for r in full_rows]  # same evaluations


@pytest.mark.parametrize("target", [None, -1e9])
def test_an_interrupt_at_any_line_resumes_to_the_uninterrupted_run(tmp_path, monkeypatch, target):
    # Every line of an iteration (the update, the evaluation, the log row, the checkpoint) is a
    # point where Ctrl-C or SIGTERM can stop the run; from each, --resume must give the same run.
    # It found a stop between the new state and its log row (a checkpoint without its row), and a
    # stop after the target was logged (the resumed run went on past it).
    kw = dict(iterations=2, population=4, eval_every=2, eval_episodes=1, save_every=2, workers=1)
    if target is not None:
        kw["target_return"] = target
    monkeypatch.setattr(es, "plot_progress", lambda *a: None)  # fast: 10-20 runs, each resumed
    full = run(tmp_path / "full", **kw)
    assert full["status"] == ("done" if target is None else "target")
    points = 0
    for n, half in interrupted_runs(es.train, lambda n: run(tmp_path / f"at{n}", **kw), after=1,
                                    also=(es.Run.log, es.Run.save_if_due, es.evaluate_if_due)):
        if half["status"] == "interrupted":
            half = es.main(["--resume", half["run_dir"], "--iterations", "2"])
        assert half["status"] == full["status"], f"interrupted at line {n}"
        np.testing.assert_array_equal(full["theta"], half["theta"], err_msg=f"interrupted at line {n}")
        rows, full_rows = ([r.split(",") for r in open(os.path.join(d, "progress.csv")).read().splitlines()[1:]]
                           for d in (half["run_dir"], full["run_dir"]))
        assert [(r[0], r[4], r[8]) for r in rows] == [(r[0], r[4], r[8]) for r in full_rows], \
            f"interrupted at line {n}"
        points = n
    assert points > 15  # every line of the second pass of the loop, and of the log and checkpoint


def test_a_stop_during_the_final_save_keeps_the_target(tmp_path, monkeypatch):
    # Once the loop is over, Ctrl-C or SIGTERM is held until the run is saved (as in ars.py).
    result, handler = sigint_during_close(monkeypatch, es.Episodes, lambda: run(tmp_path, iterations=4, target_return=-1e9))
    assert result["status"] == "target" and result["iteration"] == 2
    assert handler is signal.default_int_handler  # the script restored the handler it held


def test_both_members_of_a_mirrored_pair_start_from_one_environment_seed():
    from test_ars import SeedRecorder  # records every reset's seed
    SeedRecorder.seeds.clear()
    es.init_worker("SeedRecorder-v0", 0, [1, 2], "tanh", 0.1, True)
    es.run_members(np.zeros(es.n_params([1, 2])), 0, [0, 1, 2, 3])  # the pairs +/- eps_0 and +/- eps_1
    first, second = SeedRecorder.seeds[:2], SeedRecorder.seeds[2:]
    assert first[0] == first[1] and second[0] == second[1] and first[0] != second[0], SeedRecorder.seeds


def test_shared_helpers_are_identical_copies_of_ars():
    for name in ("stream", "versions", "make_run_dir", "save_npz_atomic", "load_npz", "write_csv_rows",
                 "write_json", "read_config", "read_csv_rows", "plot_progress", "fmt_time", "hold_stops", "Parser",
                 "UserError", "stop_on_sigterm", "reset_env",
                 "replace_or_clean", "draw_progress", "exit_with_master", "quiet_mujoco", "check_modes",
                 "flags_given", "refuse_fixed_flags", "available_cores"):
        assert inspect.getsource(getattr(es, name)) == inspect.getsource(getattr(ars, name)), name
    assert es.SHARED_COLUMNS == ars.SHARED_COLUMNS


# ---------------------------------------------------------------- the command line


def test_command_line_run_writes_the_run_directory_and_plays_it(tmp_path):
    out = cli("--iterations", "3", "--population", "6", "--eval-every", "1", "--eval-episodes", "2",
              "--workers", "2", "--out-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    (run_dir,) = glob.glob(str(tmp_path / "CartPole-v1__es_basic__0__*"))
    cfg = json.load(open(os.path.join(run_dir, "config.json")))
    assert cfg["sigma"] == es.PRESETS["CartPole-v1"]["sigma"] and cfg["population"] == 6
    header, *rows = open(os.path.join(run_dir, "progress.csv")).read().splitlines()
    assert header.split(",") == es.COLUMNS and len(rows) == 3
    assert os.path.getsize(os.path.join(run_dir, "progress.png")) > 1000
    assert out.stdout.count("\nit ") == 3
    played = cli("--play", run_dir, "--episodes", "2", "--video")
    assert played.returncode == 0, played.stderr
    assert "mean return" in played.stdout
    assert open(os.path.join(run_dir, "video", "CartPole-v1.gif"), "rb").read(6) == b"GIF89a"


def bad(tmp_path, *argv):
    return refused(es, tmp_path, *argv)


@pytest.mark.parametrize("argv, message", [
    (["--env", "CartPole-v7"], "did you mean CartPole-v1"),
    (["--sigma", "0"], "--sigma must be positive"),
    (["--alpha", "-1"], "--alpha must be positive"),
    (["--population", "1", "--no-mirror"], "--population must be at least 2"),
    (["--population", "7"], "must be even with mirrored sampling"),
    (["--hidden", "16,x"], "--hidden takes sizes"),
    (["--workers", "0"], "--workers"),
    (["--env", "Blackjack-v1"], "observations must be a flat Box vector"),
    (["--play", "/nonexistent/run"], "not a run directory of es_basic.py"),
    (["--seed", "-3"], "--seed must be 0 or more"),
    (["--sigma", "nan"], "must be finite numbers"),
])
def test_bad_flags(tmp_path, argv, message):
    assert message in bad(tmp_path, *argv)


def test_unsupported_action_space_is_refused():
    gym.register("MultiBinaryTest-v0", entry_point=MultiBinaryEnv, max_episode_steps=10)
    with pytest.raises(es.UserError, match="Discrete actions and bounded 1-D Box"):
        es.check_env("MultiBinaryTest-v0")


class MultiBinaryEnv(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,))
    action_space = gym.spaces.MultiBinary(3)


def test_corrupt_and_mismatched_checkpoints(tmp_path):
    good = run(tmp_path / "good", iterations=1)
    latest = os.path.join(good["run_dir"], "checkpoints", "latest.npz")
    saved = open(latest, "rb").read()
    open(latest, "wb").write(b"garbage")
    assert "corrupt" in bad(tmp_path, "--resume", good["run_dir"])
    open(latest, "wb").write(saved)
    np.savez(latest, **{**dict(np.load(latest)), "theta": np.zeros(3)})
    assert "parameters" in bad(tmp_path, "--play", good["run_dir"])


def test_playing_a_run_of_the_other_script_is_refused(tmp_path):
    es_run = run(tmp_path / "es", iterations=1)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "ars.py"), "--play", es_run["run_dir"]],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "is a run directory of es_basic.py, not of ars.py" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    out = cli("--out-dir", str(blocker / "runs"), timeout=60)
    assert out.returncode == 2 and "cannot create the run directory" in out.stderr


def test_a_resumed_run_directory_that_cannot_be_written(tmp_path):
    good = run(tmp_path / "good", iterations=1)
    os.mkdir(os.path.join(good["run_dir"], "config.json.tmp"))  # config.json cannot be rewritten (even as root)
    before = {p: os.path.getmtime(p) for p in glob.glob(os.path.join(good["run_dir"], "**"), recursive=True)}
    line = bad(tmp_path, "--resume", good["run_dir"], "--iterations", "2")
    assert "cannot write to the run directory" in line
    after = {p: os.path.getmtime(p) for p in glob.glob(os.path.join(good["run_dir"], "**"), recursive=True)}
    assert after == before


class CrashEnv(MultiBinaryEnv):
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        os._exit(3)  # a worker process that dies without a word


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="test environments reach workers only by fork")
def test_a_dying_worker_ends_the_run_with_an_error_not_a_hang(tmp_path):
    import signal

    def on_alarm(signum, frame):
        raise TimeoutError("the run hung after its worker died")
    gym.register("EsCrashTest-v0", entry_point=CrashEnv, max_episode_steps=10)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(60)
    try:
        with pytest.raises(RuntimeError, match="worker process died"):
            run(tmp_path, env="EsCrashTest-v0", workers=2)
    finally:
        signal.alarm(0)


class CrashLaterEnv(CartPoleEnv):
    """Dies at the start of the 13th episode counted over all processes (one byte per reset in the
    file $ES_CRASH_COUNT): with a population of 4 and no evaluation, the first episode of iteration 4."""
    def reset(self, seed=None, options=None):
        with open(os.environ["ES_CRASH_COUNT"], "ab") as f:
            f.write(b"x")
        if os.path.getsize(os.environ["ES_CRASH_COUNT"]) >= 13:
            os._exit(3)
        return super().reset(seed=seed, options=options)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="test environments reach workers only by fork")
def test_a_dying_worker_leaves_the_last_finished_iteration_to_resume_from(tmp_path, monkeypatch):
    gym.register("EsCrashLaterTest-v0", entry_point=CrashLaterEnv, max_episode_steps=20)
    monkeypatch.setenv("ES_CRASH_COUNT", str(tmp_path / "resets"))
    with pytest.raises(RuntimeError, match="worker process died"):
        run(tmp_path, env="EsCrashLaterTest-v0", iterations=10, population=4, workers=2, eval_every=100,
            save_every=100)
    (run_dir,) = glob.glob(str(tmp_path / "EsCrashLaterTest-v0__es_basic__*"))
    ck = np.load(os.path.join(run_dir, "checkpoints", "latest.npz"), allow_pickle=False)
    assert int(ck["iteration"]) == 3 and int(ck["episodes"]) == 12


def test_sigterm_stops_workers_and_leaves_a_checkpoint(tmp_path):
    import signal
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "es_basic.py"), "--iterations", "100000",
                             "--target-return", "1e9", "--workers", "2", "--save-every", "1000",
                             "--out-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    for line in proc.stdout:
        if line.startswith("it ") and int(line.split()[1]) >= 3:
            break
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # a second one, as `timeout` or a shell may send: it must wait
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "--resume" in err and "Traceback" not in err, (proc.returncode, err)
    (run_dir,) = glob.glob(str(tmp_path / "*"))
    assert int(np.load(os.path.join(run_dir, "checkpoints", "latest.npz"))["iteration"]) >= 3
    assert subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.strip() == ""


def test_an_error_during_a_stop_is_a_stop_not_a_failed_rollout(monkeypatch):
    # A Ctrl-C or SIGTERM can land inside the pool's locking and come out as another error; after
    # a stop signal it must end the run as a stop (checkpoint, exit 130), not as "a rollout failed".
    episodes = es.Episodes.__new__(es.Episodes)
    episodes.workers, episodes.pool = 1, None

    def failing(theta, iteration, indices):
        raise RuntimeError("cannot release un-acquired lock")
    with pytest.raises(RuntimeError, match="a rollout failed"):
        episodes.run(failing, np.zeros(3), 0, 2)
    monkeypatch.setattr(es, "STOPS", [15])
    with pytest.raises(KeyboardInterrupt):
        episodes.run(failing, np.zeros(3), 0, 2)
