"""Tests of ars.py: the math, the behaviour of a run, the command line and its bad input."""

import csv
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import refused

import ars

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORK_ONLY = pytest.mark.usefixtures("fork_start")  # the test's environments reach workers by fork


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
    # The same with many directions: the full sum over the top b.
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
    merged = (0, np.zeros(4), np.zeros(4))
    for part in np.split(x, [1, 7, 300, 301, 999]):
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
    total, shaped, steps, stats = ars.rollout(
        env, np.zeros((1, 3)), np.zeros(3), np.ones(3), 0, shift=1.0, reward_clip=0.5, keep_obs=True
    )
    env2 = gym.make("Pendulum-v1")
    env2.reset(seed=0)
    rewards = [env2.step(np.zeros(1))[1] for _ in range(200)]
    assert steps == 200 and stats[0] == 200
    assert total == pytest.approx(sum(rewards))
    assert shaped == pytest.approx(sum(np.clip(rewards, -0.5, 0.5) - 1.0))


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


def test_rollout_acts_with_the_normalized_linear_policy_of_eq_2_clipped_or_raw():
    env = RecordingEnv()
    M = np.array([[0.3, -0.2, 0.1], [1.0, 0.5, -2.0]])
    mu, inv_sigma = np.array([0.1, -1.0, 2.0]), np.array([2.0, 0.5, 1.0])
    total, shaped, steps, stats = ars.rollout(env, M, mu, inv_sigma, env_seed=3, keep_obs=True)
    expected = np.array([np.clip(M @ ((x - mu) * inv_sigma), -0.5, 0.5) for x in env.obs[:-1]])
    np.testing.assert_allclose(env.actions, expected)
    assert np.abs(expected).max() > 0 and (np.abs(expected) == 0.5).any()  # clipping happened
    n, mean, m2 = stats
    np.testing.assert_allclose(mean, np.mean(env.obs[:-1], axis=0))  # the last state: not acted on
    assert (total, shaped, steps, n) == (20.0, 20.0, 20, 20)
    ars.rollout(env, M, np.zeros(3), np.ones(3), env_seed=3, clip_actions=False)  # --actions raw
    expected = np.array([M @ x for x in env.obs[:-1]])
    np.testing.assert_allclose(env.actions, expected)
    assert (np.abs(expected) > 0.5).any()  # beyond the bounds, and sent as they are


class SeedRecorder(gym.Env):
    """Records the seed of every reset, in this process (tests/test_es_basic.py uses it too)."""

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


def walk(env, seed: int, scale: float = 1.0) -> np.ndarray:
    """The observations of one BipedalWalker episode of open-loop leg swings (up to 1,600 steps)."""
    phases = np.array([0, np.pi, np.pi / 2, 1.5 * np.pi])
    actions = scale * 0.6 * np.sin(0.15 * np.arange(1600)[:, None] + phases)
    x, _ = ars.reset_env(env, seed)
    xs = [x]
    for a in actions:
        x, _, terminated, truncated, _ = env.step(a)
        xs.append(x)
        if terminated or truncated:
            break
    return np.array(xs)


def test_a_bipedalwalker_episode_does_not_depend_on_the_episodes_before_it():
    """Box2D's world outlives BipedalWalker's episodes: with a plain env.reset, seeds 21 and 29
    give another episode on an environment that ran other episodes before."""
    used, scales = gym.make("BipedalWalker-v3"), np.random.default_rng(0)
    for seed in range(5, 30):
        for k in range(4):
            walk(used, 100 + k, scale=scales.uniform(0.5, 1.0))
        a, b = walk(gym.make("BipedalWalker-v3"), seed), walk(used, seed)
        assert a.shape == b.shape and np.array_equal(a, b), seed


# ---------------------------------------------------------------- behaviour of a run


def run(tmp_path, **kw):
    kw = dict(env="Pendulum-v1", iterations=4, n_directions=4, top_b=2, eval_every=2) | kw
    kw = dict(eval_episodes=2, workers=1, seed=5, out_dir=tmp_path) | kw
    return ars.train(config(**kw))


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """Six uninterrupted iterations: what a resumed, stopped or watched run must equal."""
    return run(tmp_path_factory.mktemp("full"), iterations=6)


def assert_resumes_to(full: dict, run_dir: str, *more):
    """Resume run_dir to full's 6 iterations: the same M, and a log with every iteration once and
    the same training and evaluation returns as full's."""
    resumed = ars.main(["--resume", run_dir, "--iterations", "6", *more])
    np.testing.assert_array_equal(full["M"], resumed["M"])
    rows, full_rows = (
        [r.split(",") for r in Path(d, "progress.csv").read_text().splitlines()[1:]]
        for d in (run_dir, full["run_dir"])
    )
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "5", "6"]
    assert [(r[4], r[8]) for r in rows] == [(r[4], r[8]) for r in full_rows]


