"""The checker of the NES class exercise: `python nes_exercise.py --check` runs it on the student's
file. Each part is compared with exact expected values, and the common wrong answers are named with
their fix at the part that holds them (docs/nes_exercise.md, each part's "The checker")."""

import os
import re
import sys
import traceback
from concurrent.futures import Future

import gymnasium as gym
import numpy as np


class Wrong(Exception):
    """A part computes something else: the message says what, and how to fix it."""


# ---------------------------------------------------------------- helpers


def same(a, b) -> bool:
    """Two policies (dicts of arrays) with the same keys, shapes and values."""
    return (
        isinstance(a, dict)
        and isinstance(b, dict)
        and set(a) == set(b)
        and all(
            np.shape(a[k]) == np.shape(b[k]) and np.allclose(a[k], b[k], rtol=1e-9, atol=1e-12)
            for k in b
        )
    )


def shares_arrays(a, b) -> bool:
    """Whether two policies hold one array in common (a dict copy keeps its values' arrays)."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    return any(k in a and np.shares_memory(np.asarray(a[k]), np.asarray(b[k])) for k in b)


def tiny_policy(ex) -> dict:
    rng = np.random.default_rng(7)
    return {k: rng.normal(size=s) for k, s in ex.policy_shapes(4, 2, 3).items()}


def copy(policy: dict) -> dict:
    return {k: np.array(v, copy=True) for k, v in policy.items()}


def shifted(ex, policy, seeds, weights, scale) -> dict:
    """policy + scale * sum_i weights[i] eps_i, eps_i = sample_noise(policy, seeds[i])."""
    new = copy(policy)
    for s, w in zip(seeds, weights):
        eps = ex.sample_noise(policy, s)
        for k in new:
            new[k] = new[k] + scale * w * eps[k]
    return new


class QuadraticSeeded(gym.Env):
    """One step whose observation comes from the reset seed and whose return -|a - a*|^2 is
    continuous in the action: the mean, plus and minus policies, and every env seed, give different
    returns."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float64)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.obs = self.np_random.uniform(-1, 1, 4)
        return self.obs.copy(), {}

    def step(self, action):  # returns of tens: a log line rounded to whole numbers still shows them
        reward = -100 * float(np.sum((np.asarray(action) - [0.5, -0.3]) ** 2))
        return self.obs.copy(), reward, True, False, {}


if "NesCheck-v0" not in gym.registry:
    gym.register("NesCheck-v0", entry_point=QuadraticSeeded)


# ---------------------------------------------------------------- the five parts


def part1(ex):
    for sizes in ((4, 2, 16), (3, 1, 5), (6, 3, 8)):  # CartPole's first: the default hidden
        mu = ex.initial_policy(*sizes)
        if not isinstance(mu, dict) or set(mu) != set(ex.KEYS):
            got = type(mu).__name__
            if isinstance(mu, dict):
                got += f" with {sorted(mu)}"
            raise Wrong(f"return a dict with the keys {ex.KEYS}, got {got}")
        shapes = {k: np.shape(mu[k]) for k in ex.KEYS}
        if shapes != ex.policy_shapes(*sizes):
            raise Wrong(f"initial_policy{sizes}: {wrong_sizes(ex, sizes, shapes)}")
        for k in ex.KEYS:
            if np.any(np.asarray(mu[k]) != 0):
                raise Wrong(f"{k} is not all zeros")
            if np.asarray(mu[k]).dtype.kind != "f":
                raise Wrong(
                    f"{k} holds {np.asarray(mu[k]).dtype} zeros, not float zeros: integer arrays "
                    "cannot take the fractional steps of Part 3"
                )


def wrong_sizes(ex, sizes: tuple, shapes: dict) -> str:
    """Which argument of initial_policy(obs_dim, n_out, hidden) the shapes ignore, if one."""
    obs_dim, n_out, hidden = sizes
    got = ", ".join(f"{k} {shapes[k]}" for k in ex.KEYS)
    ignored = {
        "hidden": (obs_dim, n_out, 16),
        "obs_dim": (4, n_out, hidden),
        "n_out": (obs_dim, 2, hidden),
    }
    for name, other in ignored.items():
        if other != sizes and shapes == ex.policy_shapes(*other):
            return f"the shapes ({got}) ignore its {name} argument"
    return f"the shapes ({got}) are not those of policy_shapes(obs_dim, n_out, hidden)"


