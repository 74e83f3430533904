"""Tests of es_openai.py: the math by hand, the policy, the noise table and the workers, a run's
behaviour, every option combination, the command line and every bad input."""

import glob
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import POSIX_ONLY, only_builtin_types, refused

import es_openai as eo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORK_ONLY = pytest.mark.usefixtures("fork_start")  # the test's environments reach workers by fork


def cli(*argv, timeout=240):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "es_openai.py"), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def config(**kw):
    """The parsed and resolved configuration of `es_openai.py` with these flags."""
    argv = []
    for key, value in kw.items():
        argv += [f"--{key.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return eo.configure(eo.parse(argv))


TINY = dict(
    env="CartPole-v1",
    iterations=3,
    population=6,
    hidden="8",
    eval_every=1,
    eval_episodes=2,
    noise_size=100_000,
    workers=1,
)


def run(tmp_path, **kw):
    return eo.train(config(**{**TINY, "out_dir": tmp_path, **kw}))


def csv_rows(run_dir):
    import csv

    with open(os.path.join(run_dir, "progress.csv")) as f:
        return list(csv.DictReader(f))


def policy(args, thetas, ob_mean, ob_std, ob_clip=True):
    return eo.Policy(
        thetas, args.sizes, args.activation, args.act, args.ac_bins, ob_mean, ob_std, ob_clip
    )


def task(args, theta, std=1.0):
    return dict(
        theta=theta,
        ob_mean=np.zeros(args.sizes[0]),
        ob_std=np.full(args.sizes[0], std),
        ob_clip=True,
    )


# ---------------------------------------------------------------- the math


def test_centered_ranks_and_sign_shaping_by_hand():
    np.testing.assert_allclose(
        eo.centered_ranks(np.array([3.0, 1.0, 2.0, 10.0, -4.0])), [0.25, -0.25, 0.0, 0.5, -0.5]
    )
    np.testing.assert_allclose(
        eo.centered_ranks(np.array([1.0, 1.0, 3.0])), [-0.25, -0.25, 0.5]
    )  # ties share
    returns = np.array([[5.0, 1.0], [2.0, 7.0]])
    signs = np.array([[0.0, 4.0], [3.0, -2.0]])  # ranked in another order than the returns
    np.testing.assert_allclose(
        eo.shape_fitness(returns, signs, "centered_rank"), [[1 / 6, -0.5], [-1 / 6, 0.5]]
    )
    np.testing.assert_allclose(eo.shape_fitness(returns, signs, "sign"), signs)
    np.testing.assert_allclose(
        eo.shape_fitness(returns, signs, "centered_sign_rank"), [[-1 / 6, 0.5], [1 / 6, -0.5]]
    )
    np.testing.assert_allclose(eo.shape_fitness(returns, signs, "none"), returns)


def test_an_episode_counts_its_return_the_signs_of_its_rewards_and_its_observations():
    class Steps(gym.Env):
        observation_space, action_space = gym.spaces.Box(-9, 9, (1,)), gym.spaces.Box(-1, 1, (1,))
        rewards = [2.0, -0.5, 0.0, 3.0, 1.0]

        def reset(self, seed=None, options=None):
            self.t = 0
            return np.zeros(1), {}

        def step(self, a):
            self.t += 1
            return np.full(1, float(self.t)), self.rewards[self.t - 1], False, self.t == 5, {}

    env = Steps()
    one = eo.Policy(
        [np.zeros(2, np.float32)], [1, 1], "tanh", env.action_space, 0, np.zeros(1), np.ones(1)
    )
    ((total, signs, steps, (ob_sum, ob_sumsq)),) = eo.rollouts([env], one, [0], keep=[True])
    assert (total, signs, steps) == (5.5, 2.0, 5)
    np.testing.assert_array_equal(
        [ob_sum, ob_sumsq], [[0 + 1 + 2 + 3 + 4], [0 + 1 + 4 + 9 + 16]]
    )  # not the last


def test_batched_weighted_sum_and_the_gradient_equal_a_plain_loop():
    rng = np.random.default_rng(0)
    table = rng.standard_normal(1000).astype(np.float32)
    idx, w, dim = rng.integers(0, 1000 - 37, 23), rng.standard_normal(23), 37
    loop = sum(w[i] * table[idx[i] : idx[i] + dim] for i in range(23))
    np.testing.assert_allclose(
        eo.batched_weighted_sum(w, idx, table, dim, batch_size=5), loop, rtol=1e-5, atol=1e-5
    )
    F = np.array([[0.5, -0.5], [0.0, 0.25]])  # mirrored: w = F+ - F-, over n = 4 episodes
    np.testing.assert_allclose(
        eo.es_gradient(F, idx[:2], table, dim),
        (1.0 * table[idx[0] : idx[0] + dim] - 0.25 * table[idx[1] : idx[1] + dim]) / 4,
        rtol=1e-5,
        atol=1e-6,
    )
    single = np.array([[0.5], [-0.25]])  # no mirroring: w = F, over n = 2 episodes
    np.testing.assert_allclose(
        eo.es_gradient(single, idx[:2], table, dim),
        (0.5 * table[idx[0] : idx[0] + dim] - 0.25 * table[idx[1] : idx[1] + dim]) / 2,
        rtol=1e-5,
        atol=1e-6,
    )


def state_of(theta):
    return dict(theta=theta, opt_m=0 * theta, opt_v=0 * theta, opt_t=0)


def test_adam_sgd_and_plain_steps_by_hand():
    theta, g1, g2 = (
        np.zeros(2, np.float32),
        np.array([1.0, -2.0], np.float32),
        np.array([0.5, 0.5], np.float32),
    )
    args = config(env="Pendulum-v1", alpha=0.1, beta1=0.9, beta2=0.999, l2coeff=0, noise_size=10**5)
    s1 = eo.update(
        state_of(theta), -g1, args
    )  # the optimizer minimizes -g: its gradient here is g1
    np.testing.assert_allclose(
        s1["theta"], [-0.1, 0.1], rtol=1e-5
    )  # first Adam step: -alpha sign(grad)
    s2 = eo.update(s1, -g2, args)
    m, v = 0.9 * 0.1 * g1 + 0.1 * g2, 0.999 * 0.001 * g1**2 + 0.001 * g2**2
    a = 0.1 * np.sqrt(1 - 0.999**2) / (1 - 0.9**2)
    np.testing.assert_allclose(s2["theta"] - s1["theta"], -a * m / (np.sqrt(v) + 1e-8), rtol=1e-5)
    assert s2["opt_t"] == 2
    args = config(
        env="Pendulum-v1", optimizer="sgd", alpha=0.1, momentum=0.9, l2coeff=0, noise_size=10**5
    )
    s1 = eo.update(state_of(theta), -g1, args)
    np.testing.assert_allclose(s1["theta"], -0.1 * 0.1 * g1, rtol=1e-6)
    np.testing.assert_allclose(
        eo.update(s1, -g2, args)["theta"] - s1["theta"],
        -0.1 * (0.9 * 0.1 * g1 + 0.1 * g2),
        rtol=1e-6,
    )


def test_weight_decay_and_the_plain_step_divided_by_sigma():
    theta, g = np.array([1.0, -1.0], np.float32), np.array([0.2, 0.4], np.float32)
    args = config(
        env="Pendulum-v1", optimizer="plain", alpha=0.1, sigma=0.5, l2coeff=0.01, noise_size=10**5
    )
    np.testing.assert_allclose(
        eo.update(state_of(theta), g, args)["theta"],
        theta - 0.1 * (-g / 0.5 + 0.01 * theta),
        rtol=1e-6,
    )
    args = config(
        env="Pendulum-v1",
        optimizer="sgd",
        alpha=0.1,
        sigma=0.5,
        l2coeff=0.01,
        momentum=0.0,
        noise_size=10**5,
    )
    np.testing.assert_allclose(
        eo.update(state_of(theta), g, args)["theta"], theta - 0.1 * (-g + 0.01 * theta), rtol=1e-6
    )


def test_normc_columns_have_norm_one_and_the_output_layer_one_hundredth():
    sizes = [5, 16, 16, 3]
    layers = eo.unflatten(eo.normc_init(sizes, np.random.default_rng(0)), sizes)
    for j, (W, b) in enumerate(layers):
        np.testing.assert_allclose(
            np.linalg.norm(W, axis=0), 0.01 if j == len(layers) - 1 else 1.0, rtol=1e-5
        )
        assert not b.any()


def test_observation_statistics_give_mean_and_std_with_the_floor():
    x = np.random.default_rng(0).normal([1.0, 5.0], [2.0, 0.01], size=(20000, 2))
    state = dict(ob_sum=np.zeros(2), ob_sumsq=np.full(2, 1e-2), ob_count=1e-2)
    for part in np.array_split(x, 3):  # sums add up across workers
        state = dict(
            ob_sum=state["ob_sum"] + part.sum(0),
            ob_sumsq=state["ob_sumsq"] + np.square(part).sum(0),
            ob_count=state["ob_count"] + len(part),
        )
    mean, std = eo.ob_mean_std(state)
    np.testing.assert_allclose(mean, x.mean(0), rtol=1e-3)
    np.testing.assert_allclose(std, [x.std(0)[0], 0.1], rtol=1e-2)  # 0.01 is floored to 0.1


def test_the_policy_normalizes_clips_and_maps_bins_to_bounds():
    space = gym.spaces.Box(np.array([-1.0, -2.0], np.float32), np.array([1.0, 2.0], np.float32))
    sizes = [3, 6]  # linear: 2 dimensions x 3 bins
    theta = np.zeros(24, np.float32)
    b = eo.unflatten(theta, sizes)[0][1]
    b[:] = [5, 0, 0, 0, 0, 5]  # dimension 0 -> bin 0 (low), dimension 1 -> bin 2 (high)

    def act(noise=None):
        policy = eo.Policy([theta], sizes, "tanh", space, 3, np.zeros(3), np.ones(3))
        return policy(np.zeros((1, 3)), noise)

    np.testing.assert_allclose(act(), [[-1.0, 2.0]])
    b[:] = [0, 5, 0, 0, 5, 0]  # middle bins: the middle of the bounds
    np.testing.assert_allclose(act(), [[0.0, 0.0]])
    np.testing.assert_allclose(act(np.array([[5.0, -0.5]])), [[1.0, -0.5]])  # noise, clipped
    theta2 = np.zeros(8, np.float32)
    eo.unflatten(theta2, [3, 2])[0][0][0, 0] = 0.1
    cont = eo.Policy([theta2], [3, 2], "tanh", space, 0, np.full(3, 2.0), np.full(3, 0.5))
    # (o - mean) / std clipped to [-5, 5] before the layer, then 0.1 * 5
    np.testing.assert_allclose(cont(np.array([[100.0, 0, 0]])), [[0.5, 0.0]], rtol=1e-6)
    raw = eo.Policy([theta2], [3, 2], "tanh", space, 0, np.zeros(3), np.ones(3), ob_clip=False)
    np.testing.assert_allclose(raw(np.array([[9.0, 0, 0]])), [[0.9, 0.0]], rtol=1e-6)  # raw


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_the_policy_is_the_network_it_names(activation):
    """Eqs. (9)-(11) written out: normalize and clip, f(x W + b) per hidden layer, W x + b out."""
    rng = np.random.default_rng(0)
    space = gym.spaces.Box(-np.ones(3, np.float32), np.ones(3, np.float32))
    sizes = eo.layer_sizes(7, [16, 16], space, 0)
    thetas = [rng.standard_normal(eo.n_params(sizes)).astype(np.float32) for _ in range(2)]
    ob_mean, ob_std = rng.standard_normal(7), rng.uniform(0.5, 2.0, 7)
    pair = eo.Policy(thetas, sizes, activation, space, 0, ob_mean, ob_std)
    alone = [eo.Policy([theta], sizes, activation, space, 0, ob_mean, ob_std) for theta in thetas]
    f = np.tanh if activation == "tanh" else (lambda z: np.maximum(z, 0.0))
    for _ in range(20):
        obs = 4 * rng.standard_normal((2, 7))  # often past the clip at +-5 once normalized
        together = pair(obs)
        for theta, pi, ob, a in zip(thetas, alone, obs, together):
            np.testing.assert_array_equal(pi(ob[None])[0], a)  # a row does not see the other
            x = np.clip((ob - ob_mean) / ob_std, -5, 5)
            (W1, b1), (W2, b2), (W3, b3) = eo.unflatten(theta, sizes)
            y = f(f(x @ W1 + b1) @ W2 + b2) @ W3 + b3
            np.testing.assert_allclose(a, np.clip(y, -1, 1), rtol=1e-5, atol=1e-6)


def test_elu_is_a_real_elu_and_lrelu_leaks():
    for activation, want in (("elu", [np.expm1(-2.0), 0.0, 3.0]), ("lrelu", [-0.02, 0.0, 3.0])):
        z = np.array([-2.0, 0.0, 3.0])
        eo.activate(z, activation)
        np.testing.assert_allclose(z, want)


# ---------------------------------------------------------------- the jobs a worker runs


@pytest.mark.parametrize(
    "env_id, extra",
    [("CartPole-v1", {}), ("Pendulum-v1", {"ac_noise_std": 0.3}), ("Pendulum-v1", {"ac_bins": 5})],
)
def test_a_pair_job_is_its_two_episodes_and_the_same_stepped_with_others(env_id, extra):
    args = config(
        **{**TINY, "env": env_id, "sigma": 0.5, "calc_obstat_prob": 0.5, "eval_prob": 0.25, **extra}
    )
    _, table = eo.noise_table(100_000, 123, shared=False)
    theta = eo.normc_init(args.sizes, np.random.default_rng(1))
    t = task(args, theta, 0.5)
    jobs = [("train", 3, k) for k in range(8)] + [("eval", 3, 0)]
    together = eo.run_jobs([eo.make_env(env_id)], args, table, t, jobs)
    assert only_builtin_types(together) and [k for k, _ in together] == [job[2] for job in jobs]
    results = [r for _, r in together]
    for job, result in zip(jobs, results):  # the same alone: --lockstep cannot change a run
        ((_, alone),) = eo.run_jobs([eo.make_env(env_id)], args, table, t, [job])
        assert result.keys() == alone.keys()
        for name in result:
            np.testing.assert_array_equal(result[name], alone[name])
    kinds = [r["kind"] for r in results]
    assert "noiseless" in kinds and kinds.count("pair") >= 4 and kinds[-1] == "eval"
    for (kind, _, k), r in zip(jobs, results):  # what the master predicts of each job
        assert eo.job_stream(args, kind, 3, k)[1] == (r["kind"] != "pair")
    assert any(r["ob_sum"] is not None for r in results if r["kind"] == "pair")
    for (_, _, k), result in zip(jobs, results):
        if result["kind"] != "pair":
            continue
        rng = eo.stream(
            args.seed, eo.TRAIN, 3, k
        )  # the job's stream, drawn in the documented order
        assert rng.random() >= args.eval_prob
        env_seed, idx = int(rng.integers(2**31)), int(rng.integers(0, len(table) - theta.size + 1))
        keep, eps = bool(rng.random() < args.calc_obstat_prob), table[idx : idx + theta.size]
        assert result["idx"] == idx and (result["ob_sum"] is not None) == keep
        for sign, R in zip((1.0, -1.0), result["returns"]):  # each episode of the pair alone
            pi = policy(args, [theta + sign * 0.5 * eps], t["ob_mean"], t["ob_std"])
            (episode,) = eo.rollouts([eo.make_env(env_id)], pi, [env_seed])
            if not args.ac_noise_std:
                assert episode[0] == R


def test_action_noise_is_for_the_population_episodes_only():
    args, quiet = (
        config(**{**TINY, "env": "Pendulum-v1", "eval_prob": 0.25, "ac_noise_std": s})
        for s in (0.3, 0.0)
    )
    _, table = eo.noise_table(100_000, 123, shared=False)
    t = task(args, eo.normc_init(args.sizes, np.random.default_rng(1)))
    jobs = [("train", 0, k) for k in range(8)] + [("eval", 0, 0)]
    env = [eo.make_env("Pendulum-v1")]
    for job in jobs:
        ((_, r),) = eo.run_jobs(env, args, table, t, [job])
        ((_, q),) = eo.run_jobs(env, quiet, table, t, [job])
        same = r["returns"] == q["returns"] if r["kind"] == "pair" else r == q
        assert same == (r["kind"] != "pair"), r  # evaluations, noiseless episodes: the same bits


# ---------------------------------------------------------------- the noise table and the workers


def workers(args, population=None):  # a Workers of local processes over a shared noise table
    block, table = eo.noise_table(args.noise_size, args.noise_seed)
    return eo.Workers(args, eo.make_pool(args, block), table), block


def close(pool, block):
    pool.pool.shutdown()
    pool.table = None
    block.close()
    block.unlink()


def test_the_noise_table_is_one_shared_copy():
    _, table = eo.noise_table(1000, 123, shared=False)
    np.testing.assert_array_equal(
        table, np.random.default_rng(123).standard_normal(1000, dtype=np.float32)
    )
    args = config(**{**TINY, "workers": 2, "sigma": 0.5})
    pool, block = workers(args)
    t = task(args, eo.normc_init(args.sizes, np.random.default_rng(1)))
    try:
        before, _ = pool.run(t, "train", 0, 12)
        # theta + sigma eps and theta - sigma eps differ
        assert any(r["returns"][0] != r["returns"][1] for r in before.values())
        pool.table[:] = 0.0  # written by the master after the workers started: eps = 0
        after, _ = pool.run(t, "train", 1, 12)
        # a copy would still hold the old numbers
        assert all(r["returns"][0] == r["returns"][1] for r in after.values())
    finally:
        close(pool, block)


def test_results_of_an_older_call_are_dropped_and_counted():
    args = config(**{**TINY, "workers": 2})
    pool, block = workers(args)
    t = task(args, np.zeros(eo.n_params(args.sizes), np.float32))
    try:  # a pair of CartPole has >= 16 steps: the call closes at job 0, job 1 (at least) is out
        first, closed = pool.run(t, "train", 0, 2, min_steps=15)
        handed = len(pool.running) + len(first)  # jobs still running, and those back in time
        assert closed == 1 and handed >= 2
        for key in range(1, 100):  # the ones still running come back during later calls: dropped
            results, _ = pool.run(t, "eval", key, 1)
            assert list(results) == [0] and results[0]["kind"] == "eval"  # only the new call's
            if not pool.running:
                break
        assert len(first) + pool.stale == handed and not pool.running
    finally:
        close(pool, block)


class LastFirst:
    """An executor whose jobs finish newest first, one a millisecond (a thread finishes them)."""

    def __init__(self):
        import threading

        self.pending = []
        self.lock = threading.Lock()
        threading.Thread(target=self.finish, daemon=True).start()

    def submit(self, fn, *args):
        from concurrent.futures import Future

        future = Future()
        with self.lock:
            self.pending.append((future, fn, args))
        return future

    def finish(self):
        while True:
            time.sleep(0.001)
            with self.lock:
                if not self.pending:
                    continue
                future, fn, args = self.pending.pop()
            future.set_result(fn(*args))


def test_a_generation_closes_at_the_shortest_finished_prefix(monkeypatch):
    def pairs(args, task, jobs, table=None):  # 10 steps an episode
        return [pair(job) for job in jobs]

    def pair(job):
        return job[2], dict(
            kind="pair",
            idx=0,
            returns=(1.0, 2.0),
            sign_returns=(0.0, 0.0),
            lengths=(10, 10),
            ob_sum=None,
            ob_sumsq=None,
        )

    monkeypatch.setattr(eo, "work", pairs)
    args = config(**{**TINY, "workers": 2, "population": 4})
    executor = LastFirst()
    pool = eo.Workers(args, executor, None)
    results, closed = pool.run({}, "train", 0, 4)  # 2 pairs: jobs 0 and 1 out, 1 ends first
    assert closed == 2 and sorted(results) == [0, 1]
    results, closed = pool.run({}, "train", 1, 2, min_steps=25)  # 1 pair, but 40 steps
    assert closed == 2 and 0 in results and 1 in results


def tables() -> set:  # the blocks of shared memory of Python's multiprocessing, on Linux
    return {name for name in os.listdir("/dev/shm") if name.startswith("psm_")}


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this system")
def test_a_finished_run_leaves_no_noise_table_behind(tmp_path, monkeypatch):
    made = []
    noise_table = eo.noise_table

    def recorded(*args, **kw):
        block, table = noise_table(*args, **kw)
        made.append(block.name.lstrip("/"))
        return block, table

    monkeypatch.setattr(eo, "noise_table", recorded)
    run(tmp_path, workers=2, iterations=1)
    assert len(made) == 1 and made[0] not in tables()


# ---------------------------------------------------------------- a run


def test_same_seed_gives_identical_results_with_any_worker_count_and_lockstep(tmp_path):
    kw = dict(min_timesteps=200, eval_prob=0.2, calc_obstat_prob=0.5)
    one = run(tmp_path / "one", workers=1, **kw)
    for workers, lockstep in ((2, 4), (1, 1), (2, 3)):
        same = run(tmp_path / f"{workers}-{lockstep}", workers=workers, lockstep=lockstep, **kw)
        for key in ("theta", "ob_sum", "opt_v", "env_steps", "episodes"):
            np.testing.assert_array_equal(one[key], same[key])
    assert not np.array_equal(one["theta"], run(tmp_path / "other", seed=1, **kw)["theta"])


def test_bipedalwalker_runs_are_identical_with_any_worker_count(tmp_path):
    # With a plain env.reset, which episodes an environment played before changed the run.
    kw = dict(env="BipedalWalker-v3", population=8, episode_length=300, eval_every=3, seed=2)
    one = run(tmp_path / "one", workers=1, lockstep=1, **kw)
    two = run(tmp_path / "two", workers=2, lockstep=3, **kw)
    np.testing.assert_array_equal(one["theta"], two["theta"])
    assert one["env_steps"] == two["env_steps"]


def test_resume_equals_an_uninterrupted_run(tmp_path):
    full = run(tmp_path / "full", iterations=6, calc_obstat_prob=0.5)
    half = run(tmp_path / "half", iterations=3, calc_obstat_prob=0.5)
    resumed = eo.main(["--resume", half["run_dir"], "--iterations", "6", "--workers", "1"])
    for key in (
        "theta",
        "ob_sum",
        "ob_sumsq",
        "ob_count",
        "opt_m",
        "opt_v",
        "opt_t",
        "episodes",
        "env_steps",
    ):
        np.testing.assert_array_equal(full[key], resumed[key])

    def strip(rows):
        return [
            {k: v for k, v in r.items() if "time" not in k and k != "steps_per_s"} for r in rows
        ]

    assert strip(csv_rows(full["run_dir"])) == strip(csv_rows(half["run_dir"]))


def test_a_stop_during_an_evaluation_ends_the_run_after_that_generation(tmp_path, monkeypatch):
    # Ctrl-C or SIGTERM while generation 4 is evaluated sets the flag: generation 4 is logged, and
    # --resume goes on from it to the uninterrupted run.
    full = run(tmp_path / "full", iterations=6, eval_every=2)
    evaluate = eo.evaluate

    def stopped(pool, state, *a):
        if state["iteration"] == 4:
            eo.STOP.set()
        return evaluate(pool, state, *a)

    monkeypatch.setattr(eo, "evaluate", stopped)
    try:
        half = run(tmp_path / "half", iterations=6, eval_every=2)
    finally:
        eo.STOP.clear()
    assert half["status"] == "interrupted" and half["iteration"] == 4
    monkeypatch.setattr(eo, "evaluate", evaluate)
    resumed = eo.main(["--resume", half["run_dir"], "--iterations", "6"])
    np.testing.assert_array_equal(full["theta"], resumed["theta"])
    rows, full_rows = csv_rows(half["run_dir"]), csv_rows(full["run_dir"])
    assert [r["iteration"] for r in rows] == ["1", "2", "3", "4", "5", "6"]
    assert [r["eval_return_mean"] for r in rows] == [r["eval_return_mean"] for r in full_rows]


def test_eval_prob_runs_noiseless_episodes_and_logs_them(tmp_path):
    rows = csv_rows(run(tmp_path, iterations=4, population=10, eval_prob=0.2)["run_dir"])
    counts = [int(r["noiseless_count"]) for r in rows]
    assert 0 in counts and sum(counts) > 0  # generations with and without noiseless episodes
    assert all(float(r["noiseless_return_mean"]) > 0 for r, c in zip(rows, counts) if c)
    assert all(r["noiseless_return_mean"] == "nan" for r, c in zip(rows, counts) if not c)
    # noiseless episodes come on top of the population: 10 training episodes in every generation
    assert all(int(r["episodes_this_gen"]) - int(r["noiseless_count"]) == 10 for r in rows)
    assert int(rows[-1]["episodes"]) == sum(int(r["episodes_this_gen"]) for r in rows)


def test_es_learns_cartpole_within_a_tiny_budget(tmp_path):
    result = run(
        tmp_path,
        iterations=15,
        population=20,
        hidden="16",
        sigma=0.05,
        alpha=0.03,
        eval_every=15,
        eval_episodes=10,
    )
    rows = csv_rows(result["run_dir"])
    assert float(rows[-1]["eval_return_mean"]) > 150 > 3 * float(rows[0]["return_mean"])


def test_observation_statistics_come_from_training_pairs_only(tmp_path):
    none = run(
        tmp_path / "a", calc_obstat_prob=1.0, no_obs_norm=True
    )  # without normalization nothing is kept
    some = run(tmp_path / "b", calc_obstat_prob=1.0)
    assert none["ob_count"] == pytest.approx(1e-2)
    assert some["ob_count"] == pytest.approx(
        1e-2 + some["env_steps"]
    )  # every training step, no evaluation


# Every value of every option, in every pair with every value of every other option (a pairwise
# covering set: about 16 runs instead of the 192 of the full product, chosen greedily below).
FACTORS = {
    "fitness": ("centered_rank", "sign", "centered_sign_rank", "none"),
    "optimizer": ("adam", "sgd", "plain"),
    "mirror": (True, False),
    "obs_norm": (True, False),
    "space": (
        ("CartPole-v1", {}),
        ("Pendulum-v1", {"ac_bins": 5, "activation": "elu"}),
        ("Pendulum-v1", {"ac_noise_std": 0.0, "activation": "lrelu", "min_timesteps": 60}),
        ("Pendulum-v1", {"ac_noise_std": 0.1, "activation": "relu", "eval_prob": 0.3}),
    ),
}


def pairwise(factors: dict) -> list:
    names = list(factors)
    todo = {
        (a, i, b, j)
        for a, b in itertools.combinations(range(len(names)), 2)
        for i in range(len(factors[names[a]]))
        for j in range(len(factors[names[b]]))
    }
    chosen, candidates = [], list(itertools.product(*(range(len(factors[n])) for n in names)))
    while todo:
        best = max(
            candidates,
            key=lambda c: sum(
                (a, c[a], b, c[b]) in todo for a, b in itertools.combinations(range(len(c)), 2)
            ),
        )
        todo -= {(a, best[a], b, best[b]) for a, b in itertools.combinations(range(len(best)), 2)}
        chosen.append({n: factors[n][k] for n, k in zip(names, best)})
    return chosen


def test_every_pair_of_option_values_runs_or_is_refused_in_one_line(tmp_path, capsys):
    combos = pairwise(FACTORS)
    assert len(combos) <= 20
    for i, c in enumerate(combos):
        env_id, extra = c["space"]
        kw = dict(
            TINY,
            env=env_id,
            iterations=1,
            population=4,
            eval_episodes=1,
            fitness=c["fitness"],
            optimizer=c["optimizer"],
            episode_length=20,
            **extra,
            **({} if c["mirror"] else {"no_mirror": True}),
            **({} if c["obs_norm"] else {"no_obs_norm": True}),
        )
        if (
            not c["mirror"] and "sign" in c["fitness"]
        ):  # every weight >= 0: refused, with the reason
            assert "needs mirrored sampling" in refused(
                eo,
                tmp_path / str(i),
                *sum(
                    (
                        [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])
                        for k, v in kw.items()
                    ),
                    [],
                ),
            )
            continue
        result = run(tmp_path / str(i), **kw)
        assert (
            result["status"] == "done"
            and result["iteration"] == 1
            and np.isfinite(result["theta"]).all()
        ), c