def test_same_seed_gives_identical_results_with_any_worker_count(full, tmp_path):
    two = run(tmp_path / "two", iterations=6, workers=2)
    np.testing.assert_array_equal(full["M"], two["M"])
    np.testing.assert_array_equal(full["stats"][2], two["stats"][2])
    assert full["env_steps"] == two["env_steps"]
    assert not np.allclose(full["M"], run(tmp_path / "other", iterations=6, seed=6)["M"])


def test_resume_from_an_older_checkpoint_equals_an_uninterrupted_run(full, tmp_path):
    """Killed before its checkpoint of iteration 4: the log's later rows are redone, on two
    workers; --nu and --target-return may be given anew, the rest is the saved run's."""
    half = run(tmp_path, iterations=4, save_every=2)
    ck = os.path.join(half["run_dir"], "checkpoints")
    shutil.copy(os.path.join(ck, "iter_000002.npz"), os.path.join(ck, "latest.npz"))
    assert_resumes_to(full, half["run_dir"], "--workers", "2")
    args = ars.parse(["--resume", half["run_dir"], "--nu", "0.5", "--target-return", "80"])
    assert (args.nu, args.target_return, args.n_directions, args.seed) == (0.5, 80.0, 4, 5)


def test_a_stop_ends_the_run_after_its_iteration_and_the_line_it_prints_resumes_it(
    full, tmp_path, monkeypatch, capsys
):
    """Ctrl-C or SIGTERM while iteration 4 is evaluated: the iteration is finished and logged, the
    run ends before the next one, and the command it prints, pasted, goes on as if not stopped."""
    evaluate = ars.evaluate

    def stopped(pool, state, *a):
        if state["iteration"] == 4:
            ars.STOP.set()
        return evaluate(pool, state, *a)

    monkeypatch.setattr(ars, "evaluate", stopped)
    try:
        half = run(tmp_path / "a folder with spaces", iterations=6)
    finally:
        ars.STOP.clear()
    assert half["status"] == "interrupted" and half["iteration"] == 4
    monkeypatch.setattr(ars, "evaluate", evaluate)
    line = capsys.readouterr().err.splitlines()[-1]
    command = shlex.split(line.split("resume with ")[1])
    assert command == ["python", "ars.py", "--resume", half["run_dir"]]
    assert_resumes_to(full, half["run_dir"])


def test_evaluations_and_videos_leave_the_training_alone_and_play_takes_a_checkpoint(
    full, tmp_path, capsys
):
    """Evaluations and --video-every play episodes of their own streams and never touch M or the
    normalizer; --play RUN_DIR/checkpoints/iter_XXXXXX.npz plays that iteration's policy."""
    often = run(tmp_path, iterations=6, eval_every=1, eval_episodes=3, video_every=4)
    np.testing.assert_array_equal(full["M"], often["M"])
    np.testing.assert_array_equal(full["stats"][2], often["stats"][2])
    assert full["env_steps"] == often["env_steps"]
    videos = sorted(os.listdir(os.path.join(often["run_dir"], "video")))
    assert videos == ["iter_000004.gif"]  # every 4th iteration
    assert Path(often["run_dir"], "video", videos[0]).read_bytes()[:6] == b"GIF89a"
    checkpoint = os.path.join(often["run_dir"], "checkpoints", "iter_00000{}.npz").format
    first = ars.main(["--play", checkpoint(1), "--episodes", "2"])
    last = ars.main(["--play", often["run_dir"], "--episodes", "2"])
    assert not np.allclose(first, last)  # another policy, on the same two episodes
    np.testing.assert_array_equal(last, ars.main(["--play", checkpoint(6), "--episodes", "2"]))
    assert "Pendulum-v1: mean return" in capsys.readouterr().out