def part2(ex):
    mu = tiny_policy(ex)
    sigma = 0.1
    seed = 3
    before = copy(mu)
    pair = ex.mirrored_pair(mu, seed, sigma)
    if not same(mu, before):
        raise Wrong(
            "mirrored_pair changed the arrays of the policy it was given: a dict copy shares its "
            "arrays, so += on it edits them in place"
        )
    if not (isinstance(pair, tuple) and len(pair) == 2):
        raise Wrong("return a tuple (plus, minus) of two dicts")
    plus, minus = pair
    eps = ex.sample_noise(mu, seed)
    other = ex.sample_noise(mu, seed + 1)
    want = [{k: mu[k] + s * sigma * eps[k] for k in mu} for s in (1, -1)]
    named = [
        (
            (want[1], want[0]),
            "plus and minus are swapped: plus is mu + sigma eps, minus is mu - sigma eps",
        ),
        (({k: mu[k] + eps[k] for k in mu}, None), "eps is not scaled: use mu + sigma * eps"),
        (
            ({k: mu[k] + sigma * sigma * eps[k] for k in mu}, None),
            "eps is scaled by sigma twice: mu + sigma * eps",
        ),
        (
            (want[0], {k: mu[k] - sigma * other[k] for k in mu}),
            "minus uses other noise: it is mu - sigma * eps "
            "with the same eps as plus (one sample_noise(policy, seed) for both)",
        ),
        (
            (want[0], mu),
            "minus is the mean itself: minus is mu - sigma * eps, the mirror image of plus",
        ),
        (
            ({k: mu[k] + sigma * other[k] for k in mu}, None),
            "the noise is not sample_noise(policy, seed) with the seed you were given",
        ),
    ]
    for (p, m), message in named:
        if same(plus, p) and (m is None or same(minus, m)):
            raise Wrong(message)
    for name, member in (("plus", plus), ("minus", minus)):
        if shares_arrays(member, mu):
            raise Wrong(
                f"{name} holds the very arrays of the policy it was given: dict(policy) copies the "
                "dict, not its arrays, so a change to one changes the other"
            )
    if shares_arrays(plus, minus):
        raise Wrong("plus and minus hold the same arrays: a change to one changes the other")
    if not same(plus, want[0]):
        raise Wrong("plus should be mu + sigma * eps with eps = sample_noise(policy, seed)")
    if not same(minus, want[1]):
        raise Wrong("minus should be mu - sigma * eps, the mirror image of plus (the same eps)")


def part3(ex):
    mu = tiny_policy(ex)
    sigma = 0.1
    alpha = 0.05
    seeds = [11, 12, 13]
    Fp = np.array([0.5, -0.25, 0.1])
    Fm = np.array([-0.3, 0.25, 0.0])
    n = len(seeds)
    d = Fp - Fm
    before = copy(mu)
    new = ex.update_mean_policy(mu, list(seeds), Fp.copy(), Fm.copy(), sigma, alpha)
    if not same(mu, before):
        raise Wrong(
            "update_mean_policy changed the arrays of the policy it was given: start from copies "
            "(policy[k].copy(), or policy[k] + step) and return a new dict"
        )
    if not isinstance(new, dict) or set(new) != set(ex.KEYS):
        raise Wrong(f"return a dict with the keys {ex.KEYS}")
    right = alpha / (2 * n * sigma)
    if same(new, shifted(ex, mu, seeds, d, right)):
        return
    named = [
        (
            -right,
            d,
            seeds,
            "the step has the wrong sign: move towards the better member, "
            "+(F_plus[i] - F_minus[i]) * eps_i",
        ),
        (2 * right, d, seeds, "the sum is divided by n sigma: divide by 2 n sigma (2 n episodes)"),
        (right / 2, d, seeds, "the sum is divided by 4 n sigma: divide by 2 n sigma"),
        (right * sigma, d, seeds, "1/sigma is missing: alpha / (2 * n * sigma)"),
        (
            right * sigma**2,
            d,
            seeds,
            "sigma multiplies instead of dividing: alpha / (2 * n * sigma)",
        ),
        (
            alpha / 2 * n * sigma,
            d,
            seeds,
            "alpha / 2 * n * sigma is (alpha / 2) * n * sigma: write "
            "alpha / (2 * n * sigma), with the parentheses",
        ),
        (right * 2 * n, d, seeds, "the sum is not divided by 2 n: alpha / (2 * n * sigma)"),
        (right * n, d, seeds, "the sum is divided by 2 sigma only: alpha / (2 * n * sigma)"),
        (right, Fp, seeds, "only F_plus is used: each term is (F_plus[i] - F_minus[i]) * eps_i"),
        (
            right,
            Fp + Fm,
            seeds,
            "F_plus + F_minus is used: each term is (F_plus[i] - F_minus[i]) * eps_i",
        ),
        (
            right,
            d,
            list(range(n)),
            "eps_i comes from the index i: use eps_i = sample_noise(policy, seeds[i])",
        ),
        (
            right,
            d,
            [seeds[0]] * n,
            "every term uses the first pair's noise: eps_i = sample_noise(policy, seeds[i])",
        ),
        (
            right,
            d,
            seeds[1:] + seeds[:1],
            "each term uses another pair's noise: eps_i = sample_noise(policy, "
            "seeds[i]) with the F of the same i",
        ),
    ]
    for scale, w, s, message in named:
        if same(new, shifted(ex, mu, s, w, scale)):
            raise Wrong(message)
    for i in range(n):  # a loop that replaces the sum with each pair's term keeps the last
        if same(new, shifted(ex, mu, seeds[i : i + 1], d[i : i + 1], right)):
            raise Wrong(
                f"the new mean holds pair {i}'s term only: the loop replaces the sum with each "
                "pair's term instead of adding every term to it"
            )
    for drop in (0, n - 1):
        keep = [i for i in range(n) if i != drop]
        for m in (n, n - 1):
            if same(
                new, shifted(ex, mu, [seeds[i] for i in keep], d[keep], alpha / (2 * m * sigma))
            ):
                raise Wrong(f"pair {drop} is left out of the sum: sum over all n pairs")
    raise Wrong(
        "the new mean differs from "
        "mu + alpha / (2 n sigma) * sum_i (F_plus[i] - F_minus[i]) * eps_i"
    )


