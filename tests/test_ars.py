"""Tests of ars.py: the math, the behaviour of a run, the command line and every bad input."""

import csv
import glob
import json
import multiprocessing
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import (
    POSIX_ONLY,
    START_METHODS,
    left_in_session,
    only_builtin_types,
    refused,
    with_start_method,
)

import ars

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORK_ONLY = pytest.mark.usefixtures("fork_start")  # the test's environments reach workers by fork


def cli(*argv, timeout=240):
    """Run ars.py as a user would; returns the finished process."""
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "ars.py"), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def config(**kw):
    """The parsed and resolved configuration of `ars.py` with these flags."""
    argv = []
    for key, value in kw.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return ars.configure(ars.parse(argv))


# ---------------------------------------------------------------- the math


def test_update_matches_hand_computation():
    M = np.array([[1.0, 2.0]])
    deltas = np.array([[[1.0, 0.0]], [[0.0, 1.0]], [[1.0, 1.0]]])  # (N=3, p=1, n=2)
    r_plus, r_minus = np.array([3.0, 1.0, 0.0]), np.array([1.0, 2.0, 5.0])
    # b = 2 keeps directions 2 (max 5) and 0 (max 3); their 4 returns are 0, 5, 3, 1.
    sigma_R = np.std([0.0, 5.0, 3.0, 1.0])
    expected = M + 0.1 / (2 * sigma_R) * ((0.0 - 5.0) * deltas[2] + (3.0 - 1.0) * deltas[0])
    asked = []
    M_new, sigma = ars.ars_update(
        M, lambda k: asked.append(k) or deltas[k], r_plus, r_minus, alpha=0.1, b=2
    )
    np.testing.assert_allclose(M_new, expected)
    assert sigma == pytest.approx(sigma_R)
    assert sorted(asked) == [0, 2]  # only the top b directions are regenerated, not all N


def test_update_equals_the_full_sum_over_the_top_b_with_many_directions():
    rng = np.random.default_rng(3)
    N, b = 50, 7
    deltas = rng.standard_normal((N, 3, 4))
    r_plus, r_minus = rng.normal(size=N), rng.normal(size=N)
    M = rng.standard_normal((3, 4))
    top = np.argsort(-np.maximum(r_plus, r_minus))[:b]
    sigma_R = np.concatenate([r_plus[top], r_minus[top]]).std()
    expected = M + 0.02 / (b * sigma_R) * sum((r_plus[k] - r_minus[k]) * deltas[k] for k in top)
    M_new, _ = ars.ars_update(M, deltas.__getitem__, r_plus, r_minus, alpha=0.02, b=b)
    np.testing.assert_allclose(M_new, expected, rtol=1e-12)


def test_update_takes_no_step_when_all_returns_are_equal():
    M = np.ones((2, 3))
    out, sigma_R = ars.ars_update(
        M, lambda k: np.ones((2, 3)), np.full(4, 7.0), np.full(4, 7.0), alpha=0.1, b=4
    )
    np.testing.assert_array_equal(out, M)
    assert sigma_R == 0.0


def test_top_b_keeps_the_best_directions_best_first():
    r_plus = np.array([0.0, 9.0, 1.0, 4.0, -2.0])
    r_minus = np.array([5.0, 0.0, 1.0, 0.0, 8.0])
    assert list(ars.select_top_b(r_plus, r_minus, 3)) == [1, 4, 0]
    assert sorted(ars.select_top_b(r_plus, r_minus, 5)) == [0, 1, 2, 3, 4]


