"""Tests of es_openai.py: the math, the noise table and the workers, a run's behaviour, every
option combination, the command line and bad input."""
import glob
import inspect
import itertools
import json
import os
import signal
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

import ars
import es_basic
import es_openai as eo
from conftest import booby_trapped, interrupted_runs, only_builtin_types, refused, sigint_during_close

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORK_ONLY = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the workers are forked")


def cli(*argv, timeout=240):
    return subprocess.run([sys.executable, os.path.join(ROOT, "es_openai.py"), *argv], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def config(**kw):
    argv = []
    for key, value in kw.items():
        if value is True:
            argv.append(f"--{key.replace('_', '-')}")
        else:
            argv += [f"--{key.replace('_', '-')}", str(value)]
    return eo.resolve_config(eo.build_parser().parse_args(argv))


TINY = dict(env="CartPole-v1", iterations=3, population=6, hidden="8", eval_every=1, eval_episodes=2,
            noise_size=100_000, workers=1)


def run(tmp_path, **kw):
    args = config(**{**TINY, "out_dir": tmp_path, **kw})
    return eo.train(args)


# ---------------------------------------------------------------- the math


def test_centered_ranks_and_sign_shaping_by_hand():
    np.testing.assert_allclose(eo.centered_ranks(np.array([3.0, 1.0, 2.0, 10.0, -4.0])),
                               [0.25, -0.25, 0.0, 0.5, -0.5])
    returns = np.array([[5.0, 1.0], [2.0, 7.0]])
    signs = np.array([[0.0, 4.0], [3.0, -2.0]])  # ranked in another order than the returns
    np.testing.assert_allclose(eo.shape_fitness(returns, signs, "centered_rank"),
                               [[1 / 6, -0.5], [-1 / 6, 0.5]])
    np.testing.assert_allclose(eo.shape_fitness(returns, signs, "sign"), signs)
    np.testing.assert_allclose(eo.shape_fitness(returns, signs, "centered_sign_rank"), [[-1 / 6, 0.5], [1 / 6, -0.5]])
    np.testing.assert_allclose(eo.shape_fitness(returns, signs, "none"), returns)
    np.testing.assert_allclose(eo.pair_weights(np.array([[1 / 6, -0.5], [-1 / 6, 0.5]])), [2 / 3, -2 / 3])


def test_sign_return_counts_the_signs_of_the_rewards():
    class Steps(gym.Env):
        observation_space, action_space = gym.spaces.Box(-1, 1, (1,)), gym.spaces.Box(-1, 1, (1,))
        rewards = [2.0, -0.5, 0.0, 3.0, 1.0]

        def reset(self, seed=None, options=None):
            self.t = 0
            return np.zeros(1), {}

        def step(self, a):
            self.t += 1
            return np.zeros(1), self.rewards[self.t - 1], False, self.t == 5, {}

    env = Steps()
    policy = eo.Policy(np.zeros(2, np.float32), [1, 1], "tanh", np.zeros(1), np.ones(1), env.action_space, 0)
    total, sign_total, steps, _ = eo.rollout(env, policy, 0)
    assert (total, sign_total, steps) == (5.5, 2.0, 5)


def test_batched_weighted_sum_equals_a_plain_loop():
    rng = np.random.default_rng(0)
    table = rng.standard_normal(1000).astype(np.float32)
    idx, w, dim = rng.integers(0, 1000 - 37, 23), rng.standard_normal(23), 37
    loop = sum(w[i] * table[idx[i]:idx[i] + dim] for i in range(23))
    np.testing.assert_allclose(eo.batched_weighted_sum(w, idx, table, dim, batch_size=5), loop, rtol=1e-5, atol=1e-5)
    F = np.array([[0.5, -0.5], [0.0, 0.25]])
    g = eo.es_gradient(F, idx[:2], table, dim)
    np.testing.assert_allclose(g, (1.0 * table[idx[0]:idx[0] + dim] - 0.25 * table[idx[1]:idx[1] + dim]) / 4,
                               rtol=1e-5, atol=1e-6)


def test_adam_sgd_and_plain_steps_by_hand():
    g1, g2 = np.array([1.0, -2.0], np.float32), np.array([0.5, 0.5], np.float32)
    adam = eo.Adam(2, alpha=0.1, beta1=0.9, beta2=0.999, epsilon=1e-8)
    np.testing.assert_allclose(adam.step(g1), [-0.1, 0.1], rtol=1e-5)  # first Adam step: -alpha sign(g)
    m, v = 0.9 * 0.1 * g1 + 0.1 * g2, 0.999 * 0.001 * g1 ** 2 + 0.001 * g2 ** 2
    a = 0.1 * np.sqrt(1 - 0.999 ** 2) / (1 - 0.9 ** 2)
    np.testing.assert_allclose(adam.step(g2), -a * m / (np.sqrt(v) + 1e-8), rtol=1e-5)
    sgd = eo.SGD(2, alpha=0.1, momentum=0.9)
    np.testing.assert_allclose(sgd.step(g1), -0.1 * 0.1 * g1, rtol=1e-6)
    np.testing.assert_allclose(sgd.step(g2), -0.1 * (0.9 * 0.1 * g1 + 0.1 * g2), rtol=1e-6)
    np.testing.assert_allclose(eo.Plain(2, alpha=0.1).step(g1), -0.1 * g1)


def test_update_applies_weight_decay_and_divides_plain_steps_by_sigma():
    theta, g = np.array([1.0, -1.0], np.float32), np.array([0.2, 0.4], np.float32)
    args = config(optimizer="plain", alpha=0.1, sigma=0.5, l2coeff=0.01)
    new = eo.update(theta, g, eo.make_optimizer(args, 2), args)
    np.testing.assert_allclose(new, theta - 0.1 * (-g / 0.5 + 0.01 * theta), rtol=1e-6)
    args = config(optimizer="sgd", alpha=0.1, sigma=0.5, l2coeff=0.01, momentum=0.0)
    new = eo.update(theta, g, eo.make_optimizer(args, 2), args)
    np.testing.assert_allclose(new, theta - 0.1 * (-g + 0.01 * theta), rtol=1e-6)


def test_normc_columns_have_norm_one_and_the_output_layer_one_hundredth():
    sizes = [5, 16, 16, 3]
    layers = eo.unflatten(eo.normc_init(sizes, np.random.default_rng(0)), sizes)
    for j, (W, b) in enumerate(layers):
        expected = 0.01 if j == len(layers) - 1 else 1.0
        np.testing.assert_allclose(np.linalg.norm(W, axis=0), expected, rtol=1e-5)
        assert not b.any()


def test_running_stat_gives_mean_std_with_the_floor():
    x = np.random.default_rng(0).normal([1.0, 5.0], [2.0, 0.01], size=(20000, 2))
    stat = eo.RunningStat(2)
    for part in np.array_split(x, 3):
        stat.increment(part.sum(0), np.square(part).sum(0), len(part))
    np.testing.assert_allclose(stat.mean, x.mean(0), rtol=1e-3)
    np.testing.assert_allclose(stat.std, [x.std(0)[0], 0.1], rtol=1e-2)  # 0.01 is floored to 0.1


def test_policy_normalizes_clips_and_maps_bins_to_bounds():
    space = gym.spaces.Box(np.array([-1.0, -2.0], np.float32), np.array([1.0, 2.0], np.float32))
    sizes = [3, 6]  # linear: 2 dimensions x 3 bins
    theta = np.zeros(eo.n_params(sizes), np.float32)
    W, b = eo.unflatten(theta, sizes)[0]
    b[:] = [5, 0, 0, 0, 0, 5]  # dimension 0 -> bin 0 (low), dimension 1 -> bin 2 (high)
    policy = eo.Policy(theta, sizes, "tanh", np.zeros(3), np.ones(3), space, 3)
    np.testing.assert_allclose(policy(np.zeros(3)), [-1.0, 2.0])
    b[:] = [0, 5, 0, 0, 5, 0]  # middle bins: the middle of the bounds
    policy = eo.Policy(theta, sizes, "tanh", np.zeros(3), np.ones(3), space, 3)
    np.testing.assert_allclose(policy(np.zeros(3)), [0.0, 0.0])
    np.testing.assert_allclose(policy(np.zeros(3), noise=np.array([5.0, -0.5])), [1.0, -0.5])  # noise, clipped
    sizes2 = [3, 2]
    theta2 = np.zeros(eo.n_params(sizes2), np.float32)
    eo.unflatten(theta2, sizes2)[0][0][0, 0] = 0.1
    cont = eo.Policy(theta2, sizes2, "tanh", np.full(3, 2.0), np.full(3, 0.5), space, 0)
    # a continuous policy: (o - mean) / std clipped to [-5, 5] before the layer, then 0.1 * 5
    np.testing.assert_allclose(cont(np.array([100.0, 0, 0])), [0.5, 0.0], rtol=1e-6)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("space, bins", [
    (gym.spaces.Box(np.array([-1.0, -2.0, 0.0], np.float32), np.array([1.0, 2.0, 3.0], np.float32)), 0),
    (gym.spaces.Box(np.array([-1.0, -2.0, 0.0], np.float32), np.array([1.0, 2.0, 3.0], np.float32)), 4),
    (gym.spaces.Discrete(5), 0)], ids=["continuous", "bins", "discrete"])
def test_the_batched_forward_equals_one_policy_call_per_row(activation, space, bins):
    rng = np.random.default_rng(0)
    sizes = eo.layer_sizes(7, [16, 16], space, bins)
    thetas = [rng.standard_normal(eo.n_params(sizes)).astype(np.float32) for _ in range(6)]  # 3 pairs
    ob_mean, ob_std = rng.standard_normal(7), rng.uniform(0.5, 2.0, 7)
    for ob_clip in (True, False):
        spec = (sizes, activation, ob_mean, ob_std, space, bins, ob_clip)
        singles, batch = [eo.Policy(t, *spec) for t in thetas], eo.PolicyBatch(thetas, *spec)
        pairs = [eo.PolicyBatch(thetas[i:i + 2], *spec) for i in (0, 2, 4)]
        for _ in range(20):
            obs = [4 * rng.standard_normal(7) for _ in range(6)]  # often past the clip at +-5 once normalized
            noise = None if hasattr(space, "n") else 0.3 * rng.standard_normal((6, 3))  # (6, adim)
            rows = [None] * 6 if noise is None else noise
            together, one_by_one = batch(obs, noise), [p(o, r) for p, o, r in zip(singles, obs, rows)]
            if bins or noise is None:  # argmax-based: exactly the same actions
                np.testing.assert_array_equal(together, one_by_one)
            else:
                np.testing.assert_allclose(together, one_by_one, rtol=1e-12, atol=0)
            # a row does not depend on the rows beside it: --lockstep cannot change a run
            by_pair = np.concatenate([np.reshape(p(obs[i:i + 2], None if noise is None else noise[i:i + 2]), (2, -1))
                                      for p, i in zip(pairs, (0, 2, 4))])
            np.testing.assert_array_equal(np.reshape(together, (6, -1)), by_pair)


def worker_of(args, **overrides) -> tuple:
    """What worker_main holds for this configuration (its dict, with a 100,000-number noise table),
    and the policy's sizes and spaces: (worker, table, sizes, obs_dim, act_space)."""
    obs_dim, act_space = eo.check_env(args)
    sizes = eo.layer_sizes(obs_dim, args.hidden_sizes, act_space, args.ac_bins)
    table = eo.NoiseTable(100_000, 123)
    w = dict(noise=table, seed=args.seed, env_id=args.env, episode_length=args.episode_length, sizes=sizes,
             activation=args.activation, act_space=act_space, ac_bins=args.ac_bins, sigma=args.sigma, mirror=True,
             ac_noise_std=0.0, calc_obstat_prob=1.0, eval_prob=0.0, env=eo.make_env(args.env, args.episode_length))
    return {**w, **overrides}, table, sizes, obs_dim, act_space


@pytest.mark.parametrize("env_id, extra", [("CartPole-v1", {}), ("Pendulum-v1", {"ac_noise_std": 0.0}),
                                           ("Pendulum-v1", {"ac_noise_std": 0.0, "ac_bins": 5})])
def test_a_mirrored_pair_job_equals_its_two_episodes_one_after_the_other(env_id, extra):
    args = config(**{**TINY, "env": env_id, "sigma": 0.5, "calc_obstat_prob": 1.0, **extra})
    w, table, sizes, obs_dim, act_space = worker_of(args)
    theta = eo.normc_init(sizes, np.random.default_rng(1))
    task = {"theta": theta, "ob_mean": np.zeros(obs_dim), "ob_std": np.full(obs_dim, 0.5), "ob_clip": True}
    spec = (sizes, args.activation, task["ob_mean"], task["ob_std"], act_space, args.ac_bins, True)
    env, unequal = eo.make_env(args.env, args.episode_length), 0
    try:
        for k in range(6):
            _, idx, returns, signs, lengths, ob_sum, ob_sumsq, times = eo.run_jobs(w, task, [("train", 0, k)])[0][1]
            rng, _ = eo.job_kind(args.seed, 0, k, 0.0)
            env_seed = int(rng.integers(2**31))
            assert idx == table.sample_index(rng, theta.size)
            eps = table.get(idx, theta.size)
            single = [eo.rollout(env, eo.Policy(theta + s * args.sigma * eps, *spec), env_seed, keep_obs=True)
                      for s in (1.0, -1.0)]
            np.testing.assert_allclose(returns, [e[0] for e in single], rtol=1e-12)
            assert signs == [e[1] for e in single] and lengths == [e[2] for e in single]
            np.testing.assert_allclose(ob_sum, single[0][3][0] + single[1][3][0], rtol=1e-12)
            np.testing.assert_allclose(ob_sumsq, single[0][3][1] + single[1][3][1], rtol=1e-12)
            assert times["policy_us"] > 0 and times["env_us"] > 0
            unequal += lengths[0] != lengths[1]
    finally:
        table.close()
    assert env_id != "CartPole-v1" or unequal  # one episode of a pair went on alone after the other ended


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_jobs_stepped_together_give_what_each_job_gives_alone(env_id):
    # one message of pairs (some recording observations, Pendulum with action noise), noiseless
    # episodes and an evaluation: every result has the bits of the job run alone
    args = config(**{**TINY, "env": env_id, "sigma": 0.5})
    w, table, sizes, obs_dim, act_space = worker_of(args, ac_noise_std=0.0 if env_id == "CartPole-v1" else 0.3,
                                                    calc_obstat_prob=0.5, eval_prob=0.25)
    alone = dict(w, env=eo.make_env(args.env, args.episode_length))
    theta = eo.normc_init(sizes, np.random.default_rng(1))
    task = {"theta": theta, "ob_mean": np.zeros(obs_dim), "ob_std": np.full(obs_dim, 0.5), "ob_clip": True}
    jobs = [("train", 3, k) for k in range(8)] + [("eval", 3, 0)]
    try:
        together = eo.run_jobs(w, task, jobs)
        assert only_builtin_types(together)  # no PairResult or Episode class travels to the master
        kinds = [r[0] for _, r in together]
        assert [k for k, _ in together] == [job[2] for job in jobs]
        assert "noiseless" in kinds and kinds.count("pair") >= 4
        assert any(r[5] is not None for _, r in together if r[0] == "pair")  # some pairs recorded observations
        for (kind, generation, k), (_, result) in zip(jobs, together):
            single = eo.run_jobs(alone, task, [(kind, generation, k)])[0][1]
            if result[0] == "pair":  # the timers differ, all the rest is the same bits
                result, single = result[:-1], single[:-1]
            for a, b in zip(result, single):
                np.testing.assert_array_equal(a, b)
    finally:
        table.close()


def test_action_noise_is_for_the_population_episodes_only():
    # --ac-noise-std perturbs the actions of the mirrored pairs only: an evaluation episode and a
    # noiseless episode (eval_prob) give the same bits with and without it, a pair does not
    args = config(**{**TINY, "env": "Pendulum-v1"})
    w, table, sizes, obs_dim, act_space = worker_of(args, calc_obstat_prob=0.0, eval_prob=0.25)
    task = {"theta": eo.normc_init(sizes, np.random.default_rng(1)), "ob_mean": np.zeros(obs_dim),
            "ob_std": np.ones(obs_dim), "ob_clip": True}
    jobs = [("train", 3, k) for k in range(8)] + [("eval", 3, 0), ("eval", 3, 1)]
    try:
        quiet = eo.run_jobs(w, task, jobs)
        noisy = eo.run_jobs(dict(w, ac_noise_std=0.5, env=eo.make_env(args.env, args.episode_length)), task, jobs)
        kinds = [r[0] for _, r in quiet]
        assert kinds == [r[0] for _, r in noisy] and "noiseless" in kinds and "pair" in kinds
        for (_, q), (_, n) in zip(quiet, noisy):
            if q[0] == "pair":
                assert not np.array_equal(q[2], n[2]), q  # the pair's returns moved with the noise
            else:
                assert q == n  # (kind, return, length): the same bits
    finally:
        table.close()


def test_elu_is_a_real_elu_and_lrelu_leaks():
    z = np.array([-2.0, 0.0, 3.0])
    for name, expected in (("elu", [np.exp(-2.0) - 1, 0.0, 3.0]), ("lrelu", [-0.02, 0.0, 3.0]),
                           ("relu", [0.0, 0.0, 3.0]), ("tanh", np.tanh(z))):
        out = np.empty(3)
        eo.ACTIVATIONS[name](z, out)
        np.testing.assert_allclose(out, expected, err_msg=name)


def test_shared_helpers_are_identical_copies():
    for name in ("stream",):  # the rest of es_openai.py's helpers are its own since ars.py's rewrite
        assert inspect.getsource(getattr(eo, name)) == inspect.getsource(getattr(ars, name)), name
    assert inspect.getsource(eo.centered_ranks) == inspect.getsource(es_basic.centered_ranks)
    assert eo.SHARED_COLUMNS == ars.COLUMNS[:11]


# ---------------------------------------------------------------- noise table and workers


def pool_for(args, table):
    obs_dim, act_space = eo.check_env(args)
    sizes = eo.layer_sizes(obs_dim, args.hidden_sizes, act_space, args.ac_bins)
    return eo.WorkerPool(args.workers, table, args, act_space, sizes), sizes


@FORK_ONLY
def test_the_noise_table_is_one_shared_copy():
    args = config(**{**TINY, "workers": 2})
    table = eo.NoiseTable(1000, 123)
    np.testing.assert_array_equal(table.table, np.random.default_rng(123).standard_normal(1000, dtype=np.float32))
    pool, _ = pool_for(args, table)
    try:
        table.table[7] = 42.0  # written by the master after the workers started
        for conn in pool.conns:
            conn.send(("peek", 7))
            _, _, value, name = conn.recv()
            assert value == 42.0 and name == table.shm.name  # a copy would still hold the old number
    finally:
        pool.close()
        table.close()


@FORK_ONLY
def test_results_of_an_older_generation_are_dropped_and_counted():
    args = config(**{**TINY, "workers": 2, "lockstep": 1})  # one job per message: one for each worker
    table = eo.NoiseTable(100_000, 123)
    pool, sizes = pool_for(args, table)
    try:
        task = {"theta": np.zeros(eo.n_params(sizes), np.float32), "ob_mean": np.zeros(4), "ob_std": np.ones(4),
                "ob_clip": True}
        jobs = [("train", 0, 0), ("train", 0, 1)]
        pool.run(task, lambda res: jobs.pop() if jobs else None, lambda res: not jobs)  # closes at once
        assert len(pool.busy) == 2  # both workers still run their pair of generation 0
        evals = [("eval", 1, 0)]
        results = pool.run(task, lambda res: evals.pop() if evals else None, lambda res: len(res) == 1)
        assert list(results) == [0] and len(results[0]) == 2  # (return, length): only the new task's result
        assert pool.stale >= 1 and pool.stale + len(pool.busy) == 2  # each old pair is dropped when it comes back
    finally:
        pool.close()
        table.close()


def test_a_generation_closes_at_the_shortest_finished_prefix():
    args = config(**{**TINY, "population": 4})
    gen = eo.Generation(0, 0, args)
    assert gen.jobs_left() == 2
    jobs = [gen.next_job({}) for _ in range(3)]
    assert [j[2] for j in jobs[:2]] == [0, 1] and jobs[2] is None  # 2 pairs = 4 episodes, no more
    assert gen.jobs_left() == 0
    pair = eo.PairResult("pair", 0, [1.0, 2.0], [0.0, 0.0], [10, 10], None, None, {})
    assert not gen.done({1: pair})  # job 0 is not back: the prefix is not finished
    assert gen.done({0: pair, 1: pair}) and gen.closed_at == 2
    args = config(**{**TINY, "population": 2, "min_timesteps": 25})
    gen = eo.Generation(0, 0, args)
    assert gen.next_job({})[2] == 0  # the population needs it
    assert gen.next_job({})[2] == 1  # no steps counted yet: a free worker gets one more pair
    assert gen.next_job({0: pair, 1: pair}) is None  # 40 steps >= 25
    assert not gen.done({0: pair}) and gen.done({0: pair, 1: pair}) and gen.closed_at == 2
    args = config(**{**TINY, "population": 2, "min_timesteps": 15})
    gen = eo.Generation(0, 0, args)
    gen.next_job({}), gen.next_job({})
    assert gen.done({0: pair, 1: pair}) and gen.closed_at == 1  # job 1 finished but is skipped


@FORK_ONLY
def test_stale_results_are_counted_in_the_log(tmp_path):
    # min_timesteps makes the master hand out more pairs than it may need: those still running when
    # the generation closes come back stale; finished ones past the prefix are skipped.
    result = run(tmp_path, workers=2, population=2, min_timesteps=300, iterations=4)
    rows = list(csv_rows(result["run_dir"]))
    assert any(float(r["skipped_frac"]) > 0 for r in rows)
    assert all(int(r["timesteps_this_gen"]) >= 300 for r in rows)


def csv_rows(run_dir):
    import csv
    with open(os.path.join(run_dir, "progress.csv")) as f:
        yield from csv.DictReader(f)


# ---------------------------------------------------------------- behaviour


@FORK_ONLY
def test_same_seed_gives_identical_results_with_any_worker_count(tmp_path):
    one = run(tmp_path / "one", workers=1, min_timesteps=200, eval_prob=0.2)
    two = run(tmp_path / "two", workers=2, min_timesteps=200, eval_prob=0.2)
    np.testing.assert_array_equal(one["theta"], two["theta"])
    assert one["env_steps"] == two["env_steps"] and one["episodes"] == two["episodes"]
    for workers, lockstep in ((1, 1), (2, 3)):  # pairs stepped one at a time, or three together
        same = run(tmp_path / f"lockstep{lockstep}", workers=workers, lockstep=lockstep, min_timesteps=200,
                   eval_prob=0.2)
        np.testing.assert_array_equal(one["theta"], same["theta"])
        assert one["env_steps"] == same["env_steps"] and one["episodes"] == same["episodes"]
    other = run(tmp_path / "other", workers=1, min_timesteps=200, eval_prob=0.2, seed=1)
    assert not np.array_equal(one["theta"], other["theta"])


@FORK_ONLY
def test_bipedalwalker_runs_are_identical_with_any_worker_count_and_lockstep(tmp_path):
    # With a plain env.reset, which environment object played which episode before changed the run.
    kw = dict(env="BipedalWalker-v3", population=8, episode_length=300, eval_every=3, seed=2)
    one = run(tmp_path / "one", workers=1, lockstep=1, **kw)
    two = run(tmp_path / "two", workers=2, lockstep=3, **kw)
    np.testing.assert_array_equal(one["theta"], two["theta"])
    assert one["env_steps"] == two["env_steps"]


def test_resume_equals_an_uninterrupted_run(tmp_path):
    full = run(tmp_path / "full", iterations=6, calc_obstat_prob=0.5)
    half = run(tmp_path / "half", iterations=3, calc_obstat_prob=0.5)
    resumed = eo.main(["--resume", half["run_dir"], "--iterations", "6"])
    np.testing.assert_array_equal(full["theta"], resumed["theta"])
    np.testing.assert_array_equal(full["ob_stat"].sum, resumed["ob_stat"].sum)
    np.testing.assert_array_equal(full["optimizer"].v, resumed["optimizer"].v)
    assert resumed["episodes"] == full["episodes"] and resumed["env_steps"] == full["env_steps"]


def test_an_interrupt_during_an_evaluation_resumes_to_the_uninterrupted_run(tmp_path, monkeypatch):
    # A stop while generation 4 is evaluated leaves generation 3 to resume from: the resumed run
    # redoes generation 4 with its evaluation (the same rule as ars.py).
    full = run(tmp_path / "full", iterations=6, eval_every=2)
    evaluate = eo.WorkerPool.evaluate

    def interrupted(self, task, generation, episodes):
        if generation == 4:
            raise KeyboardInterrupt
        return evaluate(self, task, generation, episodes)

    monkeypatch.setattr(eo.WorkerPool, "evaluate", interrupted)
    half = run(tmp_path / "half", iterations=6, eval_every=2)
    assert half["status"] == "interrupted" and half["iteration"] == 3
    monkeypatch.setattr(eo.WorkerPool, "evaluate", evaluate)
    resumed = eo.main(["--resume", half["run_dir"], "--iterations", "6"])
    np.testing.assert_array_equal(full["theta"], resumed["theta"])
    full_rows, rows = list(csv_rows(full["run_dir"])), list(csv_rows(half["run_dir"]))
    assert [r["iteration"] for r in rows] == ["1", "2", "3", "4", "5", "6"]
    assert [r["eval_return_mean"] for r in rows] == [r["eval_return_mean"] for r in full_rows]


@pytest.mark.parametrize("target", [None, -1e9])
def test_an_interrupt_at_any_line_resumes_to_the_uninterrupted_run(tmp_path, monkeypatch, target):
    # Every line of a generation (the update, the evaluation, the log row, the checkpoint) is a
    # point where Ctrl-C or SIGTERM can stop the run; from each, --resume must give the same run.
    # With a target (reached at generation 2), a stop after generation 2 is logged ends the run there.
    kw = dict(iterations=2, eval_every=2, save_every=2)
    if target is not None:
        kw["target_return"] = target
    monkeypatch.setattr(eo, "plot_progress", lambda *a: None)  # fast: 10-20 runs, each resumed
    full = run(tmp_path / "full", **kw)
    assert full["status"] == ("done" if target is None else "target")
    points = 0
    for n, half in interrupted_runs(eo.train, lambda n: run(tmp_path / f"at{n}", **kw), after=1,
                                    also=(eo.Run.log, eo.Run.save_if_due, eo.evaluate_if_due)):
        if half["status"] == "interrupted":
            half = eo.main(["--resume", half["run_dir"], "--iterations", "2"])
        assert half["status"] == full["status"], f"interrupted at line {n}"
        np.testing.assert_array_equal(full["theta"], half["theta"], err_msg=f"interrupted at line {n}")
        rows, full_rows = list(csv_rows(half["run_dir"])), list(csv_rows(full["run_dir"]))
        assert [(r["iteration"], r["return_mean"], r["eval_return_mean"]) for r in rows] == \
            [(r["iteration"], r["return_mean"], r["eval_return_mean"]) for r in full_rows], f"interrupted at line {n}"
        points = n
    assert points > 15  # every line of the second pass of the loop, and of the log and checkpoint


def test_a_stop_during_the_final_save_keeps_the_target(tmp_path, monkeypatch):
    # Once the loop is over, Ctrl-C or SIGTERM is held until the run is saved (as in ars.py).
    result, handler = sigint_during_close(monkeypatch, eo.WorkerPool, lambda: run(tmp_path, iterations=4, eval_every=2, target_return=-1e9))
    assert result["status"] == "target" and result["iteration"] == 2
    assert handler is signal.default_int_handler  # the script restored the handler it held


def test_eval_prob_runs_noiseless_episodes_and_logs_them(tmp_path):
    rows = list(csv_rows(run(tmp_path, iterations=3, population=10, eval_prob=0.5)["run_dir"]))
    counts = [int(r["noiseless_count"]) for r in rows]
    assert sum(counts) > 0 and all(float(r["noiseless_return_mean"]) > 0 for r, c in zip(rows, counts) if c)
    assert all(float(r["noiseless_return_mean"]) != float(r["noiseless_return_mean"]) for r, c in zip(rows, counts)
               if not c)  # nan when a generation had none
    # noiseless episodes come on top of the population: 10 training episodes in every generation
    assert all(int(r["episodes_this_gen"]) - int(r["noiseless_count"]) == 10 for r in rows)
    assert int(rows[-1]["episodes"]) == sum(int(r["episodes_this_gen"]) for r in rows)
    none = list(csv_rows(run(tmp_path / "none", iterations=3, population=10)["run_dir"]))
    assert all(int(r["noiseless_count"]) == 0 for r in none)


def test_es_learns_cartpole_within_a_tiny_budget(tmp_path):
    result = run(tmp_path, iterations=15, population=20, hidden="16", sigma=0.05, alpha=0.03, eval_every=15,
                 eval_episodes=10)
    rows = list(csv_rows(result["run_dir"]))
    assert float(rows[-1]["eval_return_mean"]) > 150 > 3 * float(rows[0]["return_mean"])


def test_observation_statistics_come_from_training_pairs_only(tmp_path):
    none = run(tmp_path / "a", calc_obstat_prob=1.0, no_obs_norm=True)  # without normalization nothing is kept
    some = run(tmp_path / "b", calc_obstat_prob=1.0)
    assert none["ob_stat"].count == pytest.approx(1e-2)
    assert some["ob_stat"].count == pytest.approx(1e-2 + some["env_steps"])  # every training step, no evaluation


@pytest.mark.parametrize("obs_norm", [True, False])
def test_the_docs_snippet_loads_the_policy_that_play_runs(tmp_path, obs_norm):
    """The snippet of docs/es_openai.md ("To use a saved policy in your own code"), run as written."""
    result = run(tmp_path, env="Pendulum-v1", iterations=2, population=4, calc_obstat_prob=1.0,
                 **({} if obs_norm else {"no_obs_norm": True}))
    text = open(os.path.join(ROOT, "docs", "es_openai.md")).read()
    snippet = text.split("import numpy as np, gymnasium as gym, es_openai as eo")[1].split("```")[0]
    snippet = snippet.replace("runs/.../checkpoints/latest.npz", os.path.join(result["run_dir"], "checkpoints",
                                                                               "latest.npz"))
    observation = np.array([0.3, -0.9, 7.5])  # |o| > 5: clipped only by a normalizing policy
    scope = {"np": np, "gym": gym, "eo": eo, "observation": observation}
    exec(snippet, scope)
    args = config(**{**TINY, "env": "Pendulum-v1", **({} if obs_norm else {"no_obs_norm": True})})
    sizes, act_space = eo.saved_run(result["run_dir"], args)
    task = eo.task_of(eo.load_state(os.path.join(result["run_dir"], "checkpoints", "latest.npz"), args, sizes),
                      args)
    played = eo.Policy(task["theta"], sizes, args.activation, task["ob_mean"], task["ob_std"], act_space,
                       args.ac_bins, task["ob_clip"])
    np.testing.assert_array_equal(scope["action"], played(observation))
    assert (result["ob_stat"].count > 1) == obs_norm  # statistics kept only when normalizing


# Every value of every option, in every pair with every value of every other option (a pairwise
# covering set: 16 runs instead of the 192 of the full product, chosen greedily below).
FACTORS = {
    "fitness": ("centered_rank", "sign", "centered_sign_rank", "none"),
    "optimizer": ("adam", "sgd", "plain"),
    "mirror": (True, False),
    "obs_norm": (True, False),
    "space": (("CartPole-v1", {}), ("Pendulum-v1", {"ac_bins": 5, "activation": "elu"}),
              ("Pendulum-v1", {"ac_noise_std": 0.0, "activation": "lrelu", "min_timesteps": 60}),
              ("Pendulum-v1", {"ac_noise_std": 0.1, "activation": "relu", "eval_prob": 0.3})),
}


def pairwise(factors: dict) -> list:
    names = list(factors)
    todo = {(a, i, b, j) for a, b in itertools.combinations(range(len(names)), 2)
            for i in range(len(factors[names[a]])) for j in range(len(factors[names[b]]))}
    chosen = []
    candidates = list(itertools.product(*(range(len(factors[n])) for n in names)))
    while todo:
        best = max(candidates, key=lambda c: sum((a, c[a], b, c[b]) in todo
                                                for a, b in itertools.combinations(range(len(c)), 2)))
        todo -= {(a, best[a], b, best[b]) for a, b in itertools.combinations(range(len(best)), 2)}
        chosen.append({n: factors[n][k] for n, k in zip(names, best)})
    return chosen


def test_every_pair_of_option_values_runs(tmp_path):
    runs = pairwise(FACTORS)
    assert len(runs) <= 20
    for i, c in enumerate(runs):
        env_id, extra = c["space"]
        kw = dict(TINY, env=env_id, iterations=1, population=4, eval_episodes=1, fitness=c["fitness"],
                  optimizer=c["optimizer"], episode_length=20, **extra)
        if not c["mirror"]:
            kw["no_mirror"] = True
        if not c["obs_norm"]:
            kw["no_obs_norm"] = True
        result = run(tmp_path / str(i), **kw)
        assert result["status"] == "done" and result["iteration"] == 1 and np.isfinite(result["theta"]).all(), c


@pytest.mark.parametrize("option", ["fitness", "optimizer"])
def test_every_value_of_an_option_changes_the_run(tmp_path, option):
    # An option read but ignored would leave theta as the default value gives it.
    base = dict(TINY, env="Pendulum-v1", iterations=2, population=4, eval_episodes=1, episode_length=20)
    thetas = [run(tmp_path / str(v), **{**base, option: v})["theta"] for v in FACTORS[option]]
    for theta, value in zip(thetas[1:], FACTORS[option][1:]):
        assert not np.array_equal(theta, thetas[0]), value


@pytest.mark.parametrize("argv, message", [
    (["--env", "CartPole-v1", "--ac-bins", "5"], "--ac-bins is for Box actions"),
    (["--env", "CartPole-v1", "--ac-noise-std", "0.1"], "--ac-noise-std is for Box actions"),
    (["--env", "Pendulum-v1", "--ac-bins", "1"], "--ac-bins must be 0 (continuous) or at least 2"),
    (["--env", "Pendulum-v1", "--population", "5"], "even with mirrored sampling"),
    (["--env", "Pendulum-v1", "--calc-obstat-prob", "0"], "--calc-obstat-prob must be positive"),
    (["--env", "Pendulum-v1", "--eval-prob", "1"], "--eval-prob must be in [0, 1)"),
    (["--env", "Pendulum-v1", "--noise-size", "10"], "smaller than the policy"),
    (["--env", "Pendulum-v1", "--hidden", "40000,40000"], "smaller than the policy"),  # before theta_0 (6 GB)
    (["--env", "Pendulum-v1", "--noise-size", str(10**12)], "lower --noise-size"),
    (["--env", "Pendulum-v1", "--sigma", "0"], "--sigma must be positive"),
    (["--env", "Pendulum-v1", "--alpha", "-1"], "--alpha must be positive"),
    (["--env", "Pendulum-v1", "--momentum", "1"], "--momentum must be in [0, 1)"),
    (["--env", "Pendulum-v1", "--beta2", "1.5"], "--beta1 and --beta2"),
    (["--env", "Pendulum-v1", "--l2coeff", "-0.1"], "--l2coeff"),
    (["--env", "Pendulum-v1", "--sigma", "nan"], "finite"),
    (["--env", "Pendulum-v1", "--hidden", "64,x"], "--hidden takes sizes"),
    (["--env", "Pendulum-v1", "--hidden", "0"], "--hidden sizes must be at least 1"),
    (["--env", "Pendulum-v1", "--workers", "0"], "--workers"),
    (["--env", "Pendulum-v1", "--lockstep", "0"], "--lockstep must be at least 1"),
    (["--env", "Pendulum-v1", "--fitness", "best"], "invalid choice"),
    (["--env", "HalfCheetah-v9"], "did you mean HalfCheetah-v5"),
    (["--env", "Blackjack-v1"], "observations must be a flat Box"),
    (["--env", "Pendulum-v1", "--target-return", "nan"], "not nan"),
])
def test_bad_flags(tmp_path, argv, message):
    small_table = [] if "--noise-size" in argv else ["--noise-size", "100000"]
    assert message in bad(tmp_path, *argv, *small_table)


def bad(tmp_path, *argv):
    return refused(eo, tmp_path, *argv)


def test_a_resumed_run_takes_its_workers_from_this_machine(tmp_path, monkeypatch):
    part = run(tmp_path, iterations=1)
    cfg_path = os.path.join(part["run_dir"], "config.json")
    json.dump({**json.load(open(cfg_path)), "workers": 64}, open(cfg_path, "w"))  # saved on a larger machine
    seen = {}
    monkeypatch.setattr(eo, "train", lambda args: seen.update(vars(args)) or {"status": "done"})
    eo.main(["--resume", part["run_dir"], "--iterations", "3"])
    assert seen["workers"] == eo.available_cores() and seen["iterations"] == 3


def test_bad_checkpoints_and_run_directories(tmp_path):
    assert "not a run directory of es_openai.py" in bad(tmp_path, "--resume", str(tmp_path / "nowhere"))
    assert "not a run directory" in bad(tmp_path, "--evaluate-snapshots", str(tmp_path))
    good = run(tmp_path / "good", iterations=1)
    latest = os.path.join(good["run_dir"], "checkpoints", "latest.npz")
    saved = open(latest, "rb").read()
    open(latest, "wb").write(b"not a checkpoint")
    assert "corrupt" in bad(tmp_path, "--play", good["run_dir"])
    marker = str(tmp_path / "unpickled")  # a checkpoint with a pickled object is refused, never unpickled
    np.savez(latest, **{**dict(np.load(good["run_dir"] + "/checkpoints/iter_000001.npz")), "theta": booby_trapped(marker)})
    assert "corrupt" in bad(tmp_path, "--play", good["run_dir"]) and not os.path.exists(marker)
    os.remove(latest)
    assert "no checkpoint" in bad(tmp_path, "--resume", good["run_dir"])
    open(latest, "wb").write(saved)
    cfg_path = os.path.join(good["run_dir"], "config.json")
    cfg = json.load(open(cfg_path))
    json.dump({**cfg, "hidden": "9"}, open(cfg_path, "w"))
    assert "this run needs [4, 9, 2]" in bad(tmp_path, "--play", good["run_dir"])
    json.dump({**cfg, "obs_norm": False}, open(cfg_path, "w"))  # the checkpoint records its normalization
    assert "with observation normalization; config.json says without" in bad(tmp_path, "--play", good["run_dir"])
    json.dump({**cfg, "env": "Acrobot-v1"}, open(cfg_path, "w"))
    assert "is for CartPole-v1, not Acrobot-v1" in bad(tmp_path, "--play", good["run_dir"])


def test_run_directories_that_cannot_be_written(tmp_path):
    good = run(tmp_path / "good", iterations=2, save_every=1)
    files = lambda: {p: os.path.getmtime(p) for p in glob.glob(os.path.join(good["run_dir"], "**"), recursive=True)  # noqa: E731
                     if os.path.isfile(p)}
    before = files()
    blocked = os.path.join(good["run_dir"], "config.json.tmp")
    os.mkdir(blocked)  # config.json cannot be rewritten (even as root)
    assert "cannot write to the run directory" in bad(tmp_path, "--resume", good["run_dir"], "--iterations", "3")
    os.rmdir(blocked)
    os.mkdir(os.path.join(good["run_dir"], "snapshots.csv"))
    assert "cannot write snapshots.csv" in bad(tmp_path, "--evaluate-snapshots", good["run_dir"])
    assert files() == before


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    out = cli("--env", "CartPole-v1", "--noise-size", "100000", "--out-dir", str(blocker / "runs"), timeout=60)
    assert out.returncode == 2 and "cannot create the run directory" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


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


class CrashLaterEnv(CrashEnv):
    """A quiet episode of 10 steps; a worker process dies at its 13th reset: with one worker, 4
    episodes a generation and no evaluation before the last, in generation 4."""
    resets = {}  # per process: the master's own resets do not count

    def reset(self, seed=None, options=None):
        n = self.resets[os.getpid()] = self.resets.get(os.getpid(), 0) + 1
        if n == 13 and os.getpid() != TEST_PROCESS:
            os._exit(3)
        return np.zeros(1), {}

    def step(self, a):
        return np.zeros(1), 0.0, False, False, {}


TEST_PROCESS = os.getpid()
gym.register("EoCrashTest-v0", entry_point=CrashEnv, max_episode_steps=10)
gym.register("EoCrashLaterTest-v0", entry_point=CrashLaterEnv, max_episode_steps=10)
gym.register("EoNanTest-v0", entry_point=NanEnv, max_episode_steps=10)


@FORK_ONLY
def test_nan_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    result = run(tmp_path, env="EoNanTest-v0", iterations=50, optimizer="plain", alpha=10.0, ac_noise_std=0.0,
                 save_every=1, hidden="4")
    assert result["status"] == "diverged" and 0 < result["iteration"] < 50
    assert "NaN or inf" in capsys.readouterr().err
    ck = np.load(os.path.join(result["run_dir"], "checkpoints", "latest.npz"), allow_pickle=False)
    assert np.isfinite(ck["theta"]).all() and int(ck["iteration"]) == result["iteration"]


@FORK_ONLY
def test_a_dying_worker_ends_the_run_with_an_error_not_a_hang(tmp_path):
    def on_alarm(signum, frame):
        raise TimeoutError("no answer within 60 s")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(60)
    try:
        with pytest.raises(RuntimeError, match="worker process died"):
            run(tmp_path, env="EoCrashTest-v0", workers=2)
    finally:
        signal.alarm(0)
    assert os.path.isfile(glob.glob(str(tmp_path / "*" / "checkpoints" / "latest.npz"))[0])


@FORK_ONLY
def test_a_worker_dying_later_leaves_its_last_generation_even_through_a_ctrl_c(tmp_path, monkeypatch):
    def crashing_run():
        try:
            run(tmp_path, env="EoCrashLaterTest-v0", iterations=10, population=4, eval_every=100, save_every=100)
        except BaseException as e:  # a KeyboardInterrupt here: the Ctrl-C cut the final save short
            return e
    error, handler = sigint_during_close(monkeypatch, eo.WorkerPool, crashing_run)
    assert isinstance(error, RuntimeError) and "worker process died" in str(error), repr(error)
    (run_dir,) = glob.glob(str(tmp_path / "*"))
    logged = list(csv_rows(run_dir))
    ck = np.load(os.path.join(run_dir, "checkpoints", "latest.npz"), allow_pickle=False)
    # the only snapshot is generation 0's: a later one in latest.npz was saved after the death
    assert int(ck["iteration"]) == len(logged) >= 2
    assert handler is signal.default_int_handler


def test_sigterm_stops_workers_and_leaves_a_checkpoint(tmp_path):
    tables_before = set(glob.glob("/dev/shm/psm_*"))
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "es_openai.py"), "--env", "Pendulum-v1",
                             "--iterations", "100000", "--workers", "2", "--noise-size", "1000000",
                             "--population", "10", "--eval-every", "1", "--eval-episodes", "4",
                             "--out-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    for line in proc.stdout:
        if line.startswith("gen ") and int(line.split()[1]) >= 3:
            break
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # a second one, as `timeout` or a shell may send: it must wait
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "--resume" in err and "Traceback" not in err, (proc.returncode, err)
    run_dir = glob.glob(str(tmp_path / "*"))[0]
    ck = np.load(os.path.join(run_dir, "checkpoints", "latest.npz"), allow_pickle=False)
    assert int(ck["iteration"]) >= 3
    resumed = cli("--resume", run_dir, "--iterations", str(int(ck["iteration"]) + 1))
    assert resumed.returncode == 0, resumed.stderr
    states = subprocess.run(["ps", "-o", "stat=", "-s", str(proc.pid)], capture_output=True, text=True).stdout
    assert all(s.startswith("Z") for s in states.split())  # no orphan worker process still running
    assert set(glob.glob("/dev/shm/psm_*")) <= tables_before  # the shared noise table is gone too