def part4(ex):
    mu = tiny_policy(ex)
    sigma = 0.5
    seed = 5
    env = "NesCheck-v0"
    out = ex.evaluate_pair(mu, seed, sigma, env)
    if not (isinstance(out, tuple) and len(out) == 3):
        raise Wrong("return a tuple (seed, return_plus, return_minus)")
    got_seed, rp, rm = out
    for value, name in ((rp, "return_plus"), (rm, "return_minus")):
        if isinstance(value, (dict, list, tuple, np.ndarray)):
            raise Wrong(
                f"{name} is a {type(value).__name__}: return the episode's return, a number, never "
                "the weights (only numbers travel back from a worker)"
            )
    if got_seed != seed:
        raise Wrong(
            f"the first element should be the seed you were given ({seed}), got {got_seed!r}: the "
            "master matches each result to its pair by this seed"
        )
    plus, minus = ex.mirrored_pair(mu, seed, sigma)

    def R(policy, env_seed=seed):
        return ex.rollout(policy, env, env_seed)

    want = (R(plus), R(minus))
    if np.allclose((rp, rm), want, rtol=1e-12, atol=0):
        return
    other = ex.mirrored_pair(mu, seed + 1, sigma)
    named = [
        ((want[1], want[0]), "return_plus and return_minus are swapped"),
        ((want[0], want[0]), "both episodes play plus: play minus for return_minus"),
        ((want[1], want[1]), "both episodes play minus: play plus for return_plus"),
        (
            (R(mu), R(mu)),
            "both episodes play the mean policy: play the pair, mirrored_pair(policy, seed, sigma)",
        ),
        (
            (R(plus, 0), R(minus, 0)),
            "the episodes start from env_seed 0: play both from env_seed = seed",
        ),
        (
            (R(plus, seed + 1), R(minus, seed + 1)),
            "the episodes start from the wrong env_seed: play both from env_seed = seed",
        ),
        (
            (R(plus), R(minus, seed + 1)),
            "the two episodes start from different env_seeds: both from seed",
        ),
        (
            (R(other[0]), R(other[1])),
            "the pair is built from another seed: mirrored_pair(policy, seed, sigma)",
        ),
    ]
    for values, message in named:
        if np.allclose((rp, rm), values, rtol=1e-12, atol=0):
            raise Wrong(message)
    raise Wrong(
        f"expected the returns {want} of rollout(plus, env_name, seed) "
        f"and rollout(minus, env_name, seed), got {(rp, rm)}"
    )


