"""The measurements behind the "Scaling out" sections (README, docs/ars.md, docs/es_openai.md):

1. training steps/s of ars.py and es_openai.py with 1 and 2 workers, local processes against Ray
   actors (a Ray instance started on this machine beforehand, so its start-up is not timed);
2. what travels per iteration: the payload pickled as it is sent, and every byte that crossed the
   loopback interface during the Ray iterations (Ray's own traffic between the driver, the actors
   and its services included; the local pool's pipes do not use the network);
3. the cost of one job round trip, a job handed out and its result back, with one-step episodes.

    python docs/bench/ray_scaling.py [--env HalfCheetah-v5] [--iterations 6] [--repeats 3]

It needs Ray (pip install ray) and should run on an otherwise idle machine.
"""
import argparse
import os
import pickle
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import numpy as np  # noqa: E402

import ars  # noqa: E402
import es_openai as eo  # noqa: E402


def loopback_bytes() -> int:
    """Bytes received on the loopback interface so far (each local TCP byte counts once there)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, data = line.partition(":")
            if name.strip() == "lo":
                return int(data.split()[0])
    return 0


def parse(module, **kw):
    argv = []
    for key, value in kw.items():
        argv += [f"--{key.replace('_', '-')}"] + ([] if value is True else [str(value)])
    return module.resolve_config(module.build_parser().parse_args(argv))


def ars_setup(env, workers, ray_backend, episode_length=None):
    args = parse(ars, env=env, n_directions=8, top_b=8, workers=workers, **({"ray": True} if ray_backend else {}),
                 **({"episode_length": episode_length} if episode_length else {}))
    obs_dim, act_dim = ars.check_env(args.env, args.episode_length)
    pool = (ars.RayPool if ray_backend else ars.WorkerPool)(workers, args.env, args.episode_length, 0, args.shift,
                                                           args.reward_clip)
    state = {"M": np.zeros((act_dim, obs_dim)), "iteration": 0, "episodes": 0, "env_steps": 0, "wall_time": 0.0,
             "stats": (0, np.zeros(obs_dim), np.zeros(obs_dim))}
    return args, pool, state, lambda st: ars.ars_iteration(pool, st, args), lambda: None


def es_setup(env, workers, ray_backend):
    args = parse(eo, env=env, population=40, noise_size=10_000_000, workers=workers,
                 **({"ray": True} if ray_backend else {}))
    obs_dim, act_space = eo.check_env(args)
    sizes = eo.layer_sizes(obs_dim, args.hidden_sizes, act_space, args.ac_bins)
    noise = eo.make_noise_table(args)
    pool = (eo.RayPool if ray_backend else eo.WorkerPool)(workers, noise, args, act_space, sizes)
    state = eo.new_state(args, sizes, obs_dim)
    return args, pool, state, lambda st: eo.es_generation(pool, noise, st, args), noise.close


def measure(setup, env, workers, ray_backend, iterations):
    """(training steps/s, loopback bytes per iteration) over `iterations` after one warm-up."""
    args, pool, state, step, cleanup = setup(env, workers, ray_backend)
    try:
        state, _ = step(state)  # warm-up: environments made, parameters first sent
        steps0, t0, lo0 = state["env_steps"], time.perf_counter(), loopback_bytes()
        for _ in range(iterations):
            state, _ = step(state)
        seconds, lo = time.perf_counter() - t0, loopback_bytes() - lo0
    finally:
        pool.close()
        cleanup()
    return (state["env_steps"] - steps0) / seconds, lo / iterations


def round_trip(env, ray_backend, jobs=400):
    """Seconds per job of one worker running one-step evaluation episodes: the message costs plus
    a reset and a step of the environment."""
    args, pool, state, _, _ = ars_setup(env, 1, ray_backend, episode_length=1)
    try:
        M, mu, inv_sigma = state["M"], np.zeros(state["M"].shape[1]), np.ones(state["M"].shape[1])
        pool.run(0, M, mu, inv_sigma, 0.03, [("eval", j) for j in range(20)])  # warm-up
        t0 = time.perf_counter()
        pool.run(0, M, mu, inv_sigma, 0.03, [("eval", j) for j in range(jobs)])
        return (time.perf_counter() - t0) / jobs
    finally:
        pool.close()


def payloads(env):
    """Bytes of what ars.py and es_openai.py send per iteration, pickled as the pipes send them."""
    args, pool, state, step, _ = ars_setup(env, 1, False)
    try:
        M, stats = state["M"], state["stats"]
        mu, inv_sigma = ars.normalizer(stats, 2)
        params = len(pickle.dumps(("params", 0, M, mu, inv_sigma, 0.03)))
        job = len(pickle.dumps(("train", 5)))
        result = len(pickle.dumps(pool.run(0, M, mu, inv_sigma, 0.03, [("train", 0)])[0]))
    finally:
        pool.close()
    out = {"ars": dict(params=params, job=job, result=result, n_directions=args.n_directions)}
    args, pool, state, step, cleanup = es_setup(env, 1, False)
    try:
        task = eo.task_of(state, args)
        gen = eo.Generation(args.seed, 0, args)
        results = pool.run(task, gen.next_job, gen.done)
        pairs = [r for r in results.values() if r[0] == "pair"]
        out["es_openai"] = dict(params=len(pickle.dumps(("task", 1, task))), job=len(pickle.dumps(("job", 1, "train", 0, 5))),
                                result=statistics.median(len(pickle.dumps(("result", 1, 0, r))) for r in pairs),
                                pairs=len(pairs), theta=state["theta"].size)
    finally:
        pool.close()
        cleanup()
    return out


def exercise_seconds_per_iteration(ray_backend: bool, iterations: int) -> float:
    """The teacher's copy of the exercise on CartPole-v1 (25 pairs): local processes or Ray tasks,
    both on the 2 CPUs."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "teacher"))
    import nes_exercise_solution as solution
    from concurrent.futures import ProcessPoolExecutor
    executor = solution.RayExecutor() if ray_backend else ProcessPoolExecutor(2)
    try:
        solution.train("CartPole-v1", executor, 1, 25, 0.1, 0.05, log=lambda *a: None)  # warm-up
        t0 = time.perf_counter()
        solution.train("CartPole-v1", executor, iterations, 25, 0.1, 0.05, log=lambda *a: None)
        return (time.perf_counter() - t0) / iterations
    finally:
        executor.shutdown()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--repeats", type=int, default=3, help="interleaved repetitions; medians are reported")
    a = p.parse_args()
    import ray
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    time.sleep(5)
    idle0, t0 = loopback_bytes(), time.time()
    time.sleep(10)
    idle_rate = (loopback_bytes() - idle0) / (time.time() - t0)
    print(f"Ray idle traffic on the loopback: {idle_rate:,.0f} bytes/s (included in the per-iteration bytes below)")
    for name, value in payloads(a.env).items():
        print(f"{name} payload (pickled bytes): {value}")
    for backend in (False, True):
        print(f"job round trip ({'Ray' if backend else 'local'}, 1 worker, one-step episodes): "
              f"{1e6 * statistics.median(round_trip(a.env, backend) for _ in range(a.repeats)):.0f} us")
    print(f"\n| script | backend | workers | training steps/s (median of {a.repeats}) | loopback bytes per iteration |")
    print("|---|---|---|---|---|")
    for name, setup in (("ars.py", ars_setup), ("es_openai.py", es_setup)):
        table = {}
        for _ in range(a.repeats):  # interleaved: a slow minute of the machine hits every setting
            for backend in (False, True):
                for workers in (1, 2):
                    table.setdefault((backend, workers), []).append(
                        measure(setup, a.env, workers, backend, a.iterations))
        for (backend, workers), values in table.items():
            rate, lo = statistics.median(v[0] for v in values), statistics.median(v[1] for v in values)
            print(f"| {name} | {'Ray' if backend else 'local'} | {workers} | {rate:,.0f} | {lo:,.0f} |")
    per_task = len(pickle.dumps(exercise_policy_bytes()))
    print(f"\nexercise: one task's arguments (mu, seed, sigma, env) pickled: {per_task} bytes")
    for backend in (False, True):
        s = statistics.median(exercise_seconds_per_iteration(backend, a.iterations) for _ in range(a.repeats))
        print(f"exercise, {'Ray tasks' if backend else 'local processes'}, 2 CPUs: {s:.3f} s per iteration (25 pairs)")
    ray.shutdown()


def exercise_policy_bytes():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "teacher"))
    import nes_exercise_solution as solution
    return solution.initial_policy(4, 2), 12345, 0.1, "CartPole-v1"


if __name__ == "__main__":
    main()
