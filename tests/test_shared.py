"""The contracts the three training scripts share (run directory, errors, workers), tested on
each: ars.py, es_basic.py and es_openai.py."""

import contextlib
import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from conftest import POSIX_ONLY, ROOT, booby_trapped, left_in_session, with_start_method, workers_in

import ars
import es_basic
import es_openai

SCRIPTS = ("ars.py", "es_basic.py", "es_openai.py")
LONG = (
    "ars.py",
    "es_openai.py",
)  # the scripts of long runs: resume, checkpoints, plot during the run
MODULES = {"ars.py": ars, "es_basic.py": es_basic, "es_openai.py": es_openai}
TINY = {  # one short iteration on a cheap environment
    "ars.py": ["--env", "Pendulum-v1", "--n-directions", "2", "--top-b", "1"],
    "es_basic.py": ["--env", "CartPole-v1", "--population", "4", "--hidden", "4"],
    "es_openai.py": [
        "--env",
        "Pendulum-v1",
        "--population",
        "4",
        "--hidden",
        "4",
        "--noise-size",
        "100000",
    ],
}


def run(script, *argv, cwd=ROOT, timeout=120):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, script), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


class Out(NamedTuple):
    returncode: int
    stderr: str


def call(capsys, script, *argv) -> Out:
    """The script's main(argv) in this process (much faster than a new interpreter): exit status,
    stderr."""
    capsys.readouterr()
    try:
        MODULES[script].main(list(argv))
        status = 0
    except SystemExit as e:
        status = e.code
    return Out(status, capsys.readouterr().err)


def one_error_line(out, status=2):
    """The script refused its input as every script does: one line on stderr, this exit status."""
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == status and len(lines) == 1 and "error:" in lines[0], out.stderr
    return lines[0]