class Recorder:
    """An executor that runs each submitted call at once and records what happened, in order."""

    def __init__(self):
        self.events = []  # ("submit", fn, args) and ("result",)
        recorder = self

        class Recorded(Future):
            def result(self, timeout=None):
                recorder.events.append(("result",))
                return super().result(timeout)

        self.future = Recorded

    def submit(self, fn, *args, **kwargs):
        self.events.append(("submit", fn, args, kwargs))
        future = self.future()
        future.set_result(fn(*args, **kwargs))
        return future


def part5(ex):
    T = 3  # iterations
    n = 5  # pairs
    sigma = 0.1
    alpha = 0.2
    seed = 5
    env = "NesCheck-v0"
    # The run as it should go: mu_0 the checker's own (of the dtype of the student's), then the
    # parts 2-4 checked above.
    dtypes = {k: np.asarray(v).dtype for k, v in ex.initial_policy(4, 2, 3).items()}
    mu = {k: np.zeros(shape, dtypes[k]) for k, shape in ex.policy_shapes(4, 2, 3).items()}
    expected = []
    for t in range(T):
        seeds = ex.pair_seeds(seed, t, n)
        results = [ex.evaluate_pair(mu, s, sigma, env) for s in seeds]
        R = np.array([r[1] for r in results] + [r[2] for r in results])
        F = ex.centered_ranks(R)
        expected.append(dict(mu=mu, seeds=seeds, R=R, F=F))
        mu = ex.update_mean_policy(mu, seeds, F[:n], F[n:], sigma, alpha)
    scope = ex.train.__globals__  # where train looks up update_mean_policy: recorded there
    real = scope["update_mean_policy"]
    updates = []  # each call of update_mean_policy, recorded
    lines = []  # each log line
    recorder = Recorder()

    def update(policy, seeds, F_plus, F_minus, s, a):
        updates.append(
            dict(
                mu=copy(policy),
                seeds=list(seeds),
                F_plus=np.asarray(F_plus, float),
                F_minus=np.asarray(F_minus, float),
                sigma=s,
                alpha=a,
            )
        )
        return real(policy, seeds, F_plus, F_minus, s, a)

    scope["update_mean_policy"] = update
    try:
        final = ex.train(
            env,
            recorder,
            iterations=T,
            n_pairs=n,
            sigma=sigma,
            alpha=alpha,
            seed=seed,
            hidden=3,
            log=lambda *a, **kw: lines.append(kw.get("sep", " ").join(map(str, a))),
        )
    finally:
        scope["update_mean_policy"] = real
    submits = [e[:3] for e in recorder.events if e[0] == "submit"]
    if any(e[3] for e in recorder.events if e[0] == "submit"):
        raise Wrong(
            "pass evaluate_pair's arguments by position, "
            "executor.submit(evaluate_pair, mu, s, sigma, env_name): "
            "the Ray executor takes no keyword arguments"
        )
    if not submits:
        raise Wrong(
            "nothing was submitted: run each pair with "
            "executor.submit(evaluate_pair, mu, s, sigma, env_name)"
        )
    if any(fn not in (ex.evaluate_pair, scope.get("evaluate_pair")) for _, fn, _ in submits):
        raise Wrong(
            "submit evaluate_pair itself: executor.submit(evaluate_pair, mu, s, sigma, env_name)"
        )
    if len(submits) != T * n:
        raise Wrong(
            f"{len(submits)} calls of executor.submit for {T} iterations of {n} pairs: "
            f"one per pair, {T * n}"
        )
    done = 0
    # Every pair of an iteration is submitted before the first result is asked for.
    for e in recorder.events:
        if e[0] == "submit":
            done += 1
        elif done % n:
            raise Wrong(
                "a result is collected before every pair of the iteration is submitted: "
                "submit all n pairs first, then call result() on each future "
                "(otherwise the pairs do not run in parallel)"
            )
    if len(updates) != T:
        raise Wrong(
            f"update_mean_policy was called {len(updates)} times in {T} iterations: "
            "once per iteration"
        )
    for t, want in enumerate(expected):  # iteration by iteration: what it evaluates, its update
        check_submits(
            ex,
            t,
            n,
            want,
            [args for _, _, args in submits[t * n : (t + 1) * n]],
            submits,
            seed,
            sigma,
            env,
        )
        check_update(ex, t, n, want, updates[t], sigma, alpha)
    if len(lines) != T:
        raise Wrong(
            f"{len(lines)} log lines for {T} iterations: log one line per iteration"
            + (" with log(...), train's argument (not print)" if not lines else "")
        )
    numbers = [[float(x) for x in re.findall(r"-?\d+\.?\d*(?:e-?\d+)?", line)] for line in lines]
    fitness = all(0 in line for line in numbers[1:])  # the first line's iteration number is 0
    for t, (want, line) in enumerate(zip(expected, lines)):
        if not any(
            abs(x - want["R"].mean()) <= 0.51 + 1e-3 * abs(want["R"].mean()) for x in numbers[t]
        ):
            raise Wrong(
                f"log line {t} ({line!r}) does not show the mean of the 2 n returns "
                f"({want['R'].mean():.2f})"
                + (": it shows the fitness, whose mean is 0" if fitness else "")
            )
    if not same(final, mu):
        raise Wrong("train should return the mean policy after the last update")
    check_stop(ex, expected, mu, T, n, sigma, alpha, seed, env)


