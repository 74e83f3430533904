"""Tests of es_openai.py: the math by hand, the policy, the jobs and the workers, a run's behaviour,
the command line and its bad input (what every script shares: tests/test_shared.py)."""

import glob
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import POSIX_ONLY, ROOT, only_builtin_types, refused

import es_openai as eo

FORK_ONLY = pytest.mark.usefixtures("fork_start")  # the test's environments reach workers by fork


def cli(*argv):
    script = os.path.join(ROOT, "es_openai.py")
    command = [sys.executable, script, *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=ROOT)


def flags(**kw) -> list:  # dict(no_mirror=True, sigma=0.5) -> ["--no-mirror", "--sigma", "0.5"]
    argv = []
    for key, value in kw.items():
        argv += [f"--{key.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return argv


def config(**kw):
    return eo.configure(eo.parse(flags(**kw)))


TINY = dict(env="CartPole-v1", iterations=3, population=6, hidden="8", eval_every=1)
TINY.update(eval_episodes=2, noise_size=100_000, workers=1)


def run(tmp_path, **kw):
    return eo.train(config(**{**TINY, "out_dir": tmp_path, **kw}))


def csv_rows(run_dir):
    import csv

    with open(os.path.join(run_dir, "progress.csv")) as f:
        return list(csv.DictReader(f))


def task(args, theta, std=1.0):
    n = args.sizes[0]
    return dict(theta=theta, ob_mean=np.zeros(n), ob_std=np.full(n, std), ob_clip=True)


# ---------------------------------------------------------------- the math


def test_centered_ranks_and_sign_shaping_by_hand():
    ranks = eo.centered_ranks(np.array([3.0, 1.0, 2.0, 10.0, -4.0]))
    np.testing.assert_allclose(ranks, [0.25, -0.25, 0.0, 0.5, -0.5])
    np.testing.assert_allclose(eo.centered_ranks(np.array([1.0, 1.0, 3.0])), [-0.25, -0.25, 0.5])
    returns = np.array([[5.0, 1.0], [2.0, 7.0]])
    signs = np.array([[0.0, 4.0], [3.0, -2.0]])  # ranked in another order than the returns
    want = dict(centered_rank=[[1 / 6, -0.5], [-1 / 6, 0.5]], sign=signs, none=returns)
    want.update(centered_sign_rank=[[-1 / 6, 0.5], [1 / 6, -0.5]])
    for mode, shaped in want.items():
        np.testing.assert_allclose(eo.shape_fitness(returns, signs, mode), shaped, err_msg=mode)


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
    # the states acted on: not the last one
    np.testing.assert_array_equal([ob_sum, ob_sumsq], [[0 + 1 + 2 + 3 + 4], [0 + 1 + 4 + 9 + 16]])


def test_batched_weighted_sum_and_the_gradient_equal_a_plain_loop():
    rng = np.random.default_rng(0)
    table = rng.standard_normal(1000).astype(np.float32)
    idx, w, dim = rng.integers(0, 1000 - 37, 23), rng.standard_normal(23), 37
    eps = [table[i : i + dim] for i in idx]
    loop = sum(w[i] * eps[i] for i in range(23))
    got = eo.batched_weighted_sum(w, idx, table, dim, batch_size=5)
    np.testing.assert_allclose(got, loop, rtol=1e-5, atol=1e-5)
    F = np.array([[0.5, -0.5], [0.0, 0.25]])  # mirrored: w = F+ - F-, over n = 4 episodes
    got = eo.es_gradient(F, idx[:2], table, dim)
    np.testing.assert_allclose(got, (1.0 * eps[0] - 0.25 * eps[1]) / 4, rtol=1e-5, atol=1e-6)
    single = np.array([[0.5], [-0.25]])  # no mirroring: w = F, over n = 2 episodes
    got = eo.es_gradient(single, idx[:2], table, dim)
    np.testing.assert_allclose(got, (0.5 * eps[0] - 0.25 * eps[1]) / 2, rtol=1e-5, atol=1e-6)


def state_of(theta):
    return dict(theta=theta, opt_m=0 * theta, opt_v=0 * theta, opt_t=0)


def test_adam_sgd_and_plain_steps_with_weight_decay_by_hand():
    theta = np.zeros(2, np.float32)
    g1, g2 = np.array([1.0, -2.0], np.float32), np.array([0.5, 0.5], np.float32)
    adam = eo.parse("--alpha 0.1 --beta1 0.9 --beta2 0.999 --l2coeff 0".split())
    s1 = eo.update(state_of(theta), -g1, adam)  # the optimizer minimizes -g: its gradient is g1
    np.testing.assert_allclose(s1["theta"], [-0.1, 0.1], rtol=1e-5)  # Adam's first: -alpha sign
    s2 = eo.update(s1, -g2, adam)
    m, v = 0.9 * 0.1 * g1 + 0.1 * g2, 0.999 * 0.001 * g1**2 + 0.001 * g2**2
    a = 0.1 * np.sqrt(1 - 0.999**2) / (1 - 0.9**2)
    np.testing.assert_allclose(s2["theta"] - s1["theta"], -a * m / (np.sqrt(v) + 1e-8), rtol=1e-5)
    assert s2["opt_t"] == 2
    sgd = eo.parse("--optimizer sgd --alpha 0.1 --momentum 0.9 --l2coeff 0".split())
    s1 = eo.update(state_of(theta), -g1, sgd)
    np.testing.assert_allclose(s1["theta"], -0.1 * 0.1 * g1, rtol=1e-6)
    step = eo.update(s1, -g2, sgd)["theta"] - s1["theta"]
    np.testing.assert_allclose(step, -0.1 * (0.9 * 0.1 * g1 + 0.1 * g2), rtol=1e-6)
    theta = np.array([1.0, -1.0], np.float32)  # weight decay; the plain step takes the 1 / sigma
    plain = eo.parse("--optimizer plain --alpha 0.1 --sigma 0.5 --l2coeff 0.01".split())
    got = eo.update(state_of(theta), g2, plain)["theta"]
    np.testing.assert_allclose(got, theta - 0.1 * (-g2 / 0.5 + 0.01 * theta), rtol=1e-6)
    sgd = eo.parse("--optimizer sgd --alpha 0.1 --sigma 0.5 --l2coeff 0.01 --momentum 0".split())
    got = eo.update(state_of(theta), g2, sgd)["theta"]
    np.testing.assert_allclose(got, theta - 0.1 * (-g2 + 0.01 * theta), rtol=1e-6)


def test_normc_columns_have_norm_one_and_the_output_layer_one_hundredth():
    sizes = [5, 16, 16, 3]
    layers = eo.unflatten(eo.normc_init(sizes, np.random.default_rng(0)), sizes)
    for j, (W, b) in enumerate(layers):
        norm = 0.01 if j == len(layers) - 1 else 1.0
        np.testing.assert_allclose(np.linalg.norm(W, axis=0), norm, rtol=1e-5)
        assert not b.any()


def test_observation_statistics_give_mean_and_std_with_the_floor():
    x = np.random.default_rng(0).normal([1.0, 5.0], [2.0, 0.01], size=(20000, 2))
    state = dict(ob_sum=np.zeros(2), ob_sumsq=np.full(2, 1e-2), ob_count=1e-2)
    for part in np.array_split(x, 3):  # sums add up across workers
        state["ob_sum"] = state["ob_sum"] + part.sum(0)
        state["ob_sumsq"] = state["ob_sumsq"] + np.square(part).sum(0)
        state["ob_count"] += len(part)
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
    np.testing.assert_allclose(raw(np.array([[9.0, 0, 0]])), [[0.9, 0.0]], rtol=1e-6)


ACTIVATIONS = dict(tanh=np.tanh, relu=lambda z: np.maximum(z, 0.0))
ACTIVATIONS.update(lrelu=lambda z: np.where(z > 0, z, 0.01 * z))  # the starter's slope: 0.2
ACTIVATIONS.update(elu=lambda z: np.where(z > 0, z, np.expm1(np.minimum(z, 0.0))))  # a real ELU


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_the_policy_is_the_network_it_names(activation):
    """Eqs. (9)-(11) written out: normalize and clip, f(x W + b) per hidden layer, W x + b out."""
    rng = np.random.default_rng(0)
    space = gym.spaces.Box(-np.ones(3, np.float32), np.ones(3, np.float32))
    sizes = eo.layer_sizes(7, [16, 16], space, 0)
    thetas = [rng.standard_normal(eo.n_params(sizes)).astype(np.float32) for _ in range(2)]
    ob_mean, ob_std = rng.standard_normal(7), rng.uniform(0.5, 2.0, 7)
    pair = eo.Policy(thetas, sizes, activation, space, 0, ob_mean, ob_std)
    alone = [eo.Policy([theta], sizes, activation, space, 0, ob_mean, ob_std) for theta in thetas]
    f = ACTIVATIONS[activation]
    for _ in range(20):
        obs = 4 * rng.standard_normal((2, 7))  # often past the clip at +-5 once normalized
        for theta, pi, ob, a in zip(thetas, alone, obs, pair(obs)):
            np.testing.assert_array_equal(pi(ob[None])[0], a)  # a row does not see the other
            x = np.clip((ob - ob_mean) / ob_std, -5, 5)
            (W1, b1), (W2, b2), (W3, b3) = eo.unflatten(theta, sizes)
            y = f(f(x @ W1 + b1) @ W2 + b2) @ W3 + b3
            np.testing.assert_allclose(a, np.clip(y, -1, 1), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- the jobs a worker runs


@pytest.mark.parametrize(
    "env_id, extra",
    [
        ("CartPole-v1", {}),
        ("CartPole-v1", {"no_mirror": True}),
        ("Pendulum-v1", {"ac_noise_std": 0.3, "ac_bins": 5}),
    ],
)
def test_a_pair_job_is_its_episodes_and_the_same_stepped_with_others(env_id, extra):
    kw = dict(TINY, env=env_id, sigma=0.5, calc_obstat_prob=0.5, eval_prob=0.25, **extra)
    args = config(**kw)
    _, table = eo.noise_table(100_000, 123, shared=False)
    theta = eo.normc_init(args.sizes, np.random.default_rng(1))
    t = task(args, theta, 0.5)
    jobs = [("train", 3, k) for k in range(8)] + [("eval", 3, 0)]
    together = eo.run_jobs([eo.make_env(env_id)], args, table, t, jobs)
    assert only_builtin_types(together) and [k for k, _ in together] == [job[2] for job in jobs]
    results = [r for _, r in together]
    kinds = [r["kind"] for r in results]
    assert "noiseless" in kinds and kinds.count("pair") >= 4 and kinds[-1] == "eval"
    assert any(r["ob_sum"] is not None for r in results if r["kind"] == "pair")
    for job, r in zip(jobs, results):
        ((_, alone),) = eo.run_jobs([eo.make_env(env_id)], args, table, t, [job])
        assert r.keys() == alone.keys()  # the same alone: --lockstep cannot change a run
        for name in r:
            np.testing.assert_array_equal(r[name], alone[name])
        assert eo.job_stream(args, *job)[1] == (r["kind"] != "pair")  # as the master predicts
        if r["kind"] != "pair":
            continue
        rng = eo.stream(args.seed, eo.TRAIN, 3, job[2])  # the job's stream, in its order
        assert rng.random() >= args.eval_prob
        env_seed, idx = int(rng.integers(2**31)), int(rng.integers(0, len(table) - theta.size + 1))
        keep, eps = bool(rng.random() < args.calc_obstat_prob), table[idx : idx + theta.size]
        assert r["idx"] == idx and (r["ob_sum"] is not None) == keep
        assert len(r["returns"]) == (2 if args.mirror else 1)
        for sign, R in zip((1.0, -1.0), r["returns"]):  # each episode of the pair alone
            member = [theta + sign * 0.5 * eps]
            ob = (t["ob_mean"], t["ob_std"])
            pi = eo.Policy(member, args.sizes, args.activation, args.act, args.ac_bins, *ob)
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
    env = [eo.make_env("Pendulum-v1")]
    for job in [("train", 0, k) for k in range(8)] + [("eval", 0, 0)]:
        ((_, r),) = eo.run_jobs(env, args, table, t, [job])
        ((_, q),) = eo.run_jobs(env, quiet, table, t, [job])
        same = r["returns"] == q["returns"] if r["kind"] == "pair" else r == q
        assert same == (r["kind"] != "pair"), r  # evaluations, noiseless episodes: the same bits


# ---------------------------------------------------------------- the noise table and the workers


def test_the_noise_table_is_one_block_the_workers_share():
    _, plain = eo.noise_table(1000, 123, shared=False)
    want = np.random.default_rng(123).standard_normal(1000, dtype=np.float32)
    np.testing.assert_array_equal(plain, want)
    args = config(**{**TINY, "workers": 2, "sigma": 0.5})
    block, table = eo.noise_table(args.noise_size, args.noise_seed)
    pool = eo.Workers(args, eo.make_pool(args, block), table)
    t = task(args, eo.normc_init(args.sizes, np.random.default_rng(1)))
    try:
        before, _ = pool.run(t, "train", 0, 12)  # theta + sigma eps and theta - sigma eps differ
        assert any(r["returns"][0] != r["returns"][1] for r in before.values())
        table[:] = 0.0  # written by the master after the workers started: eps = 0
        after, _ = pool.run(t, "train", 1, 12)  # a copy would still hold the old numbers
        assert all(r["returns"][0] == r["returns"][1] for r in after.values())
    finally:
        pool.pool.shutdown()
        pool.table = table = None  # the views go before the block
        block.close()
        block.unlink()


class Late:
    """An executor that runs each message as it is submitted; the message of a job in `late`
    finishes that many seconds later (a timer's thread), or, for None, once release() is called."""

    def __init__(self, late: dict):
        self.late = late
        self.held = []

    def submit(self, fn, *args):  # args: (args, task, jobs, table_ref)
        future, result = Future(), fn(*args)
        delay = self.late.get(args[2][0], 0)
        if delay:
            threading.Timer(delay, future.set_result, [result]).start()
        elif delay is None:
            self.held.append((future, result))
        else:
            future.set_result(result)
        return future

    def release(self):
        for future, result in self.held:
            future.set_result(result)


def test_a_generation_closes_at_the_shortest_finished_prefix_and_drops_older_results(monkeypatch):
    def pairs(args, task, jobs, table=None):  # each job a pair of 10-step episodes, returns t, -t
        r = dict(kind="pair", idx=0, sign_returns=(0, 0), lengths=(10, 10), ob_sum=None)
        return [(k, dict(r, returns=(t, -t), ob_sumsq=None)) for _, t, k in jobs]

    monkeypatch.setattr(eo, "work", pairs)
    executor = Late({("train", 0, 0): 0.1, ("train", 1, 1): None})
    pool = eo.Workers(config(**{**TINY, "workers": 2}), executor, None)
    results, closed = pool.run({}, "train", 0, 4)  # 2 pairs: job 1 ends first, job 0 is awaited
    assert closed == 2 and sorted(results) == [0, 1]
    results, closed = pool.run({}, "train", 1, 2, min_steps=15)  # job 0 holds both: job 1 left out
    assert closed == 1 and len(pool.running) == 1
    executor.release()  # job 1 comes back during the next call: dropped, counted
    results, closed = pool.run({}, "train", 2, 2, min_steps=25)  # 1 pair, but 40 steps
    assert closed == 2 and results[1]["returns"] == (2, -2)  # not the older call's (1, -1)
    assert pool.stale == 1 and not pool.running


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
    assert len(made) == 1 and made[0] not in os.listdir("/dev/shm")


# ---------------------------------------------------------------- a run


def test_same_seed_gives_identical_results_with_any_worker_count_and_lockstep(tmp_path):
    """On BipedalWalker, whose episodes differ in length: with a plain env.reset, which episodes an
    environment played before changed the run."""
    kw = dict(env="BipedalWalker-v3", population=8, episode_length=300, eval_every=3, seed=2)
    kw.update(eval_prob=0.2, calc_obstat_prob=0.5)
    one = run(tmp_path / "one", workers=1, lockstep=1, **kw)
    two = run(tmp_path / "two", workers=2, lockstep=3, **kw)
    for key in ("theta", "ob_sum", "opt_v", "env_steps", "episodes"):
        np.testing.assert_array_equal(one[key], two[key])
    other = run(tmp_path / "other", **{**kw, "seed": 1, "iterations": 1})
    assert not np.array_equal(
        run(tmp_path / "first", **{**kw, "iterations": 1})["theta"], other["theta"]
    )


def test_a_sigterm_ends_the_run_after_its_generation_and_resume_equals_an_uninterrupted_run(
    tmp_path, monkeypatch, capsys
):
    kw = dict(TINY, iterations=6, eval_every=2, calc_obstat_prob=0.5)
    full = run(tmp_path / "full", **kw)
    evaluate = eo.evaluate

    def stopped(workers, state, *a):  # a job scheduler's stop while generation 4 is evaluated
        if state["iteration"] == 4:
            signal.raise_signal(signal.SIGTERM)
        return evaluate(workers, state, *a)

    monkeypatch.setattr(eo, "evaluate", stopped)
    try:
        with pytest.raises(SystemExit) as stop:
            eo.main(flags(**kw, out_dir=tmp_path / "half"))
    finally:
        eo.STOP.clear()
    monkeypatch.setattr(eo, "evaluate", evaluate)
    again = shlex.split(capsys.readouterr().err.split("resume with")[1])  # the line it printed
    assert stop.value.code == 130 and again[:3] == ["python", "es_openai.py", "--resume"]
    assert [r["iteration"] for r in csv_rows(again[3])] == ["1", "2", "3", "4"]
    resumed = eo.main([*again[2:], "--iterations", "6", "--workers", "1"])
    for key in "theta ob_sum ob_sumsq ob_count opt_m opt_v opt_t episodes env_steps".split():
        np.testing.assert_array_equal(full[key], resumed[key])

    def strip(rows):
        return [
            {k: v for k, v in r.items() if "time" not in k and k != "steps_per_s"} for r in rows
        ]

    assert strip(csv_rows(full["run_dir"])) == strip(csv_rows(again[3]))


def test_eval_prob_adds_noiseless_episodes_to_the_population_and_logs_them(tmp_path):
    rows = csv_rows(run(tmp_path, iterations=4, population=10, eval_prob=0.2)["run_dir"])
    counts = [int(r["noiseless_count"]) for r in rows]
    assert 0 in counts and sum(counts) > 0  # generations with and without noiseless episodes
    for r, count in zip(rows, counts):  # on top of the 10 training episodes of each generation
        assert int(r["episodes_this_gen"]) - count == 10
        mean = r["noiseless_return_mean"]
        assert float(mean) > 0 if count else mean == "nan"
    assert int(rows[-1]["episodes"]) == sum(int(r["episodes_this_gen"]) for r in rows)


def test_es_learns_cartpole_within_a_tiny_budget(tmp_path):
    kw = dict(iterations=15, population=20, hidden="16", sigma=0.05, alpha=0.03, eval_every=15)
    rows = csv_rows(run(tmp_path, eval_episodes=10, **kw)["run_dir"])
    assert float(rows[-1]["eval_return_mean"]) > 150 > 3 * float(rows[0]["return_mean"])


def test_observation_statistics_count_the_training_steps_only(tmp_path):
    none = run(tmp_path / "a", calc_obstat_prob=1.0, no_obs_norm=True, save_every=0)
    some = run(tmp_path / "b", calc_obstat_prob=1.0)
    assert none["ob_count"] == pytest.approx(1e-2)  # without normalization nothing is kept
    assert some["ob_count"] == pytest.approx(1e-2 + some["env_steps"])  # no evaluation's step
    assert os.listdir(Path(none["run_dir"], "checkpoints")) == ["latest.npz"]  # --save-every 0


@pytest.mark.parametrize(
    "extra, episodes",
    [
        (dict(no_mirror=True, fitness="none", optimizer="sgd", no_obs_norm=True), 4),
        (dict(ac_bins=5, activation="elu", optimizer="plain", min_timesteps=120), 6),
    ],
)
def test_other_options_run_their_population(tmp_path, extra, episodes):
    kw = dict(env="Pendulum-v1", iterations=1, population=4, eval_episodes=1, episode_length=20)
    result = run(tmp_path, **kw, **extra)
    assert result["status"] == "done" and np.isfinite(result["theta"]).all()
    assert (result["episodes"], result["env_steps"]) == (episodes, 20 * episodes)


# ---------------------------------------------------------------- bad input, failures


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--env", "CartPole-v1", "--ac-bins", "5"], "--ac-noise-std are for Box actions"),
        (["--env", "Pendulum-v1", "--ac-bins", "1"], "--ac-bins must be 0 (continuous) or at"),
        (["--env", "Pendulum-v1", "--population", "5"], "even with mirrored sampling"),
        (["--env", "Pendulum-v1", "--no-mirror", "--fitness", "sign"], "needs mirrored sampling"),
        (["--env", "Pendulum-v1", "--calc-obstat-prob", "0"], "--calc-obstat-prob must be > 0"),
        (["--env", "Pendulum-v1", "--eval-prob", "1"], "--eval-prob: must be in [0, 1)"),
        (["--env", "Pendulum-v1", "--noise-size", "10"], "smaller than the policy"),
        (["--env", "Pendulum-v1", "--noise-size", str(10**12)], "lower --noise-size"),
        (["--env", "Pendulum-v1", "--sigma", "nan"], "--sigma: must be > 0"),
        (["--env", "Pendulum-v1", "--workers", "0"], "--workers: must be >= 1"),
        (["--env", "Pendulum-v1", "--hidden", "64,x"], "--hidden takes sizes like 64 or 64,64"),
        (["--env", "HalfCheetah-v9"], "`v5`"),
        (["--env", "Blackjack-v1"], "takes a flat Box of observations"),
    ],
)
def test_bad_flags(tmp_path, argv, message):
    small_table = [] if "--noise-size" in argv else ["--noise-size", "100000"]
    assert message in refused(eo, tmp_path, *argv, *small_table)