def test_statistics_merge_equals_batch_statistics():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, size=(1000, 4))
    parts = np.split(x, [1, 7, 300, 301, 999])
    merged = (0, np.zeros(4), np.zeros(4))
    for part in parts:
        merged = ars.merge_stats(merged, ars.batch_stats(part))
    n, mean, m2 = merged
    assert n == 1000
    np.testing.assert_allclose(mean, x.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(m2 / n, x.var(axis=0), rtol=1e-10)


def test_normalizer_v1_is_identity_and_v2_whitens():
    x = np.random.default_rng(1).normal([1.0, -2.0, 5.0], [0.5, 3.0, 0.0], size=(500, 3))
    stats = ars.batch_stats(x)
    mu, inv_sigma = ars.normalizer(stats, version=1)
    np.testing.assert_array_equal(mu, 0.0)
    np.testing.assert_array_equal(inv_sigma, 1.0)
    mu, inv_sigma = ars.normalizer(stats, version=2)
    z = (x - mu) * inv_sigma
    np.testing.assert_allclose(z[:, :2].mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(z[:, :2].std(axis=0), 1.0, rtol=1e-12)
    assert inv_sigma[2] == 0.0  # a constant feature is switched off, not blown up


def test_directions_are_regenerated_identically_from_their_name():
    a = ars.sample_direction(3, 10, 5, (2, 4))
    np.testing.assert_array_equal(a, ars.sample_direction(3, 10, 5, (2, 4)))
    assert not np.allclose(a, ars.sample_direction(3, 10, 6, (2, 4)))
    assert not np.allclose(a, ars.sample_direction(3, 11, 5, (2, 4)))


def test_rollout_reports_plain_return_and_trains_on_shifted_clipped_one():
    env = gym.make("Pendulum-v1")
    M = np.zeros((1, 3))
    total, shaped, steps, stats = ars.rollout(
        env, M, np.zeros(3), np.ones(3), env_seed=0, shift=1.0, reward_clip=0.5, keep_obs=True
    )
    env2 = gym.make("Pendulum-v1")
    env2.reset(seed=0)
    rewards = [env2.step(np.zeros(1))[1] for _ in range(200)]
    assert steps == 200 and stats[0] == 200
    assert total == pytest.approx(sum(rewards))
    assert shaped == pytest.approx(sum(np.clip(rewards, -0.5, 0.5) - 1.0))


def walk(env, seed: int, scale: float = 1.0, reset=ars.reset_env) -> np.ndarray:
    """The observations of one BipedalWalker episode of open-loop leg swings (up to 1,600 steps)."""
    actions = (
        scale
        * 0.6
        * np.sin(0.15 * np.arange(1600)[:, None] + np.array([0, np.pi, np.pi / 2, 1.5 * np.pi]))
    )
    x, _ = reset(env, seed)
    xs = [x]
    for a in actions:
        x, _, terminated, truncated, _ = env.step(a)
        xs.append(x)
        if terminated or truncated:
            break
    return np.array(xs)


@pytest.mark.parametrize(
    "reset", [ars.reset_env, lambda env, seed: env.reset(seed=seed)], ids=["reset_env", "plain"]
)
def test_a_bipedalwalker_episode_does_not_depend_on_the_episodes_before_it(reset):
    """Box2D's world outlives BipedalWalker's episodes: with a plain reset, some seeds (21 and 29
    here) give another episode on an environment that ran other episodes before."""
    used, scales = gym.make("BipedalWalker-v3"), np.random.default_rng(0)
    same = []
    for seed in range(5, 30):
        for k in range(4):
            walk(used, 100 + k, scale=scales.uniform(0.5, 1.0), reset=reset)
        a, b = walk(gym.make("BipedalWalker-v3"), seed, reset=reset), walk(used, seed, reset=reset)
        same.append(a.shape == b.shape and np.array_equal(a, b))
    assert all(same) == (reset is ars.reset_env), same


# ---------------------------------------------------------------- behaviour of a run


def run(tmp_path, **kw):
    kw = {
        "env": "Pendulum-v1",
        "iterations": 4,
        "n_directions": 4,
        "top_b": 2,
        "eval_every": 2,
        "eval_episodes": 2,
        "workers": 1,
        "seed": 5,
        "out_dir": tmp_path,
        **kw,
    }
    return ars.train(config(**kw))


def test_same_seed_gives_identical_results_with_any_worker_count(tmp_path):
    one = run(tmp_path / "a", workers=1)
    two = run(tmp_path / "b", workers=2)
    np.testing.assert_array_equal(one["M"], two["M"])
    np.testing.assert_array_equal(one["stats"][2], two["stats"][2])
    assert one["env_steps"] == two["env_steps"]
    assert not np.allclose(one["M"], run(tmp_path / "c", seed=6)["M"])


@FORK_ONLY
def test_bipedalwalker_runs_are_identical_with_any_worker_count(tmp_path):
    # With a plain env.reset these two runs differed (and so did two runs on 2 workers).
    kw = dict(
        env="BipedalWalker-v3",
        iterations=3,
        n_directions=6,
        top_b=3,
        eval_every=3,
        eval_episodes=2,
        episode_length=300,
        seed=1,
    )
    one, two = run(tmp_path / "a", workers=1, **kw), run(tmp_path / "b", workers=2, **kw)
    np.testing.assert_array_equal(one["M"], two["M"])
    assert one["env_steps"] == two["env_steps"]


def test_resume_equals_an_uninterrupted_run(tmp_path):
    full = run(tmp_path / "full", iterations=6)
    half = run(tmp_path / "half", iterations=3)
    resumed = ars.main(["--resume", half["run_dir"], "--iterations", "6", "--workers", "2"])
    np.testing.assert_array_equal(full["M"], resumed["M"])
    np.testing.assert_array_equal(full["stats"][1], resumed["stats"][1])
    assert resumed["iteration"] == 6 and resumed["episodes"] == full["episodes"]
    rows = Path(half["run_dir"], "progress.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "3", "4", "5", "6"]


def test_a_resumed_run_takes_its_workers_here_and_may_change_its_target(tmp_path, monkeypatch):
    part = run(tmp_path, iterations=1, target_return=50.0)
    cfg_path = os.path.join(part["run_dir"], "config.json")
    cfg = json.loads(Path(cfg_path).read_text())
    Path(cfg_path).write_text(json.dumps({**cfg, "workers": 64}))  # saved on a larger machine
    seen = {}
    monkeypatch.setattr(ars, "train", lambda args: seen.update(vars(args)) or {"status": "done"})
    ars.main(["--resume", part["run_dir"], "--iterations", "3"])
    assert seen["workers"] == os.cpu_count() and seen["target_return"] == 50.0
    assert seen["n_directions"] == 4 and seen["seed"] == 5  # the saved configuration
    ars.main(["--resume", part["run_dir"], "--target-return", "80", "--nu", "0.5"])
    assert seen["target_return"] == 80.0 and seen["nu"] == 0.5


def assert_resumes_to(full: dict, run_dir: str):
    """Resume run_dir to full's 6 iterations: the same M, and a log with every iteration once and
    the same training and evaluation returns as full's."""
    resumed = ars.main(["--resume", run_dir, "--iterations", "6"])
    np.testing.assert_array_equal(full["M"], resumed["M"])
    rows, full_rows = (
        [r.split(",") for r in Path(d, "progress.csv").read_text().splitlines()[1:]]
        for d in (run_dir, full["run_dir"])
    )
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "5", "6"]
    assert [(r[4], r[8]) for r in rows] == [(r[4], r[8]) for r in full_rows]


def test_resume_from_an_older_checkpoint_redoes_the_later_iterations(tmp_path):
    full = run(tmp_path / "full", iterations=6)
    half = run(tmp_path / "half", iterations=4, save_every=2)
    ck = os.path.join(half["run_dir"], "checkpoints")
    shutil.copy(
        os.path.join(ck, "iter_000002.npz"), os.path.join(ck, "latest.npz")
    )  # as if killed at 3
    assert_resumes_to(full, half["run_dir"])


def test_a_stop_during_an_evaluation_ends_the_run_after_that_iteration(tmp_path, monkeypatch):
    # Ctrl-C or SIGTERM while iteration 4 is evaluated sets the flag; the iteration is finished
    # and logged, and the run ends before the next one, from where --resume goes on.
    full = run(tmp_path / "full", iterations=6)
    evaluate = ars.evaluate

    def stopped(pool, state, *a, **kw):
        if state["iteration"] == 4:
            ars.STOP.set()
        return evaluate(pool, state, *a, **kw)

    monkeypatch.setattr(ars, "evaluate", stopped)
    try:
        half = run(tmp_path / "half", iterations=6)
    finally:
        ars.STOP.clear()
    assert half["status"] == "interrupted" and half["iteration"] == 4
    monkeypatch.setattr(ars, "evaluate", evaluate)
    assert_resumes_to(full, half["run_dir"])


class RecordingEnv(gym.Env):
    """Random observations; remembers every action it is given."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (3,))
    action_space = gym.spaces.Box(-0.5, 0.5, (2,))

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.obs, self.actions = [self.np_random.normal(size=3)], []
        return self.obs[-1], {}

    def step(self, a):
        self.actions.append(np.array(a))
        self.obs.append(self.np_random.normal(size=3) * 3)
        return self.obs[-1], 1.0, False, len(self.actions) >= 20, {}


def test_rollout_acts_with_the_normalized_linear_policy_of_eq_2():
    env = RecordingEnv()
    M, mu, inv_sigma = (
        np.array([[0.3, -0.2, 0.1], [1.0, 0.5, -2.0]]),
        np.array([0.1, -1.0, 2.0]),
        np.array([2.0, 0.5, 1.0]),
    )
    total, shaped, steps, stats = ars.rollout(env, M, mu, inv_sigma, env_seed=3, keep_obs=True)
    expected = [np.clip(M @ ((x - mu) * inv_sigma), -0.5, 0.5) for x in env.obs[:-1]]
    np.testing.assert_allclose(env.actions, expected)
    assert (
        np.abs(np.array(expected)).max() > 0 and (np.abs(np.array(expected)) == 0.5).any()
    )  # clipping happened
    n, mean, m2 = stats
    np.testing.assert_allclose(
        mean, np.mean(env.obs[:-1], axis=0)
    )  # the final observation is never acted on
    assert (total, shaped, steps, n) == (20.0, 20.0, 20, 20)


def test_raw_actions_are_sent_to_the_environment_unclipped():
    env = RecordingEnv()
    M, mu, inv_sigma = np.array([[0.3, -0.2, 0.1], [1.0, 0.5, -2.0]]), np.zeros(3), np.ones(3)
    ars.rollout(env, M, mu, inv_sigma, env_seed=3, clip_actions=False)
    expected = [M @ x for x in env.obs[:-1]]
    np.testing.assert_allclose(env.actions, expected)
    assert (np.abs(np.array(expected)) > 0.5).any()  # beyond the bounds, and sent as they are


def test_raw_actions_in_training_evaluation_and_play(tmp_path):
    # MountainCarContinuous clamps the force but charges 0.1 a^2 on the action sent: one policy
    # whose actions leave [-1, 1] earns less with raw actions, on the very same course.
    config_raw = dict(
        env="MountainCarContinuous-v0",
        episode_length=50,
        n_directions=2,
        top_b=1,
        eval_every=1,
        eval_episodes=2,
        iterations=2,
        alpha=50.0,
        nu=5.0,
    )
    params = (0, np.array([[40.0, 40.0]]), np.zeros(2), np.ones(2), 5.0)
    for kind in ("train", "eval"):  # episodes of 50 steps
        clipped = ars.job(config(**config_raw, actions="clipped"), params, kind, 0)
        raw = ars.job(config(**config_raw, actions="raw"), params, kind, 0)
        if kind == "train":  # the + rollout
            clipped = clipped[0]
            raw = raw[0]
        assert raw[2] == clipped[2] == 50 and raw[0] < clipped[0] - 1.0
    run_dir = run(tmp_path, actions="raw", **config_raw)["run_dir"]
    path = os.path.join(run_dir, "config.json")
    assert json.loads(Path(path).read_text())["actions"] == "raw"
    played = {}
    for saved in ("raw", "clipped"):
        cfg = json.loads(Path(path).read_text())
        cfg.update(actions=saved)
        Path(path).write_text(json.dumps(cfg))
        played[saved] = ars.main(["--play", run_dir, "--episodes", "2"])
    assert (played["raw"] < played["clipped"] - 1.0).all()


def test_a_resumed_run_keeps_its_saved_actions(tmp_path):
    kw = dict(
        env="MountainCarContinuous-v0",
        episode_length=50,
        alpha=50.0,
        nu=5.0,
        n_directions=2,
        top_b=1,
    )
    raw_full = run(tmp_path / "raw_full", actions="raw", iterations=4, **kw)
    raw_half = run(tmp_path / "raw_half", actions="raw", iterations=2, **kw)
    np.testing.assert_array_equal(
        raw_full["M"], ars.main(["--resume", raw_half["run_dir"], "--iterations", "4"])["M"]
    )
    clipped_full = run(tmp_path / "clipped_full", iterations=4, **kw)
    assert not np.array_equal(raw_full["M"], clipped_full["M"])
    with pytest.raises(SystemExit):  # --actions cannot change a resumed run
        ars.main(["--resume", raw_half["run_dir"], "--iterations", "4", "--actions", "clipped"])


def test_a_worker_sends_back_only_builtin_types():
    # A job's answer is what travels through pipes and Ray: plain tuples of numbers and statistics,
    # no Episode (a class of a script run as __main__ would travel with its definition through Ray).
    args = config(env="Pendulum-v1")
    params = (0, np.full((1, 3), 0.1), np.zeros(3), np.ones(3), 0.05)
    train = ars.job(args, params, "train", 0)
    evaluation = ars.job(args, params, "eval", 0)
    assert only_builtin_types(train) and only_builtin_types(evaluation)
    assert train[0][2] == 200 and train[0][3][0] == 200  # (return, shaped, length, stats)
    assert evaluation[3] is None


class SeedRecorder(gym.Env):
    """Records the seed of every reset, in this process."""

    observation_space, action_space = gym.spaces.Box(-1, 1, (1,)), gym.spaces.Box(-1, 1, (1,))
    seeds = []

    def reset(self, seed=None, options=None):
        self.seeds.append(seed)
        return np.zeros(1, np.float32), {}

    def step(self, a):
        return np.zeros(1, np.float32), 0.0, True, False, {}


gym.register("SeedRecorder-v0", entry_point=SeedRecorder)


def test_both_rollouts_of_a_pair_start_from_one_environment_seed():
    # Eq. (3): r+ and r- differ only by the sign of the perturbation, not by the episode drawn.
    SeedRecorder.seeds.clear()
    args = config(env="SeedRecorder-v0", episode_length=5)
    params = (0, np.zeros((1, 1)), np.zeros(1), np.ones(1), 0.05)
    ars.job(args, params, "train", 0)
    ars.job(args, params, "train", 1)
    first, second = SeedRecorder.seeds[:2], SeedRecorder.seeds[2:]
    assert first[0] == first[1] and second[0] == second[1] and first[0] != second[0], (
        SeedRecorder.seeds
    )


def test_ars_raises_the_return_on_a_cheap_environment(tmp_path):
    result = run(
        tmp_path,
        env="InvertedPendulum-v5",
        iterations=10,
        n_directions=8,
        top_b=4,
        alpha=0.5,
        nu=0.2,
        eval_every=10,
        eval_episodes=3,
        workers=2,
        seed=3,
    )
    rows = Path(result["run_dir"], "progress.csv").read_text().splitlines()[1:]
    first_mean, last_eval = float(rows[0].split(",")[4]), float(rows[-1].split(",")[8])
    assert first_mean < 50  # a zero policy falls within a few dozen steps
    assert last_eval > 500  # 1000 is a pendulum balanced for the whole episode


def test_the_generic_defaults_learn_lunar_lander(tmp_path):
    # No preset: GENERIC's alpha, nu, N and b (docs/ars.md, "Tasks with no preset: the generic
    # defaults") pass, in 30 iterations, the best evaluation the old ones (nu 0.03, alpha 0.02,
    # N 16, b 8) reached in 300: -64.
    result = run(
        tmp_path,
        env="LunarLanderContinuous-v3",
        iterations=30,
        target_return=-64,
        seed=0,
        workers=2,
        eval_every=ars.build_parser().get_default("eval_every"),
        **{key: ars.GENERIC[key] for key in ("n_directions", "top_b", "eval_episodes")},
    )
    assert result["status"] == "target", result["iteration"]  # -31.1 at iteration 30, seed 0


def test_target_return_stops_the_run(tmp_path):
    result = run(tmp_path, iterations=50, target_return=-1e9)
    assert result["status"] == "target" and result["iteration"] == 2  # the first evaluation


def test_a_target_must_be_confirmed_on_fresh_episodes(tmp_path, monkeypatch, capsys):
    evaluate = ars.evaluate

    def lucky(pool, state, args, episodes):  # every screen passes, and no confirmation
        return evaluate(pool, state, args, episodes) + (1e9 if episodes.start == 0 else 0)

    monkeypatch.setattr(ars, "evaluate", lucky)
    never = run(tmp_path / "a", iterations=6, target_return=1e6, confirm_episodes=3)
    assert never["status"] == "done" and never["iteration"] == 6
    said = [line for line in capsys.readouterr().out.splitlines() if "fresh episodes" in line]
    assert len(said) == 3 and "reached 1e+06, but its 3 fresh episodes gave -" in said[0]
    assert said[0].endswith(": the run goes on")
    rows = Path(never["run_dir"], "progress.csv").read_text().splitlines()[1:]
    confirmed = [r.split(",")[-1] for r in rows]
    assert confirmed[0] == "nan" and float(confirmed[1]) < 0  # evaluated on iterations 2, 4, 6
    once = run(tmp_path / "b", iterations=6, target_return=-1e9, confirm_episodes=3)
    assert once["status"] == "target" and once["iteration"] == 2


def test_training_does_not_depend_on_evaluations(tmp_path):
    # What makes a stopping rule testable after the fact (docs/ars.md, "Why the screen is at 300"):
    # evaluations and confirmations play their own episodes and never touch the normalizer.
    rare = run(tmp_path / "a", iterations=6, eval_every=6)
    often = run(
        tmp_path / "b",
        iterations=6,
        eval_every=1,
        eval_episodes=3,
        target_return=-0.001,
        confirm_episodes=2,
    )  # a confirmation whenever a screen passes (Pendulum: never)
    assert often["status"] == "done"
    np.testing.assert_array_equal(rare["M"], often["M"])
    np.testing.assert_array_equal(rare["stats"][2], often["stats"][2])
    assert rare["env_steps"] == often["env_steps"]


def test_a_checkpoint_replays_the_evaluation_its_run_logged(tmp_path):
    result = run(tmp_path, iterations=4, eval_every=2, eval_episodes=3, save_every=2)
    args = config(env="Pendulum-v1", n_directions=4, top_b=2, seed=5, workers=1)
    rows = {
        int(r.split(",")[0]): r.split(",")
        for r in Path(result["run_dir"], "progress.csv").read_text().splitlines()[1:]
    }
    pool = ars.make_pool(args)
    try:
        for it in (2, 4):
            state = ars.load_checkpoint(
                os.path.join(result["run_dir"], "checkpoints", f"iter_{it:06d}.npz"), args
            )
            replayed = ars.evaluate(pool, state, args, range(3))
            assert replayed.mean() == float(rows[it][8])
            assert (
                ars.evaluate(pool, dict(state, iteration=it - 1), args, range(3)).mean()
                != replayed.mean()
            )
    finally:
        pool.shutdown()


class NanEnv(gym.Env):
    """Observes 1; the reward is the action; once |a| > 0.3 the observation becomes NaN."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,))
    action_space = gym.spaces.Box(-10.0, 10.0, (1,))

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.ones(1), {}

    def step(self, a):
        self.t += 1
        obs = np.full(1, np.nan) if abs(a[0]) > 0.3 else np.ones(1)
        return obs, float(a[0]), False, self.t >= 5, {}


class CrashEnv(NanEnv):
    def step(self, a):
        os._exit(3)  # a worker process that dies without a word


class CrashLaterEnv(NanEnv):
    """Dies at the start of its 13th episode: with one worker and 2 directions (4 episodes an
    iteration), the first episode of iteration 4."""

    def reset(self, seed=None, options=None):
        self.episodes = getattr(self, "episodes", 0) + 1
        if self.episodes == 13:
            os._exit(3)
        return super().reset(seed=seed)


class NanRewardEnv(NanEnv):
    """Observes 1 always; the reward is the action, and NaN once |a| > 0.3."""

    def step(self, a):
        self.t += 1
        return np.ones(1), (np.nan if abs(a[0]) > 0.3 else float(a[0])), False, self.t >= 5, {}


gym.register("NanTest-v0", entry_point=NanEnv, max_episode_steps=100)
gym.register("NanRewardTest-v0", entry_point=NanRewardEnv, max_episode_steps=100)
gym.register("CrashTest-v0", entry_point=CrashEnv, max_episode_steps=100)
gym.register("CrashLaterTest-v0", entry_point=CrashLaterEnv, max_episode_steps=100)


@FORK_ONLY
@pytest.mark.parametrize(
    "env_id", ["NanTest-v0", "NanRewardTest-v0"]
)  # NaN observations, NaN returns
def test_nan_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, capsys, env_id):
    result = run(
        tmp_path,
        env=env_id,
        iterations=50,
        n_directions=2,
        top_b=2,
        alpha=0.1,
        nu=0.01,
        version=1,
        save_every=1,
    )
    assert result["status"] == "diverged" and 0 < result["iteration"] < 50
    assert "NaN or inf" in capsys.readouterr().err
    ck = np.load(os.path.join(result["run_dir"], "checkpoints", "latest.npz"), allow_pickle=False)
    assert np.isfinite(ck["M"]).all() and int(ck["iteration"]) == result["iteration"]


class Hang(Exception):
    pass


def fail_after(seconds):
    """Turn a hang into a test failure: SIGALRM interrupts the wait."""

    def on_alarm(signum, frame):
        raise Hang(f"no answer within {seconds} s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)


@FORK_ONLY
@POSIX_ONLY  # SIGALRM
def test_a_dying_worker_ends_the_run_with_an_error_not_a_hang(tmp_path):
    fail_after(60)
    try:
        with pytest.raises(SystemExit) as stop:
            ars.main(["--env", "CrashTest-v0", "--workers", "2", "--out-dir", str(tmp_path)])
    finally:
        signal.alarm(0)
    assert stop.value.code == 1


@FORK_ONLY
def test_a_worker_killed_while_idle_is_a_dead_worker_not_a_broken_pipe():
    args = config(env="Pendulum-v1", workers=2)
    pool = ars.make_pool(args)
    params = (0, np.zeros((1, 3)), np.zeros(3), np.ones(3), 0.1)
    jobs = [("train", k) for k in range(4)]
    try:
        ars.run_jobs(pool, args, params, jobs)  # the workers start
        worker = multiprocessing.active_children()[0]
        worker.kill()  # between two iterations, as the kernel's OOM killer may do
        worker.join()
        with pytest.raises(ars.WorkerDied, match="worker process died"):
            ars.run_jobs(pool, args, params, jobs)
    finally:
        pool.shutdown()


@FORK_ONLY
def test_a_dying_worker_leaves_the_last_finished_iteration_to_resume_from(tmp_path):
    result = run(
        tmp_path,
        env="CrashLaterTest-v0",
        iterations=10,
        n_directions=2,
        top_b=1,
        version=1,
        nu=0.01,
        alpha=0.01,
        eval_every=100,
        save_every=100,
    )
    assert result["status"] == "stopped: a worker process died"
    (run_dir,) = glob.glob(str(tmp_path / "CrashLaterTest-v0__ars__*"))
    ck = np.load(os.path.join(run_dir, "checkpoints", "latest.npz"), allow_pickle=False)
    assert int(ck["iteration"]) == 3 and int(ck["episodes"]) == 12


@POSIX_ONLY
def test_sigterm_stops_workers_and_leaves_a_checkpoint(tmp_path):
    argv = "--env Pendulum-v1 --iterations 100000 --workers 2 --save-every 1000 --eval-every 1"
    argv += " --eval-episodes 20"  # likely stopped mid-evaluation
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "ars.py"), *argv.split(), "--out-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    for line in proc.stdout:  # wait until a few iterations have run
        if line.startswith("it ") and int(line.split()[1]) >= 3:
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "--resume" in err and "Traceback" not in err, (
        proc.returncode,
        err,
    )
    run_dir = glob.glob(str(tmp_path / "*"))[0]
    args = config(env="Pendulum-v1")
    state = ars.load_checkpoint(
        os.path.join(run_dir, "checkpoints", "latest.npz"), args
    )  # complete
    assert state["iteration"] >= 2 and state["wall_time"] > 0  # iteration 3 shown: 2 or 3 saved
    resumed = cli("--resume", run_dir, "--iterations", str(state["iteration"] + 1))
    assert resumed.returncode == 0, resumed.stderr
    assert left_in_session(proc.pid) == ""  # no orphan worker processes (zombies aside)


# ---------------------------------------------------------------- the command line


def test_help_shows_the_defaults_of_the_environment_and_the_presets():
    out = cli("--env", "Hopper-v5", "--help")
    assert out.returncode == 0 and "The defaults shown are Hopper-v5's preset." in out.stdout
    assert "(default: 0.025)" in out.stdout and "(default: runs)" in out.stdout  # ν, --out-dir
    table = out.stdout[out.stdout.index("presets (a flag overrides its preset)") :].splitlines()
    assert [row.split()[0] for row in table[2:]] == [*ars.PRESETS, "any"]
    assert table[3].split()[1:6] == ["0.01", "0.025", "8", "4", "2"]  # Hopper: α ν N b V


def test_command_line_run_writes_the_run_directory_and_plays_it(tmp_path):
    argv = "--env Pendulum-v1 --iterations 3 --n-directions 2 --top-b 1 --eval-every 1"
    out = cli(*argv.split(), "--eval-episodes", "1", "--workers", "2", "--out-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    (run_dir,) = glob.glob(str(tmp_path / "Pendulum-v1__ars__0__*"))
    cfg = json.loads(Path(run_dir, "config.json").read_text())
    assert cfg["alpha"] == ars.GENERIC["alpha"] and cfg["numpy"] == np.__version__
    header, *rows = Path(run_dir, "progress.csv").read_text().splitlines()
    assert header.split(",") == ars.COLUMNS and len(rows) == 3
    assert os.path.getsize(os.path.join(run_dir, "progress.png")) > 1000
    assert os.path.exists(os.path.join(run_dir, "checkpoints", "latest.npz"))
    assert (
        out.stdout.count("\nit ") == 3 and "eval" in out.stdout
    )  # one progress line per iteration
    played = cli("--play", run_dir, "--episodes", "2", "--video")
    assert played.returncode == 0, played.stderr
    assert "mean return" in played.stdout
    gif = os.path.join(run_dir, "video", "Pendulum-v1.gif")
    assert Path(gif).read_bytes()[:6] == b"GIF89a"


def test_presets_fill_unset_flags_and_flags_override_them():
    cfg = config(env="Hopper-v5")
    assert (cfg.alpha, cfg.nu, cfg.n_directions, cfg.top_b, cfg.shift) == (0.01, 0.025, 8, 4, 1.0)
    assert config(env="Hopper-v5", alpha=0.5).alpha == 0.5
    assert config(env="Pendulum-v1").n_directions == ars.GENERIC["n_directions"]


# ---------------------------------------------------------------- bad input: one line, status 2


def bad(tmp_path, *argv):
    return refused(ars, tmp_path, *argv)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env", "BipedalWalker-v9"], "It provides versioned environments: [ `v3` ]"),
        (["--env", "BipedalWalke-v3"], "Did you mean: `BipedalWalker`?"),
        (["--env", "CartPole-v1"], "ARS takes a flat Box of observations and Box actions"),
        (
            ["--env", "Pendulum-v1", "--n-directions", "4", "--top-b", "5"],
            "--top-b must be <= --n-directions 4",
        ),
        (["--env", "Pendulum-v1", "--alpha", "0"], "--alpha: must be > 0"),
        (["--env", "Pendulum-v1", "--alpha", "inf"], "--alpha: must be > 0"),
        (["--env", "Pendulum-v1", "--nu", "-0.1"], "--nu: must be > 0"),
        (["--env", "Pendulum-v1", "--nu", "nan"], "--nu: must be > 0"),
        (["--env", "Pendulum-v1", "--workers", "0"], "--workers: must be >= 1"),
        (["--env", "Pendulum-v1", "--iterations", "abc"], "invalid number value: 'abc'"),
        (["--env", "Pendulum-v1", "--seed", "-1"], "--seed: must be >= 0"),
        (["--env", "Pendulum-v1", "--actions", "none"], "invalid choice"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_bad_flags(tmp_path, argv, message):
    assert message in bad(tmp_path, *argv)


def test_a_checkpoint_of_another_environment_than_its_run_directory_is_refused(tmp_path):
    """(Damaged checkpoints: test_shared.py.) --play takes the environment from config.json."""
    assert "not a run directory of ars.py" in bad(tmp_path, "--resume", str(tmp_path / "nowhere"))
    good = run(tmp_path / "good", iterations=1)
    cfg_path = os.path.join(good["run_dir"], "config.json")
    cfg = json.loads(Path(cfg_path).read_text())
    Path(cfg_path).write_text(json.dumps({**cfg, "env": "MountainCarContinuous-v0"}))
    assert "is for Pendulum-v1, not MountainCarContinuous-v0" in bad(
        tmp_path, "--play", good["run_dir"]
    )


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    out = cli("--env", "Pendulum-v1", "--out-dir", str(blocker / "runs"), timeout=60)
    assert out.returncode == 2 and "cannot write" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_video_every_films_the_evaluation_policy_and_play_takes_a_checkpoint_file(tmp_path):
    """--video-every K: video/iter_XXXXXX.gif every K iterations, without touching the training;
    --play RUN_DIR/checkpoints/iter_XXXXXX.npz evaluates that iteration's policy."""
    filmed = run(tmp_path / "a", iterations=4, video_every=2, save_every=1)
    plain = run(tmp_path / "b", iterations=4, save_every=1)
    np.testing.assert_array_equal(filmed["M"], plain["M"])
    videos = sorted(os.listdir(os.path.join(filmed["run_dir"], "video")))
    assert videos == ["iter_000002.gif", "iter_000004.gif"]
    assert Path(filmed["run_dir"], "video", videos[0]).read_bytes()[:6] == b"GIF89a"
    checkpoint = os.path.join(plain["run_dir"], "checkpoints", "iter_00000{}.npz").format
    first = ars.main(["--play", checkpoint(1), "--episodes", "2"])
    last = ars.main(["--play", plain["run_dir"], "--episodes", "2"])
    assert not np.allclose(first, last)  # another policy, on the same two episodes
    np.testing.assert_array_equal(last, ars.main(["--play", checkpoint(4), "--episodes", "2"]))


@pytest.mark.parametrize("target", [1e9, 0.0])  # Pendulum's returns are negative: 0.0 is missed
def test_a_run_that_misses_its_target_says_so_with_its_best_evaluation(tmp_path, capsys, target):
    result = run(tmp_path, iterations=4, target_return=target)
    assert result["status"] == "done"
    with open(os.path.join(result["run_dir"], "progress.csv")) as f:
        evaluations = [float(row["eval_return_mean"]) for row in csv.DictReader(f)]
    best = np.nanmax(evaluations)
    said = f"the target {target} was not reached: the best evaluation was {best:.1f}"
    assert said in capsys.readouterr().out


def test_the_progress_line_shows_the_best_evaluation_against_a_target_and_the_cap(tmp_path, capsys):
    def lines() -> list:
        return [line for line in capsys.readouterr().out.splitlines() if line.startswith("it ")]

    half = run(tmp_path, iterations=2, target_return=1e9)
    first = lines()
    with open(Path(half["run_dir"], "progress.csv")) as f:
        best = max(
            float(r["eval_return_mean"])
            for r in csv.DictReader(f)
            if r["eval_return_mean"] != "nan"
        )
    assert "| eval       - (best - of 1e+09) |" in first[0]  # no evaluation yet
    assert f"(best {best:.1f} of 1e+09)" in first[-1] and "cap 2 in" in first[-1]
    assert "ETA" not in first[-1]
    ars.main(["--resume", half["run_dir"], "--iterations", "4"])
    third = lines()[0]  # iteration 3, no evaluation: the best so far, read from the log
    assert third.startswith("it     3") and f"(best {best:.1f} of 1e+09)" in third
    run(tmp_path / "no_target", iterations=1)
    plain = lines()[-1]
    assert "ETA" in plain and "best" not in plain and "cap" not in plain


def test_the_line_a_stop_prints_resumes_the_run_when_pasted(tmp_path, capsys):
    ars.STOP.set()  # a Ctrl-C before the first iteration
    try:
        stopped = run(tmp_path / "a folder with spaces", iterations=2)
    finally:
        ars.STOP.clear()
    assert stopped["status"] == "interrupted" and stopped["iteration"] == 0
    (line,) = capsys.readouterr().err.splitlines()
    command = shlex.split(line.split("resume with ")[1])
    assert command == ["python", "ars.py", "--resume", stopped["run_dir"]]
    resumed = ars.main([*command[2:], "--iterations", "2"])
    np.testing.assert_array_equal(resumed["M"], run(tmp_path / "b", iterations=2)["M"])


@POSIX_ONLY
def test_one_master_per_run_directory_and_a_killed_one_does_not_block_it(tmp_path):
    """A second master on a run directory that a live one writes is refused in one line and
    writes nothing; once the first is killed outright (SIGKILL), --resume goes on."""
    argv = ["--env", "Pendulum-v1", "--n-directions", "2", "--top-b", "1", "--workers", "2"]
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "ars.py"), *argv, "--iterations", "100000"]
        + ["--save-every", "1", "--out-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        for line in proc.stdout:
            if line.startswith("it     2"):  # iteration 1 is checkpointed
                break
        os.killpg(proc.pid, signal.SIGSTOP)  # it writes nothing while the second one tries
        (run_dir,) = glob.glob(str(tmp_path / "*__*"))
        before = {p.name: p.read_bytes() for p in Path(run_dir).rglob("*") if p.is_file()}
        out = cli("--resume", run_dir, "--iterations", "100000")
        assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
        assert f"another ars.py is writing '{run_dir}'" in out.stderr
        assert {p.name: p.read_bytes() for p in Path(run_dir).rglob("*") if p.is_file()} == before
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    with np.load(os.path.join(run_dir, "checkpoints", "latest.npz")) as f:
        iterations = str(int(f["iteration"]) + 1)
    out = cli("--resume", run_dir, "--iterations", iterations, "--workers", "1")
    assert out.returncode == 0 and f"done, iteration {iterations}" in out.stdout, out.stderr


@pytest.mark.parametrize("method", START_METHODS)
def test_mujocos_warning_of_gymnasiums_models_is_silenced_in_the_master_and_its_workers(
    tmp_path, method
):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} on this system")
    pytest.importorskip("mujoco")  # HalfCheetah-v5's model has a settotalmass MuJoCo warns of
    argv = ["--env", "HalfCheetah-v5", "--n-directions", "2", "--top-b", "1", "--iterations", "1"]
    argv += ["--episode-length", "5", "--eval-episodes", "1", "--workers", "2", "--out-dir", "runs"]
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "ars.py"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=with_start_method(method),
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert os.listdir(tmp_path) == ["runs"]  # no MUJOCO_LOG.TXT either