def check_stop(ex, expected, final, T, n, sigma, alpha, seed, env):
    """Step 6: with a target halfway between the mean returns of iterations 0 and 1, train stops
    after logging the first that reaches it, returning the mean that iteration's update made."""
    first = expected[0]["R"].mean()
    second = expected[1]["R"].mean()
    target = (first + second) / 2
    stop = 0 if first >= target else 1  # the iteration that reaches it
    after = [want["mu"] for want in expected[1:]] + [final]  # the mean after each iteration
    lines = []
    recorder = Recorder()
    kw = dict(iterations=T, n_pairs=n, sigma=sigma, alpha=alpha, seed=seed, hidden=3)
    got = ex.train(env, recorder, **kw, target=target, log=lambda *a, **_: lines.append(a))
    submitted = sum(e[0] == "submit" for e in recorder.events) // n  # iterations begun
    if submitted > stop + 1:
        raise Wrong(
            f"train goes on after iteration {stop}, whose mean return reached target: step 6 "
            "stops there"
        )
    if submitted < stop + 1:
        raise Wrong(
            f"train stops at iteration {submitted - 1}, before the mean return reached target"
        )
    if len(lines) != stop + 1:
        raise Wrong("train stops before it logs the iteration that reached target")
    if same(got, expected[stop]["mu"]):
        raise Wrong(
            "train returns the mean from before the update of the iteration that reached target"
        )
    if not same(got, after[stop]):
        raise Wrong("train should return the mean updated by the iteration that reached target")


def check_submits(ex, t, n, want, calls, submits, seed, sigma, env):
    """What iteration t submitted: evaluate_pair(mu_t, s, sigma, env_name) for its pairs' seeds."""
    got = [a[1] if len(a) > 1 else None for a in calls]
    if sorted(map(str, got)) != sorted(map(str, want["seeds"])):
        if got == ex.pair_seeds(0, t, n):
            raise Wrong("the pairs' seeds ignore --seed: pair_seeds(seed, iteration, n_pairs)")
        if t and got == [c[2][1] for c in submits[:n]]:
            raise Wrong(
                "every iteration uses the same seeds: pair_seeds(seed, iteration, n_pairs) with "
                "this iteration's number"
            )
        if got == ex.pair_seeds(seed, t + 1, n):
            raise Wrong(
                "iterations count from 0: the first iteration's seeds are "
                "pair_seeds(seed, 0, n_pairs)"
            )
        raise Wrong(
            "the submitted seeds are not pair_seeds(seed, iteration, n_pairs) (numpy's global "
            "random functions give other seeds on every run)"
        )
    if any(
        isinstance(a[0], dict) and np.shape(a[0].get("W1")) != np.shape(want["mu"]["W1"])
        for a in calls
    ):
        raise Wrong(
            "the policy has other shapes: "
            "make it with initial_policy(obs_dim, n_out, hidden), with train's hidden"
        )
    if any(not same(a[0], want["mu"]) for a in calls):
        raise Wrong(
            f"iteration {t} evaluates another policy than the current mean: "
            "submit evaluate_pair(mu, s, sigma, env_name) "
            "with the mu that update_mean_policy returned last"
        )
    if any(tuple(a[2:]) != (sigma, env) for a in calls):
        raise Wrong(
            "submit evaluate_pair(mu, s, sigma, env_name) "
            "with train's sigma and env_name, in this order"
        )