@pytest.mark.parametrize("option", ["fitness", "optimizer"])
def test_every_value_of_an_option_changes_the_run(tmp_path, option):
    # An option read but ignored would leave theta as the default value gives it.
    base = dict(
        TINY, env="Pendulum-v1", iterations=2, population=4, eval_episodes=1, episode_length=20
    )
    thetas = [run(tmp_path / str(v), **{**base, option: v})["theta"] for v in FACTORS[option]]
    for theta, value in zip(thetas[1:], FACTORS[option][1:]):
        assert not np.array_equal(theta, thetas[0]), value


def test_save_every_zero_keeps_latest_and_no_snapshot(tmp_path):
    result = run(tmp_path, iterations=3, save_every=0)
    assert sorted(os.listdir(os.path.join(result["run_dir"], "checkpoints"))) == ["latest.npz"]


# ---------------------------------------------------------------- bad input, failures, stops


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--env", "CartPole-v1", "--ac-bins", "5"],
            "--ac-bins and --ac-noise-std are for Box actions",
        ),
        (
            ["--env", "CartPole-v1", "--ac-noise-std", "0.1"],
            "--ac-bins and --ac-noise-std are for Box actions",
        ),
        (
            ["--env", "Pendulum-v1", "--ac-bins", "1"],
            "--ac-bins must be 0 (continuous) or at least 2",
        ),
        (["--env", "Pendulum-v1", "--population", "5"], "even with mirrored sampling"),
        (["--env", "Pendulum-v1", "--no-mirror", "--fitness", "sign"], "needs mirrored sampling"),
        (["--env", "Pendulum-v1", "--calc-obstat-prob", "0"], "--calc-obstat-prob must be > 0"),
        (
            ["--env", "Pendulum-v1", "--calc-obstat-prob", "1.5"],
            "--calc-obstat-prob: must be in [0, 1]",
        ),
        (["--env", "Pendulum-v1", "--eval-prob", "1"], "--eval-prob: must be in [0, 1)"),
        (["--env", "Pendulum-v1", "--noise-size", "10"], "smaller than the policy"),
        (["--env", "Pendulum-v1", "--noise-size", str(10**12)], "lower --noise-size"),
        (["--env", "Pendulum-v1", "--sigma", "0"], "--sigma: must be > 0"),
        (["--env", "Pendulum-v1", "--sigma", "nan"], "--sigma: must be > 0"),
        (["--env", "Pendulum-v1", "--alpha", "-1"], "--alpha: must be > 0"),
        (["--env", "Pendulum-v1", "--momentum", "1"], "--momentum: must be in [0, 1)"),
        (["--env", "Pendulum-v1", "--beta2", "1.5"], "--beta2: must be in [0, 1)"),
        (["--env", "Pendulum-v1", "--l2coeff", "-0.1"], "--l2coeff: must be in [0, inf)"),
        (["--env", "Pendulum-v1", "--hidden", "64,x"], "--hidden takes sizes like 64 or 64,64"),
        (["--env", "Pendulum-v1", "--hidden", "0"], "--hidden takes sizes"),
        (["--env", "Pendulum-v1", "--workers", "0"], "--workers: must be >= 1"),
        (["--env", "Pendulum-v1", "--lockstep", "0"], "--lockstep: must be >= 1"),
        (["--env", "Pendulum-v1", "--population", "1"], "--population: must be >= 2"),
        (["--env", "Pendulum-v1", "--fitness", "best"], "invalid choice"),
        (["--env", "Pendulum-v1", "--target-return", "nan"], "--target-return: must be in"),
        (["--env", "HalfCheetah-v9"], "`v5`"),
        (["--env", "Blackjack-v1"], "takes a flat Box of observations"),
    ],
)
def test_bad_flags(tmp_path, argv, message):
    small_table = [] if "--noise-size" in argv else ["--noise-size", "100000"]
    assert message in refused(eo, tmp_path, *argv, *small_table)