def test_raw_actions_in_training_evaluation_resume_and_play(tmp_path):
    # MountainCarContinuous clamps the force but charges 0.1 a^2 on the action sent: one policy
    # whose actions leave [-1, 1] earns less with raw actions, on the very same course.
    kw = dict(env="MountainCarContinuous-v0", episode_length=50, alpha=50.0, nu=5.0)
    kw.update(n_directions=2, top_b=1)
    params = (0, np.array([[40.0, 40.0]]), np.zeros(2), np.ones(2), 5.0)
    for kind in ("train", "eval"):
        clipped, raw = (
            ars.job(config(**kw, actions=a), params, kind, 0) for a in ("clipped", "raw")
        )
        if kind == "train":  # the + rollout
            clipped, raw = clipped[0], raw[0]
        assert raw[2] == clipped[2] == 50 and raw[0] < clipped[0] - 1.0
    whole = run(tmp_path / "whole", actions="raw", iterations=4, **kw)
    half = run(tmp_path / "half", actions="raw", iterations=2, **kw)
    resumed = ars.main(["--resume", half["run_dir"], "--iterations", "4"])  # raw, as saved
    np.testing.assert_array_equal(whole["M"], resumed["M"])
    assert not np.array_equal(whole["M"], run(tmp_path / "clipped", iterations=4, **kw)["M"])
    path = Path(whole["run_dir"], "config.json")
    played = {}
    for actions in ("raw", "clipped"):  # --play acts as config.json says
        path.write_text(json.dumps({**json.loads(path.read_text()), "actions": actions}))
        played[actions] = ars.main(["--play", whole["run_dir"], "--episodes", "2"])
    assert (played["raw"] < played["clipped"] - 1.0).all()


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


def test_a_target_must_be_confirmed_on_fresh_episodes(full, tmp_path, monkeypatch, capsys):
    evaluate = ars.evaluate

    def lucky(pool, state, args, episodes):  # every screen passes, and no confirmation
        return evaluate(pool, state, args, episodes) + (1e9 if episodes.start == 0 else 0)

    monkeypatch.setattr(ars, "evaluate", lucky)
    never = run(tmp_path / "a", iterations=6, target_return=1e6, confirm_episodes=3)
    assert never["status"] == "done" and never["iteration"] == 6
    np.testing.assert_array_equal(full["M"], never["M"])  # confirmations leave the training alone
    said = [line for line in capsys.readouterr().out.splitlines() if "fresh episodes" in line]
    assert len(said) == 3 and said[0].endswith(": the run goes on")  # iterations 2, 4, 6
    with open(Path(never["run_dir"], "progress.csv")) as f:
        confirmed = [row["confirm_return_mean"] for row in csv.DictReader(f)]
    assert confirmed[0] == "nan" and float(confirmed[1]) < 0
    once = run(tmp_path / "b", iterations=6, target_return=-1e9, confirm_episodes=3)
    assert once["status"] == "target" and once["iteration"] == 2


def test_a_target_shows_the_best_evaluation_and_a_missed_one_says_so(tmp_path, capsys):
    half = run(tmp_path, iterations=2, target_return=0.0)  # Pendulum's returns are negative
    first = [line for line in capsys.readouterr().out.splitlines() if line.startswith("it ")]
    assert "| eval       - (best - of 0) |" in first[0] and "cap 2 in" in first[1]
    assert "ETA" not in first[1]
    ars.main(["--resume", half["run_dir"], "--iterations", "4"])
    out = capsys.readouterr().out
    with open(Path(half["run_dir"], "progress.csv")) as f:
        evals = [float(row["eval_return_mean"]) for row in csv.DictReader(f)]  # at 2 and 4
    third = next(line for line in out.splitlines() if line.startswith("it     3"))
    assert f"(best {evals[1]:.1f} of 0)" in third  # the best so far, read from the log
    said = f"the target 0.0 was not reached: the best evaluation was {np.nanmax(evals):.1f}"
    assert said in out


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


class NanRewardEnv(NanEnv):
    """Observes 1 always; the reward is the action, and NaN once |a| > 0.3."""

    def step(self, a):
        self.t += 1
        return np.ones(1), (np.nan if abs(a[0]) > 0.3 else float(a[0])), False, self.t >= 5, {}


class CrashLaterEnv(NanEnv):
    """Dies at the start of its 13th episode: with one worker and 2 directions (4 episodes an
    iteration), the first episode of iteration 4."""

    def reset(self, seed=None, options=None):
        self.episodes = getattr(self, "episodes", 0) + 1
        if self.episodes == 13:
            os._exit(3)  # a worker process that dies without a word
        return super().reset(seed=seed)


gym.register("NanTest-v0", entry_point=NanEnv, max_episode_steps=100)
gym.register("NanRewardTest-v0", entry_point=NanRewardEnv, max_episode_steps=100)
gym.register("CrashLaterTest-v0", entry_point=CrashLaterEnv, max_episode_steps=100)


@FORK_ONLY
@pytest.mark.parametrize("env_id", ["NanTest-v0", "NanRewardTest-v0"])  # observations, returns
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