def digest(folder) -> dict:
    """Every file under folder with a hash of its bytes: equal digests, nothing written."""
    return {
        os.path.relpath(p, folder): hashlib.sha256(open(p, "rb").read()).hexdigest()
        for p in glob.glob(os.path.join(folder, "**"), recursive=True)
        if os.path.isfile(p)
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A finished one-iteration run directory of each script."""
    out = {}
    for script in SCRIPTS:
        folder = tmp_path_factory.mktemp(script.replace(".py", ""))
        done = run(
            script,
            *TINY[script],
            "--iterations",
            "1",
            "--eval-every",
            "1",
            "--eval-episodes",
            "1",
            "--workers",
            "1",
            "--out-dir",
            str(folder),
        )
        assert done.returncode == 0, done.stderr
        (out[script],) = glob.glob(str(folder / "*__*"))
    return out


def copy_of(runs, script, tmp_path) -> str:
    dst = str(tmp_path / os.path.basename(runs[script]))
    shutil.copytree(runs[script], dst)
    return dst


# ---------------------------------------------------------------- copies


def test_the_helpers_copied_between_scripts_are_identical():
    """Each script reads alone, so the few helpers they share are copies, kept equal here."""
    import inspect

    import nes_runner

    every = (es_basic, ars, es_openai)
    copies = dict.fromkeys(["stream", "Parser", "check", "at_least"], every)
    for name in ("HelpFormatter", "on_stop", "exit_after", "write_file", "gif"):
        copies[name] = every
    copies.update(centered_ranks=(es_basic, es_openai))
    for name in ("parse", "lock", "init_worker", "make_env", "reset_env", "read_config"):
        copies[name] = (ars, es_openai)
    for name in (
        "mujoco_warning",
        "quiet_mujoco",
        "start_ray",
        "RayExecutor",
        "plot",
        "worker_died",
    ):
        copies[name] = (ars, es_openai)
    for name in ("on_stop", "exit_after"):  # and the exercise's runner
        copies[name] += (nes_runner,)
    for name, modules in copies.items():
        sources = {inspect.getsource(getattr(module, name)) for module in modules}
        assert len(sources) == 1, name
    assert inspect.getsource(es_basic.init_worker) == inspect.getsource(nes_runner.init_worker)
    assert ars.COLUMNS[:11] == es_openai.COLUMNS[:11] == es_basic.COLUMNS[:11]
    assert ars.STOP is not es_basic.STOP  # each script's own flag


# ---------------------------------------------------------------- a run directory of another script


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_run_directory_of_another_script_is_refused_and_left_untouched(
    runs, script, tmp_path, capsys
):
    for other in SCRIPTS:
        if other == script:
            continue
        run_dir = copy_of(runs, other, tmp_path / other)
        before = digest(run_dir)
        for flag in ("--resume", "--play") if script != "es_basic.py" else ("--play",):
            line = one_error_line(call(capsys, script, flag, run_dir, "--iterations", "2"))
            if script == "es_basic.py":  # it reads policy.npz alone, which no other script writes
                assert "cannot read the policy" in line and "policy.npz" in line
            else:
                assert (
                    f"of {other}" in line and f"python {other}" in line and "run directory" in line
                )
        assert digest(run_dir) == before


@pytest.mark.parametrize("script", LONG)
def test_each_script_resumes_its_own_run(runs, script, tmp_path):
    """The check above refuses only other scripts' folders: the script's own run goes on."""
    run_dir = copy_of(runs, script, tmp_path)
    cfg = json.loads(Path(run_dir, "config.json").read_text())
    assert cfg["script"] == script
    out = run(script, "--resume", run_dir, "--iterations", "2")
    assert out.returncode == 0, out.stderr
    assert len(Path(run_dir, "progress.csv").read_text().splitlines()) == 3  # header and 2 rows


# ---------------------------------------------------------------- flags with impossible values


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_empty_run_dir_is_refused_and_starts_no_run(script, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    flags = ("--resume", "--play") + (("--evaluate-snapshots",) if script == "es_openai.py" else ())
    for flag in flags if script != "es_basic.py" else ("--play",):
        line = one_error_line(call(capsys, script, flag, ""))
        assert "'' is not a run directory" in line or "cannot read the policy 'policy.npz'" in line
    assert os.listdir(tmp_path) == []  # no runs/ folder: no training started


# ---------------------------------------------------------------- resumed runs and files


@pytest.mark.parametrize("script", LONG)
def test_a_flag_that_would_change_a_resumed_run_is_refused(runs, script, tmp_path, capsys):
    run_dir = copy_of(runs, script, tmp_path)
    before = digest(run_dir)
    own = {"ars.py": ["--n-directions", "4"], "es_openai.py": ["--population", "8"]}
    for argv in (["--seed", "3"], own[script], ["--out-dir", str(tmp_path)]):
        line = one_error_line(call(capsys, script, "--resume", run_dir, "--iterations", "2", *argv))
        assert f"{argv[0]} cannot change a resumed run" in line and "--iterations" in line, line
    assert digest(run_dir) == before


# ---------------------------------------------------------------- damaged checkpoints

CHECKPOINT = {
    "ars.py": "checkpoints/latest.npz",
    "es_basic.py": "policy.npz",
    "es_openai.py": "checkpoints/latest.npz",
}
WEIGHTS = {"ars.py": "M", "es_basic.py": "theta", "es_openai.py": "theta"}
VARIANCE = {"ars.py": "obs_m2", "es_openai.py": "ob_sumsq"}  # es_basic.py saves no statistics
DAMAGES = (
    "missing",
    "empty",
    "not a zip",
    "cut short",
    "a bad CRC",
    "pickled",
    "no env",
    "another script's",
    "another environment's",
    "a shape that does not fit",
    "a negative counter",
    "a fractional counter",
    "weights not finite",
    "a negative variance",
)


def flip_last_byte_of(path: str, member: str):
    """Flips the last byte of the member's data inside the zip file: its CRC no longer matches."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        info = z.getinfo(member)
    data = bytearray(Path(path).read_bytes())
    header = data[info.header_offset : info.header_offset + 30]
    name_length = int.from_bytes(header[26:28], "little")
    extra_length = int.from_bytes(header[28:30], "little")
    start = info.header_offset + 30 + name_length + extra_length
    data[start + info.compress_size - 1] ^= 0xFF
    Path(path).write_bytes(bytes(data))


def damage(path: str, how: str, script: str, runs, marker: str):
    """Writes the checkpoint at path again, damaged as `how` says."""
    data = Path(path).read_bytes()
    with np.load(path, allow_pickle=False) as f:
        saved = {name: f[name] for name in f.files}
    weights = WEIGHTS[script]
    if how == "missing":
        os.remove(path)
        return
    if how in ("empty", "not a zip", "cut short"):
        text = {"empty": b"", "not a zip": b"not a checkpoint", "cut short": data[: len(data) // 2]}
        Path(path).write_bytes(text[how])
        return
    if how == "a bad CRC":
        flip_last_byte_of(path, weights + ".npy")
        return
    if how == "another script's":
        other = "es_openai.py" if script == "ars.py" else "ars.py"
        shutil.copyfile(os.path.join(runs[other], CHECKPOINT[other]), path)
        return
    if how == "pickled":
        saved[weights] = booby_trapped(marker)
    elif how == "no env":
        del saved["env"]
    elif how == "another environment's":  # an env whose spaces differ from the run's
        saved["env"] = np.array(
            "Acrobot-v1" if script == "es_basic.py" else "MountainCarContinuous-v0"
        )
    elif how == "a shape that does not fit":
        saved[weights] = np.concatenate([saved[weights], saved[weights][..., :1]], axis=-1)
    elif how == "a negative counter":
        saved["iteration"] = np.array(-1)
    elif how == "a fractional counter":
        saved["iteration"] = np.array(1.5)
    elif how == "weights not finite":
        saved[weights] = saved[weights] * np.nan
    elif how == "a negative variance":
        saved[VARIANCE[script]] = -saved[VARIANCE[script]] - 1.0
    np.savez(path, **saved)


def state_of(folder) -> dict:
    """Every file under folder with its bytes' hash and its modification time."""
    return {
        name: (sha, os.path.getmtime(os.path.join(folder, name)))
        for name, sha in digest(folder).items()
    }


HAND_EDITED = ("a negative counter", "a fractional counter", "weights not finite")


def damages(script):  # no script checks an array that only a hand could have changed
    hand = HAND_EDITED + ("a negative variance",)
    return [
        h for h in DAMAGES if h not in hand and (script in VARIANCE or h != "a negative variance")
    ]


@pytest.mark.parametrize("script, how", [(s, h) for s in SCRIPTS for h in damages(s)])
def test_a_damaged_checkpoint_is_one_line_and_changes_nothing(runs, script, how, tmp_path, capsys):
    """Whatever is wrong with a checkpoint, every path that loads it (--play of the run directory
    or of the file, --resume) refuses it in one line naming the file, and nothing is written."""
    run_dir = copy_of(runs, script, tmp_path)
    path = os.path.join(run_dir, CHECKPOINT[script])
    marker = str(tmp_path / "unpickled")
    damage(path, how, script, runs, marker)
    before = state_of(run_dir)
    modes = [["--play", run_dir]]
    if script in LONG:
        modes += [["--play", path], ["--resume", run_dir, "--iterations", "2"]]
    for argv in modes:
        line = one_error_line(call(capsys, script, *argv))
        assert CHECKPOINT[script] in line and "Traceback" not in line, (argv, line)
    assert state_of(run_dir) == before and not os.path.exists(marker)


@pytest.mark.parametrize("script", LONG)
def test_a_checkpoint_that_cannot_be_written_during_a_run_is_one_line(
    runs, script, tmp_path, capsys
):
    """The disk fills or the folder turns read-only mid-run: one line, and the last checkpoint,
    written whole and then renamed, is still there to resume from."""
    run_dir = copy_of(runs, script, tmp_path)
    os.mkdir(os.path.join(run_dir, "checkpoints", "latest.npz.tmp"))  # latest.npz cannot be
    line = one_error_line(call(capsys, script, "--resume", run_dir, "--iterations", "2"))
    assert "cannot write" in line
    with np.load(os.path.join(run_dir, "checkpoints", "latest.npz"), allow_pickle=False) as f:
        assert int(f["iteration"]) == 1


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_video_that_cannot_be_written_is_refused_before_any_episode(runs, script, tmp_path):
    run_dir = copy_of(runs, script, tmp_path)
    env_id = json.loads(Path(run_dir, "config.json").read_text())["env"]
    os.makedirs(os.path.join(run_dir, "video", f"{env_id}.gif"))  # a folder where the GIF should go
    out = run(script, "--play", run_dir, "--episodes", "1", "--video")
    assert "cannot write" in one_error_line(out) and "mean return" not in out.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_video_is_written_without_a_word_on_stderr(runs, script, tmp_path):
    """pygame draws the frames of Box2D and classic-control tasks; with no display its SDL would
    look for one and print an error line (XDG_RUNTIME_DIR) although the frames need no window."""
    run_dir = copy_of(runs, script, tmp_path)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SDL_VIDEODRIVER", "XDG_RUNTIME_DIR", "DISPLAY")
    }
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, script),
            "--play",
            run_dir,
            "--episodes",
            "1",
            "--video",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert glob.glob(os.path.join(run_dir, "video", "*.gif"))


@pytest.mark.parametrize("script", LONG)
def test_episode_length_caps_every_episode_and_an_endless_environment_needs_it(
    script, tmp_path, capsys
):
    """Episodes last the environment's time limit unless --episode-length is given (ars.py,
    es_openai.py); an environment without a time limit is refused without it (an episode could
    last forever)."""
    import gymnasium as gym

    if "EndlessPendulum-v0" not in gym.registry:  # Pendulum without its TimeLimit
        gym.register(
            "EndlessPendulum-v0", entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv"
        )
    argv = [a if a != "CartPole-v1" else "Pendulum-v1" for a in TINY[script]] + [
        "--iterations",
        "1",
        "--eval-episodes",
        "1",
        "--workers",
        "1",
        "--out-dir",
        str(tmp_path),
    ]
    line = one_error_line(
        call(capsys, script, *[a if a != "Pendulum-v1" else "EndlessPendulum-v0" for a in argv])
    )
    assert "has no time limit" in line and not os.listdir(tmp_path)
    assert "give --episode-length" in line
    assert (
        call(capsys, script, *argv, "--episode-length", "30").returncode == 0
    )  # Pendulum's own limit: 200
    (run_dir,) = glob.glob(str(tmp_path / "Pendulum-v1__*"))
    header, row = Path(run_dir, "progress.csv").read_text().splitlines()
    assert header.startswith("iteration,episodes,env_steps,")
    episodes, env_steps = (int(v) for v in row.split(",")[1:3])
    assert episodes >= 4 and env_steps == 30 * episodes


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_reached_target_is_reported_with_its_episodes_and_env_steps(script, tmp_path, capsys):
    argv = TINY[script] + [
        "--iterations",
        "5",
        "--eval-every",
        "1",
        "--eval-episodes",
        "1",
        "--workers",
        "1",
        "--target-return=-1e9",
        "--out-dir",
        str(tmp_path),
    ]
    result = MODULES[script].main(argv)
    out = capsys.readouterr()
    assert result["status"] == "target" and result["iteration"] == 1
    if script == "es_basic.py":  # the closing line of every run: how it ended
        assert (
            f"target after iteration 1: {result['episodes']} episodes, "
            f"{result['env_steps']} env steps" in out.out
        )
        return
    assert (
        "target -1000000000.0 reached at "
        f"{'generation' if script == 'es_openai.py' else 'iteration'} 1: "
        f"{result['episodes']} episodes, {result['env_steps']} env steps"
    ) in out.out


# ---------------------------------------------------------------- workers end with their master


@contextlib.contextmanager
def training(script, tmp_path, **popen):
    """A long two-worker run of the script in a session of its own, yielded once its first iteration
    is logged; whatever is left of the session is killed afterwards, if the test failed."""
    proc = subprocess.Popen(
        [
            sys.executable,
            os.path.join(ROOT, script),
            *TINY[script],
            "--iterations",
            "100000",
            "--workers",
            "2",
            "--out-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **popen,
    )
    try:
        for line in proc.stdout:
            if line.startswith(("it ", "gen ")):
                break
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@POSIX_ONLY
@pytest.mark.parametrize("script", SCRIPTS)
def test_workers_end_when_their_master_is_killed(script, tmp_path):
    """kill -9 gives the master no chance to stop its workers: they must notice and end (and with
    them the forkserver and the resource tracker, where the start method has them). es_openai.py's
    noise table goes too: the resource tracker unlinks it (Linux: /dev/shm/psm_*)."""
    before = set(glob.glob("/dev/shm/psm_*"))
    with training(script, tmp_path, stderr=subprocess.DEVNULL) as proc:
        assert len(workers_in(proc.pid)) >= 2
        mine = set(glob.glob("/dev/shm/psm_*")) - before  # the run's table (others' come and go)
        assert mine or script != "es_openai.py" or not os.path.isdir("/dev/shm")
        proc.kill()
        proc.wait()
        deadline = time.time() + 15
        while time.time() < deadline and left_in_session(proc.pid):
            time.sleep(0.2)
        assert left_in_session(proc.pid) == ""
        while time.time() < deadline and mine & set(glob.glob("/dev/shm/psm_*")):
            time.sleep(0.2)
        assert not mine & set(glob.glob("/dev/shm/psm_*"))


@POSIX_ONLY
@pytest.mark.parametrize("script", SCRIPTS)
def test_kill_int_stops_a_run_started_in_the_background(script, tmp_path):
    """A job started in the background (`cmd &` in a script) begins with SIGINT ignored: the script
    installs its own handler, so kill -INT still stops it, with a checkpoint to resume from."""
    with training(
        script,
        tmp_path,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    ) as proc:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        said = "interrupted after iteration" if script == "es_basic.py" else "--resume"
        assert proc.returncode == 130 and said in err and "Traceback" not in err, (
            proc.returncode,
            err,
        )
        (run_dir,) = glob.glob(str(tmp_path / "*__*"))
        kept = (
            "policy.npz" if script == "es_basic.py" else os.path.join("checkpoints", "latest.npz")
        )
        assert os.path.isfile(os.path.join(run_dir, kept))


# ---------------------------------------------------------------- stderr keeps to what matters


@pytest.mark.parametrize("script", LONG)
def test_mujocos_warning_about_gymnasiums_model_files_is_silenced(
    script, tmp_path, capfd, monkeypatch
):
    mujoco = pytest.importorskip("mujoco")
    monkeypatch.chdir(tmp_path)
    previous = mujoco.get_mju_user_warning()
    try:
        with pytest.raises(SystemExit):  # main filters the warnings before it makes an environment
            MODULES[script].main(["--env", "NoSuchEnvironment-v0"])
        capfd.readouterr()
        mujoco.MjModel.from_xml_string(
            '<mujoco><compiler settotalmass="2"/><worldbody><body>'
            '<freejoint/><geom size="1"/></body></worldbody></mujoco>'
        )
        assert (
            capfd.readouterr().err == "" and os.listdir(tmp_path) == []
        )  # no MUJOCO_LOG.TXT either
        mujoco.get_mju_user_warning()(
            "Nan, Inf or huge value in QACC at DOF 0 "
        )  # any other warning
        assert capfd.readouterr().err == "MuJoCo warning: Nan, Inf or huge value in QACC at DOF 0\n"
    finally:
        mujoco.set_mju_user_warning(previous)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_retired_environment_version_is_one_line(script, tmp_path, capsys):
    """HalfCheetah-v2, as in old tutorials: gymnasium raises an ImportError, not its own error."""
    line = one_error_line(
        call(capsys, script, "--env", "HalfCheetah-v2", "--out-dir", str(tmp_path))
    )
    # gymnasium 1.1 names the missing mujoco_py, 1.2 and later gymnasium-robotics
    assert ("gymnasium-robotics" in line or "mujoco_py" in line) and os.listdir(tmp_path) == []


# ---------------------------------------------------------------- a simulated Windows


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("script", SCRIPTS)
def test_two_iterations_on_a_simulated_windows(script, workers, tmp_path):
    """No fork, no signal.pthread_sigmask, workers started by spawn (tests/site/)."""
    argv = [*TINY[script], "--iterations", "2", "--workers", workers, "--out-dir", str(tmp_path)]
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, script), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=with_start_method("spawn", SIMULATED_WINDOWS="1"),
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    (run_dir,) = glob.glob(str(tmp_path / "*__*"))
    assert len(Path(run_dir, "progress.csv").read_text().splitlines()) == 3  # header, 2 rows