def bad(tmp_path, *argv):
    return refused(eo, tmp_path, *argv)


def test_a_resumed_run_takes_its_workers_here_and_refuses_flags_that_change_it(
    tmp_path, monkeypatch
):
    part = run(tmp_path, iterations=1)
    cfg_path = os.path.join(part["run_dir"], "config.json")
    cfg = json.loads(Path(cfg_path).read_text())
    Path(cfg_path).write_text(json.dumps({**cfg, "workers": 64}))  # saved on a larger machine
    seen = {}
    monkeypatch.setattr(eo, "train", lambda args: seen.update(vars(args)) or {"status": "done"})
    eo.main(["--resume", part["run_dir"], "--iterations", "3", "--sigma", "0.07"])
    assert seen["workers"] == os.cpu_count() and seen["iterations"] == 3 and seen["sigma"] == 0.07
    assert seen["population"] == 6 and seen["hidden"] == "8"  # the saved run's own
    line = bad(tmp_path, "--resume", part["run_dir"], "--no-mirror")
    assert "--mirror cannot change a resumed run" in line


def test_a_checkpoint_of_other_options_than_its_run_directory_is_refused(tmp_path):
    """(Damaged checkpoints: test_shared.py.) --play takes the policy's options from config.json."""
    assert "not a run directory of es_openai.py" in bad(
        tmp_path, "--resume", str(tmp_path / "nowhere")
    )
    assert "not a run directory" in bad(tmp_path, "--evaluate-snapshots", str(tmp_path))
    good = run(tmp_path / "good", iterations=1)
    cfg_path = os.path.join(good["run_dir"], "config.json")
    cfg = json.loads(Path(cfg_path).read_text())
    Path(cfg_path).write_text(json.dumps({**cfg, "hidden": "9"}))
    assert "[4, 8, 2]" in bad(tmp_path, "--play", good["run_dir"])
    # the checkpoint records its normalization
    Path(cfg_path).write_text(json.dumps({**cfg, "obs_norm": False}))
    assert "observation normalization" in bad(tmp_path, "--play", good["run_dir"])
    Path(cfg_path).write_text(json.dumps({**cfg, "env": "Acrobot-v1"}))
    assert "is for CartPole-v1, not Acrobot-v1" in bad(tmp_path, "--play", good["run_dir"])


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    out = cli(
        "--env",
        "CartPole-v1",
        "--noise-size",
        "100000",
        "--out-dir",
        str(blocker / "runs"),
        timeout=60,
    )
    assert (
        out.returncode == 2
        and "cannot write" in out.stderr
        and len(out.stderr.strip().splitlines()) == 1
    )