def check_update(ex, t, n, want, got, sigma, alpha):
    """Iteration t's call of update_mean_policy against the expected one; F_plus - F_minus per seed
    is what the update uses (a constant added to every rank changes nothing)."""
    if not same(got["mu"], want["mu"]):
        raise Wrong(f"iteration {t} updates another policy than the current mean")
    if (got["sigma"], got["alpha"]) != (sigma, alpha):
        raise Wrong(
            "call update_mean_policy(mu, seeds, F_plus, F_minus, sigma, alpha) "
            "with train's sigma and alpha"
        )
    if got["F_plus"].shape != (n,) or got["F_minus"].shape != (n,) or len(got["seeds"]) != n:
        raise Wrong(f"hand update_mean_policy n = {n} seeds, F_plus and F_minus (one per pair)")
    R, F = want["R"], want["F"]
    by_seed = dict(zip(want["seeds"], F[:n] - F[n:]))
    if sorted(map(str, got["seeds"])) != sorted(map(str, want["seeds"])):
        raise Wrong("hand update_mean_policy the seeds of this iteration's pairs")
    d = got["F_plus"] - got["F_minus"]
    if np.allclose(d, [by_seed[s] for s in got["seeds"]]):
        return
    if (
        np.allclose(got["F_plus"], R[:n])
        and np.allclose(got["F_minus"], R[n:])
        or np.allclose(got["F_plus"], [R[:n][want["seeds"].index(s)] for s in got["seeds"]])
    ):
        raise Wrong(
            "the raw returns are handed to the update: shape them first, "
            "F = centered_ranks of all 2 n returns together (Eq. 4)"
        )
    if np.allclose(d, ex.centered_ranks(R[:n]) - ex.centered_ranks(R[n:])):
        raise Wrong(
            "the plus and minus returns are ranked separately: step 3 ranks all 2 n together"
        )
    for split in ((F[n:], F[:n]), (F[::2], F[1::2]), (F[1::2], F[::2])):
        if np.allclose(d, split[0] - split[1]):
            raise Wrong(
                "the ranked vector is split wrongly: F_plus are the ranks of the plus returns, "
                "F_minus those of the minus returns"
            )
    if np.allclose(sorted(d), sorted(by_seed.values())):
        raise Wrong(
            "the results are matched to the wrong seeds: hand the update the seeds in the order of "
            "the results (evaluate_pair returns each pair's seed for this)"
        )
    expected = np.round([by_seed[s] for s in got["seeds"]], 3)
    raise Wrong(f"iteration {t}: F_plus - F_minus is {np.round(d, 3)}, expected {expected}")


PARTS = [
    ("Part 1", "initial_policy", part1),
    ("Part 2", "mirrored_pair", part2),
    ("Part 3", "update_mean_policy", part3),
    ("Part 4", "evaluate_pair", part4),
    ("Part 5", "train", part5),
]


def student_line(ex, error: BaseException) -> str:
    """Where in the student's file an exception came from: ' (nes_exercise.py, line 123: code)'."""
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if os.path.abspath(f.filename) == os.path.abspath(getattr(ex, "__file__", "") or "")
    ]
    return (
        f" ({os.path.basename(frames[-1].filename)}, line {frames[-1].lineno}: {frames[-1].line})"
        if frames
        else ""
    )


def run_part(ex, part) -> tuple:
    """(status, message) of one part: 'passed', 'not implemented yet' or 'wrong'."""
    _, function, check = part
    try:
        check(ex)
    except NotImplementedError:
        return "not implemented yet", f"{function} still raises NotImplementedError"
    except Wrong as e:
        return "wrong", str(e)
    except Exception as e:  # the student's code failed: show their line, not the checker's
        return "wrong", f"{function} raised {type(e).__name__}: {e}{student_line(ex, e)}"
    return "passed", ""


def check(ex, out=print) -> bool:
    """Checks the parts in order and says what to do next; True once all five pass."""
    name = os.path.basename(getattr(ex, "__file__", "nes_exercise.py") or "nes_exercise.py")
    for part in PARTS:
        status, message = run_part(ex, part)
        out(f"{part[0]} ({part[1]}): {status}" + (f": {message}" if message else ""))
        if status != "passed":
            out(
                f"Next: open {name}, find '{part[0]}', complete {part[1]} (read its docstring), "
                "then run --check again."
                if status == "not implemented yet"
                else f"Next: fix {part[1]} in {name}, then run --check again."
            )
            return False
    script = name
    if sys.argv[0].endswith(".py"):  # the student's file, or the teacher's copy
        script = os.path.relpath(sys.argv[0])
    out(f"All five parts pass. Train with: python {script}")
    return True