# ---------------------------------------------------------------- the command line


def test_help_lists_the_presets_and_the_paper_names():
    out = cli("--help")
    assert out.returncode == 0
    for word in list(eo.PRESETS) + ["noise_stdev", "population_size", "return_proc_mode", "snapshot_freq"]:
        assert word in out.stdout


def test_the_docs_presets_table_matches_the_code():
    """docs/es_openai.md's Presets table: hidden, sigma, alpha, l2coeff, n, bins, generations and target."""
    text = open(os.path.join(ROOT, "docs", "es_openai.md")).read().split("### Presets")[1].split("\n\n*Target*")[0]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| ") and not line.startswith("| env")}
    assert set(rows) == set(eo.PRESETS) | {"(generic)"}
    for env_id, cells in rows.items():
        p = {**eo.GENERIC, **eo.PRESETS.get(env_id, {})}
        hidden, _, sigma, alpha, l2, n, bins, _, generations, _, target = cells[:11]
        assert (hidden, float(sigma), float(alpha), float(l2), int(n), int(generations)) == \
               (p["hidden"], p["sigma"], p["alpha"], p["l2coeff"], p["population"], p["iterations"]), env_id
        assert int(bins or 0) == p.get("ac_bins", 0), env_id
        assert (float(target) if target != "none" else None) == (round(p["target_return"], 2) if "target_return" in p
                                                                else None), env_id


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="reads /proc/cpuinfo")
def test_versions_name_the_processor_and_its_simd_level():
    """config.json records the processor's model and whether it has AVX2 and AVX-512, which decide
    the last bits of NumPy's arithmetic (docs/es_openai.md, "The same seed on another processor")."""
    text = open("/proc/cpuinfo").read()
    v = eo.versions()
    flags = set(next(line for line in text.splitlines() if line.startswith("flags")).split(":", 1)[1].split())
    assert v["simd"] == [f for f in ("avx2", "avx512f") if f in flags]
    model = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")]
    assert v["processor"] and (not model or v["processor"] == model[0])