def test_unwritable_output_folder(tmp_path):
    Path(tmp_path, "a_file").write_text("")
    argv = ["--env", "CartPole-v1", "--noise-size", "100000"]
    assert "cannot write" in refused(eo, tmp_path / "a_file", *argv)  # its --out-dir: a_file/out


def test_a_resumed_run_keeps_its_options_and_a_checkpoint_must_fit_them(tmp_path, monkeypatch):
    part = run(tmp_path, iterations=1)
    cfg_path = Path(part["run_dir"], "config.json")
    cfg = json.loads(cfg_path.read_text())
    cfg_path.write_text(json.dumps({**cfg, "workers": 64}))  # saved on a larger machine
    seen = {}
    monkeypatch.setattr(eo, "train", lambda args: seen.update(vars(args)) or {"status": "done"})
    eo.main(["--resume", part["run_dir"], "--iterations", "3", "--sigma", "0.07"])
    assert seen["workers"] == os.cpu_count() and seen["iterations"] == 3 and seen["sigma"] == 0.07
    assert seen["population"] == 6 and seen["hidden"] == "8"  # the saved run's own
    assert "--mirror cannot change a resumed run" in refused(
        eo, tmp_path, "--resume", part["run_dir"], "--no-mirror"
    )
    cfg_path.write_text(json.dumps({**cfg, "hidden": "9"}))  # a checkpoint of other layers
    assert "[4, 8, 2]" in refused(eo, tmp_path, "--play", part["run_dir"])