class CrashEnv(gym.Env):
    observation_space, action_space = gym.spaces.Box(-1, 1, (1,)), gym.spaces.Box(-1, 1, (1,))

    def reset(self, seed=None, options=None):
        return np.zeros(1), {}

    def step(self, a):
        os._exit(3)  # a worker process that dies without a word


class NanEnv(CrashEnv):
    """The reward is the action until |a| > 0.3, then NaN."""

    def step(self, a):
        return np.zeros(1), float(a[0]) if abs(a[0]) <= 0.3 else float("nan"), False, False, {}


class FailEnv(CrashEnv):
    def step(self, a):
        raise ValueError("the simulator gave up")


gym.register("EoCrashTest-v0", entry_point=CrashEnv, max_episode_steps=10)
gym.register("EoNanTest-v0", entry_point=NanEnv, max_episode_steps=10)
gym.register("EoFailTest-v0", entry_point=FailEnv, max_episode_steps=10)


@FORK_ONLY
def test_nan_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    result = run(
        tmp_path,
        env="EoNanTest-v0",
        iterations=50,
        optimizer="plain",
        alpha=10.0,
        ac_noise_std=0.0,
        save_every=1,
        hidden="4",
    )
    assert result["status"] == "diverged" and 0 < result["iteration"] < 50
    assert "NaN or inf" in capsys.readouterr().err
    with np.load(
        os.path.join(result["run_dir"], "checkpoints", "latest.npz"), allow_pickle=False
    ) as ck:
        assert np.isfinite(ck["theta"]).all() and int(ck["iteration"]) == result["iteration"]