@FORK_ONLY
def test_a_dying_worker_ends_the_run_with_its_last_finished_iteration(tmp_path, capsys):
    argv = ["--env", "CrashLaterTest-v0", "--iterations", "10", "--n-directions", "2"]
    argv += ["--top-b", "1", "--version", "1", "--nu", "0.01", "--alpha", "0.01", "--seed", "5"]
    with pytest.raises(SystemExit) as stop:
        ars.main([*argv, "--eval-every", "100", "--workers", "1", "--out-dir", str(tmp_path)])
    assert stop.value.code == 1 and "a worker process died" in capsys.readouterr().err
    (run_dir,) = glob.glob(str(tmp_path / "CrashLaterTest-v0__ars__*"))
    ck = np.load(os.path.join(run_dir, "checkpoints", "latest.npz"), allow_pickle=False)
    assert int(ck["iteration"]) == 3 and int(ck["episodes"]) == 12


# ---------------------------------------------------------------- the command line


def test_presets_fill_unset_flags_and_help_shows_them(capsys):
    args = ars.parse(["--env", "Hopper-v5", "--alpha", "0.5"])
    assert (args.alpha, args.nu, args.n_directions, args.top_b, args.shift) == (0.5, 0.025, 8, 4, 1)
    assert ars.parse(["--env", "Pendulum-v1"]).n_directions == ars.GENERIC["n_directions"]
    with pytest.raises(SystemExit) as stop:
        ars.main(["--env", "Hopper-v5", "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and "The defaults shown are Hopper-v5's preset." in out
    assert "(default: 0.025)" in out and "(default: runs)" in out  # ν, --out-dir
    table = out[out.index("presets (a flag overrides its preset)") :].splitlines()
    assert [row.split()[0] for row in table[2:]] == [*ars.PRESETS, "any"]
    assert table[3].split()[1:6] == ["0.01", "0.025", "8", "4", "2"]  # Hopper: α ν N b V


def test_command_line_run_writes_the_run_directory(tmp_path):
    argv = "--env Pendulum-v1 --iterations 3 --n-directions 2 --top-b 1 --eval-every 1"
    argv += " --eval-episodes 1 --workers 2"
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "ars.py"), *argv.split(), "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    (run_dir,) = glob.glob(str(tmp_path / "Pendulum-v1__ars__0__*"))
    cfg = json.loads(Path(run_dir, "config.json").read_text())
    assert cfg["alpha"] == ars.GENERIC["alpha"] and cfg["numpy"] == np.__version__
    assert cfg["command"].startswith(f"python ars.py {argv}")  # the same run again
    header, *rows = Path(run_dir, "progress.csv").read_text().splitlines()
    assert header.split(",") == ars.COLUMNS and len(rows) == 3
    assert os.path.getsize(os.path.join(run_dir, "progress.png")) > 1000
    assert os.path.exists(os.path.join(run_dir, "checkpoints", "latest.npz"))
    assert out.stdout.count("\nit ") == 3 and "eval" in out.stdout  # a progress line each


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env", "BipedalWalke-v3"], "Did you mean: `BipedalWalker`?"),
        (["--env", "CartPole-v1"], "ARS takes a flat Box of observations and Box actions"),
        (
            ["--env", "Pendulum-v1", "--n-directions", "4", "--top-b", "5"],
            "--top-b must be <= --n-directions 4",
        ),
        (["--env", "Pendulum-v1", "--alpha", "0"], "--alpha: must be > 0"),
        (["--env", "Pendulum-v1", "--nu", "nan"], "--nu: must be > 0"),
        (["--env", "Pendulum-v1", "--workers", "0"], "--workers: must be >= 1"),
        (["--env", "Pendulum-v1", "--iterations", "abc"], "invalid number value: 'abc'"),
        (["--env", "Pendulum-v1"], "cannot write"),  # --out-dir under a file
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, argv, message):
    if message == "cannot write":  # refused() gives --out-dir tmp_path/out: here under a file
        tmp_path = tmp_path / "a_file"
        tmp_path.write_text("")
    assert message in refused(ars, tmp_path, *argv)


def test_one_master_per_run_directory_and_a_killed_one_does_not_block_it(tmp_path):
    """A second master on a run directory that a live one writes is refused in one line and
    writes nothing; once the first is killed outright, --resume goes on."""
    run_dir = run(tmp_path, iterations=1)["run_dir"]
    holder = "import ars, sys, time; f = ars.lock(sys.argv[1]); print(flush=True); time.sleep(120)"
    proc = subprocess.Popen(
        [sys.executable, "-c", holder, run_dir], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        proc.stdout.readline()  # the lock is taken
        before = {p.name: p.read_bytes() for p in Path(run_dir).rglob("*") if p.is_file()}
        line = refused(ars, tmp_path, "--resume", run_dir, "--iterations", "2")
        assert f"another ars.py is writing '{run_dir}'" in line
        assert {p.name: p.read_bytes() for p in Path(run_dir).rglob("*") if p.is_file()} == before
    finally:
        proc.kill()
        proc.wait()
    assert ars.main(["--resume", run_dir, "--iterations", "2"])["status"] == "done"