class CrashEnv(gym.Env):
    observation_space, action_space = gym.spaces.Box(-1, 1, (1,)), gym.spaces.Box(-1, 1, (1,))

    def reset(self, seed=None, options=None):
        return np.zeros(1), {}

    def step(self, a):
        os._exit(3)  # a worker process that dies without a word


class NanEnv(CrashEnv):
    def step(self, a):  # the reward is the action until |a| > 0.3, then NaN
        return np.zeros(1), float(a[0]) if abs(a[0]) <= 0.3 else float("nan"), False, False, {}


class FailEnv(CrashEnv):
    def step(self, a):
        raise ValueError("the simulator gave up")


gym.register("EoCrashTest-v0", entry_point=CrashEnv, max_episode_steps=10)
gym.register("EoNanTest-v0", entry_point=NanEnv, max_episode_steps=10)
gym.register("EoFailTest-v0", entry_point=FailEnv, max_episode_steps=10)


@FORK_ONLY
def test_nan_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    kw = dict(env="EoNanTest-v0", iterations=50, optimizer="plain", alpha=10.0, hidden="4")
    result = run(tmp_path, ac_noise_std=0.0, save_every=1, **kw)
    assert result["status"] == "diverged" and 0 < result["iteration"] < 50
    assert "NaN or inf" in capsys.readouterr().err
    path = os.path.join(result["run_dir"], "checkpoints", "latest.npz")
    with np.load(path, allow_pickle=False) as ck:
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
    def hung(*a):
        raise TimeoutError("no answer in 60 s")

    signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        with pytest.raises(SystemExit) as stop:
            eo.main(flags(env=env_id, workers=2, noise_size=100000, out_dir=tmp_path))
    finally:
        signal.alarm(0)
    lines = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 1 and len(lines) == 1, lines
    assert says in lines[0] and "--resume" in lines[0], lines
    assert glob.glob(str(tmp_path / "*" / "checkpoints" / "latest.npz"))