@FORK_ONLY
@POSIX_ONLY  # SIGALRM
@pytest.mark.parametrize(
    "env_id, says",
    [
        ("EoCrashTest-v0", "a worker process died"),
        ("EoFailTest-v0", "ValueError: the simulator gave up"),
    ],
)
def test_a_dying_or_failing_worker_ends_the_run_with_one_line_not_a_hang(
    tmp_path, env_id, says, capsys
):
    signal.signal(
        signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError("no answer in 60 s"))
    )
    signal.alarm(60)
    try:
        with pytest.raises(SystemExit) as stop:
            eo.main(
                [
                    "--env",
                    env_id,
                    "--workers",
                    "2",
                    "--noise-size",
                    "100000",
                    "--out-dir",
                    str(tmp_path),
                ]
            )
    finally:
        signal.alarm(0)
    lines = capsys.readouterr().err.strip().splitlines()
    assert (
        stop.value.code == 1 and len(lines) == 1 and says in lines[0] and "--resume" in lines[0]
    ), lines
    assert glob.glob(str(tmp_path / "*" / "checkpoints" / "latest.npz"))


@POSIX_ONLY
def test_sigterm_stops_workers_and_leaves_a_checkpoint(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            os.path.join(ROOT, "es_openai.py"),
            "--env",
            "Pendulum-v1",
            "--iterations",
            "100000",
            "--workers",
            "2",
            "--noise-size",
            "1000000",
            "--population",
            "10",
            "--eval-every",
            "1",
            "--eval-episodes",
            "4",
            "--out-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    for line in proc.stdout:
        if line.startswith("gen ") and int(line.split()[1]) >= 3:
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "--resume" in err and "Traceback" not in err, (
        proc.returncode,
        err,
    )
    (run_dir,) = glob.glob(str(tmp_path / "*"))
    with np.load(os.path.join(run_dir, "checkpoints", "latest.npz"), allow_pickle=False) as ck:
        iteration = int(ck["iteration"])
    assert iteration >= 2
    resumed = cli("--resume", run_dir, "--iterations", str(iteration + 1))
    assert resumed.returncode == 0, resumed.stderr
    states = subprocess.run(
        ["ps", "-o", "stat=", "-s", str(proc.pid)], capture_output=True, text=True
    ).stdout
    assert all(s.startswith("Z") for s in states.split())  # no worker process still running


# ---------------------------------------------------------------- the command line


def test_help_lists_the_presets_and_the_paper_names():
    out = cli("--help")
    assert out.returncode == 0
    for word in list(eo.PRESETS) + [
        "noise_stdev",
        "population_size",
        "return_proc_mode",
        "snapshot_freq",
        "timesteps_per_batch",
    ]:
        assert word in out.stdout


def test_presets_fill_unset_flags_and_flags_override_them():
    args = config(env="HalfCheetah-v5", noise_size=10**5)
    assert (args.population, args.sigma, args.alpha, args.hidden, args.ac_noise_std) == (
        40,
        0.05,
        0.03,
        "64,64",
        0.01,
    )
    args = config(env="HalfCheetah-v5", sigma=0.1, noise_size=10**5)
    assert args.sigma == 0.1 and args.alpha == 0.03
    args = config(env="Pendulum-v1", noise_size=10**5)  # no preset: the generic row
    assert (args.population, args.sigma, args.iterations) == (
        eo.GENERIC["population"],
        eo.GENERIC["sigma"],
        200,
    )


def test_the_docs_presets_table_matches_the_code():
    """docs/es_openai.md's Presets table: hidden, sigma, alpha, l2coeff, n, bins, generations and
    target."""
    text = Path(ROOT, "docs", "es_openai.md").read_text().split("### Presets")[1].split("\n\n")[1]
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("| env")
    }
    assert set(rows) == set(eo.PRESETS) | {"(generic)"}
    for env_id, cells in rows.items():
        p = {**eo.GENERIC, **eo.PRESETS.get(env_id, {})}
        hidden, _, sigma, alpha, l2, n, bins, _, generations, _, target = cells[:11]
        assert (hidden, float(sigma), float(alpha), float(l2), int(n), int(generations)) == (
            p["hidden"],
            p["sigma"],
            p["alpha"],
            p["l2coeff"],
            p["population"],
            p["iterations"],
        ), env_id
        assert int(bins or 0) == p.get("ac_bins", 0), env_id
        assert (float(target) if target != "none" else None) == (
            round(p["target_return"], 2) if p["target_return"] is not None else None
        ), env_id