def test_command_line_run_snapshots_play_and_evaluate_snapshots(tmp_path):
    out = cli("--env", "Pendulum-v1", "--iterations", "4", "--population", "4", "--save-every", "2",
              "--eval-every", "2", "--eval-episodes", "1", "--noise-size", "1000000", "--workers", "2",
              "--ac-bins", "5", "--out-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    (run_dir,) = glob.glob(str(tmp_path / "Pendulum-v1__es_openai__0__*"))
    cfg = json.load(open(os.path.join(run_dir, "config.json")))
    assert cfg["ac_bins"] == 5 and cfg["ac_noise_std"] == 0.01 and cfg["versions"]["numpy"] == np.__version__
    assert cfg["versions"]["processor"] and "simd" in cfg["versions"]
    header, *rows = open(os.path.join(run_dir, "progress.csv")).read().splitlines()
    assert header.split(",") == eo.COLUMNS and len(rows) == 4
    assert out.stdout.count("\ngen ") == 4
    snaps = sorted(os.listdir(os.path.join(run_dir, "checkpoints")))
    assert snaps == ["iter_000000.npz", "iter_000002.npz", "iter_000004.npz", "latest.npz"]
    assert os.path.getsize(os.path.join(run_dir, "progress.png")) > 1000
    ev = cli("--evaluate-snapshots", run_dir, "--episodes", "2", "--workers", "2")
    assert ev.returncode == 0, ev.stderr
    header, *rows = open(os.path.join(run_dir, "snapshots.csv")).read().splitlines()
    assert [int(float(r.split(",")[0])) for r in rows] == [0, 2, 4]
    assert os.path.getsize(os.path.join(run_dir, "snapshots.png")) > 1000
    played = cli("--play", run_dir, "--episodes", "2", "--video")
    assert played.returncode == 0 and "mean return" in played.stdout and "generation 4" in played.stdout
    (gif,) = glob.glob(os.path.join(run_dir, "video", "*.gif"))
    assert open(gif, "rb").read(6) == b"GIF89a"