# ---------------------------------------------------------------- the command line


def test_help_shows_the_presets_and_the_papers_names_and_flags_override_presets(capsys):
    with pytest.raises(SystemExit) as done:
        eo.main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    for word in [*eo.PRESETS, "noise_stdev", "population_size", "return_proc_mode"]:
        assert word in out
    args = config(env="HalfCheetah-v5", sigma=0.1, noise_size=10**5)
    assert (args.population, args.sigma, args.alpha, args.ac_noise_std) == (40, 0.1, 0.03, 0.01)
    args = config(env="Pendulum-v1", noise_size=10**5)  # no preset: the generic row
    assert (args.population, args.sigma, args.iterations) == (40, eo.GENERIC["sigma"], 200)


def test_the_docs_presets_table_matches_the_code():
    text = Path(ROOT, "docs", "es_openai.md").read_text().split("### Presets")[1].split("\n\n")[1]
    rows = [line.split("|")[1:-1] for line in text.splitlines()[2:]]
    assert {row[0].strip() for row in rows} == {*eo.PRESETS, "(generic)"}
    for env_id, hidden, _, sigma, alpha, l2, n, bins, _, generations, _, target, *_ in rows:
        p = eo.preset(env_id.strip())
        cells = (hidden.strip(), float(sigma), float(alpha), float(l2), int(n), int(generations))
        assert cells == (
            p["hidden"],
            p["sigma"],
            p["alpha"],
            p["l2coeff"],
            p["population"],
            p["iterations"],
        ), env_id
        assert int(bins.strip() or 0) == p["ac_bins"], env_id
        want = None if p["target_return"] is None else round(p["target_return"], 2)
        assert (None if target.strip() == "none" else float(target)) == want, env_id