def test_command_line_run_snapshots_play_and_evaluate_snapshots(tmp_path):
    out = cli(
        "--env",
        "Pendulum-v1",
        "--iterations",
        "4",
        "--population",
        "4",
        "--save-every",
        "2",
        "--eval-every",
        "2",
        "--eval-episodes",
        "1",
        "--noise-size",
        "1000000",
        "--workers",
        "2",
        "--ac-bins",
        "5",
        "--target-return",
        "1000",
        "--out-dir",
        str(tmp_path),
    )
    assert out.returncode == 0, out.stderr
    assert (
        "the target 1000.0 was not reached: the best evaluation was" in out.stdout.splitlines()[-1]
    )
    (run_dir,) = glob.glob(str(tmp_path / "Pendulum-v1__es_openai__0__*"))
    cfg = json.loads(Path(run_dir, "config.json").read_text())
    assert cfg["ac_bins"] == 5 and cfg["ac_noise_std"] == 0.01 and cfg["numpy"] == np.__version__
    assert cfg["script"] == "es_openai.py" and "command" in cfg and cfg["sizes"] == [3, 64, 64, 5]
    header, *rows = Path(run_dir, "progress.csv").read_text().splitlines()
    assert header.split(",") == eo.COLUMNS and len(rows) == 4 and out.stdout.count("\ngen ") == 4
    snaps = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    assert snaps == ["iter_000000.npz", "iter_000002.npz", "iter_000004.npz", "latest.npz"]
    assert os.path.getsize(os.path.join(run_dir, "progress.png")) > 1000
    ev = cli("--evaluate-snapshots", run_dir, "--episodes", "2", "--workers", "2")
    assert ev.returncode == 0, ev.stderr
    header, *rows = Path(run_dir, "snapshots.csv").read_text().splitlines()
    assert [int(float(r.split(",")[0])) for r in rows] == [0, 2, 4]
    assert os.path.getsize(os.path.join(run_dir, "snapshots.png")) > 1000
    played = cli("--play", run_dir, "--episodes", "2", "--video")
    assert (
        played.returncode == 0
        and "mean return" in played.stdout
        and "generation 4" in played.stdout
    )
    (gif,) = glob.glob(os.path.join(run_dir, "video", "*.gif"))
    assert Path(gif).read_bytes()[:6] == b"GIF89a"
    one = cli("--play", os.path.join(run_dir, "checkpoints", "iter_000002.npz"), "--episodes", "2")
    assert one.returncode == 0 and "generation 2" in one.stdout
    first = [line for line in ev.stdout.splitlines() if "generation 2" in line][0]
    assert (
        first.split("mean return")[1] == one.stdout.strip().split("mean return")[1]
    )  # the same episodes