def test_command_line_run_writes_the_run_directory_and_its_snapshots_play(tmp_path, capsys):
    argv = "--env Pendulum-v1 --iterations 4 --population 4 --save-every 2 --eval-every 2"
    argv += " --eval-episodes 1 --noise-size 1000000 --workers 2 --ac-bins 5 --target-return 1000"
    out = cli(*argv.split(), "--out-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    last = out.stdout.splitlines()[-1]
    assert "the target 1000.0 was not reached: the best evaluation was" in last
    (run_dir,) = glob.glob(str(tmp_path / "Pendulum-v1__es_openai__0__*"))
    cfg = json.loads(Path(run_dir, "config.json").read_text())
    assert cfg["ac_bins"] == 5 and cfg["ac_noise_std"] == 0.01 and cfg["numpy"] == np.__version__
    assert cfg["script"] == "es_openai.py" and "command" in cfg and cfg["sizes"] == [3, 64, 64, 5]
    header, *rows = Path(run_dir, "progress.csv").read_text().splitlines()
    assert header.split(",") == eo.COLUMNS and len(rows) == 4 and out.stdout.count("\ngen ") == 4
    snaps = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    assert snaps == ["iter_000000.npz", "iter_000002.npz", "iter_000004.npz", "latest.npz"]
    assert os.path.getsize(os.path.join(run_dir, "progress.png")) > 1000
    table = eo.main(["--evaluate-snapshots", run_dir, "--episodes", "2", "--workers", "2"])
    header, *rows = Path(run_dir, "snapshots.csv").read_text().splitlines()
    assert [int(float(r.split(",")[0])) for r in rows] == [row[0] for row in table] == [0, 2, 4]
    assert os.path.getsize(os.path.join(run_dir, "snapshots.png")) > 1000
    snapshot = os.path.join(run_dir, "checkpoints", "iter_000002.npz")
    one = eo.main(["--play", snapshot, "--episodes", "2", "--workers", "1"])
    latest = eo.main(["--play", run_dir, "--episodes", "2", "--workers", "1"])
    assert one.mean() == table[1][2] and latest.mean() == table[2][2]  # the same episodes
    assert "policy of generation 4" in capsys.readouterr().out.splitlines()[-1]
