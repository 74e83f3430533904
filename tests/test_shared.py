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
LONG = ("ars.py", "es_openai.py")  # the scripts that checkpoint and resume
MODULES = {"ars.py": ars, "es_basic.py": es_basic, "es_openai.py": es_openai}
TINY = {  # short iterations on a cheap environment
    "ars.py": "--env Pendulum-v1 --n-directions 2 --top-b 1".split(),
    "es_basic.py": "--env CartPole-v1 --population 4 --hidden 4".split(),
    "es_openai.py": "--env Pendulum-v1 --population 4 --hidden 4 --noise-size 100000".split(),
}
ONE = ["--eval-episodes", "1", "--workers", "1"]


def run(script, *argv, env=None):
    command = [sys.executable, os.path.join(ROOT, script), *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


class Out(NamedTuple):
    returncode: int
    stderr: str
    stdout: str = ""


def call(capsys, script, *argv) -> Out:
    """The script's main(argv) in this process (much faster than a new interpreter)."""
    capsys.readouterr()
    try:
        MODULES[script].main(list(argv))
        status = 0
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return Out(status, err, out)


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
    """A finished one-iteration run directory of each script (ars.py's and es_openai.py's
    episodes of 20 steps: short GIFs)."""
    out = {}
    for script in SCRIPTS:
        folder = tmp_path_factory.mktemp(script.replace(".py", ""))
        argv = [*TINY[script], "--iterations", "1", "--eval-every", "1", *ONE]
        argv += ["--episode-length", "20"] if script in LONG else []
        MODULES[script].main([*argv, "--out-dir", str(folder)])
        (out[script],) = glob.glob(str(folder / "*__*"))
    return out


def copy_of(runs, script, tmp_path) -> str:
    dst = str(tmp_path / os.path.basename(runs[script]))
    shutil.copytree(runs[script], dst)
    return dst


def test_the_helpers_copied_between_scripts_are_identical():
    """Each script reads alone, so the few helpers they share are copies, kept equal here."""
    import inspect

    import nes_runner

    every = (es_basic, ars, es_openai)
    names = "stream Parser check at_least HelpFormatter write_file gif".split()
    copies = dict.fromkeys(names, every)
    copies.update(dict.fromkeys(["on_stop", "exit_after"], (*every, nes_runner)))  # and the runner
    copies["centered_ranks"] = (es_basic, es_openai)
    names = "parse lock init_worker make_env reset_env read_config mujoco_warning quiet_mujoco"
    names += " start_ray RayExecutor plot worker_died"
    copies.update(dict.fromkeys(names.split(), (ars, es_openai)))
    for name, modules in copies.items():
        assert len({inspect.getsource(getattr(module, name)) for module in modules}) == 1, name
    assert inspect.getsource(es_basic.init_worker) == inspect.getsource(nes_runner.init_worker)
    assert ars.COLUMNS[:11] == es_openai.COLUMNS[:11] == es_basic.COLUMNS[:11]
    assert ars.STOP is not es_basic.STOP  # each script's own flag


# ---------------------------------------------------------------- what a script refuses


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_folder_not_a_run_directory_of_the_script_is_refused_untouched(
    runs, script, tmp_path, capsys, monkeypatch
):
    """Another script's run directory, or '' (a variable left empty): one line, nothing written."""
    monkeypatch.chdir(tmp_path)
    flags = ("--play",) if script == "es_basic.py" else ("--resume", "--play")
    for flag in flags:
        line = one_error_line(call(capsys, script, flag, ""))
        assert "'' is not a run directory" in line or "cannot read the policy 'policy.npz'" in line
    others = [other for other in SCRIPTS if other != script]
    for other in others:
        run_dir = copy_of(runs, other, tmp_path / other)
        before = digest(run_dir)
        for flag in flags:
            line = one_error_line(call(capsys, script, flag, run_dir, "--iterations", "2"))
            if script == "es_basic.py":  # it reads policy.npz alone, which no other script writes
                assert "cannot read the policy" in line and "policy.npz" in line
            else:
                assert f"of {other}" in line and f"python {other}" in line, line
        assert digest(run_dir) == before
    assert sorted(os.listdir(tmp_path)) == others  # no runs/ folder: no training started


CHECKPOINT = {
    "ars.py": "checkpoints/latest.npz",
    "es_basic.py": "policy.npz",
    "es_openai.py": "checkpoints/latest.npz",
}
WEIGHTS = {"ars.py": "M", "es_basic.py": "theta", "es_openai.py": "theta"}


def damage(path: str, how: str, script: str, marker: str):
    """Writes the checkpoint at path again, damaged as `how` says."""
    if how == "cut short":
        data = Path(path).read_bytes()
        Path(path).write_bytes(data[: len(data) // 2])
        return
    with np.load(path, allow_pickle=False) as f:
        saved = {name: f[name] for name in f.files}
    weights = WEIGHTS[script]
    if how == "pickled":  # unpickling it would create the file marker
        saved[weights] = booby_trapped(marker)
    elif how == "another environment's":  # one whose spaces differ from the run's
        other = "Acrobot-v1" if script == "es_basic.py" else "MountainCarContinuous-v0"
        saved["env"] = np.array(other)
    elif how == "a shape that does not fit":
        saved[weights] = np.concatenate([saved[weights], saved[weights][..., :1]], axis=-1)
    np.savez(path, **saved)


@pytest.mark.parametrize(
    "how", ["cut short", "pickled", "another environment's", "a shape that does not fit"]
)
@pytest.mark.parametrize("script", SCRIPTS)
def test_a_damaged_checkpoint_is_one_line_and_changes_nothing(runs, script, how, tmp_path, capsys):
    """Every path that loads a checkpoint (--play of the run directory or of the file, --resume)
    refuses it in one line naming the file: nothing is written, nothing unpickled."""
    run_dir = copy_of(runs, script, tmp_path)
    path = os.path.join(run_dir, CHECKPOINT[script])
    marker = str(tmp_path / "unpickled")
    damage(path, how, script, marker)
    before = digest(run_dir)
    modes = [["--play", run_dir]]
    if script in LONG:
        modes += [["--play", path], ["--resume", run_dir, "--iterations", "2"]]
    for argv in modes:
        line = one_error_line(call(capsys, script, *argv))
        assert CHECKPOINT[script] in line, (argv, line)
    assert digest(run_dir) == before and not os.path.exists(marker)


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
def test_a_retired_environment_version_is_one_line(script, tmp_path, capsys):
    """HalfCheetah-v2, as in old tutorials: gymnasium raises an ImportError, not its own error."""
    out = call(capsys, script, "--env", "HalfCheetah-v2", "--out-dir", str(tmp_path))
    line = one_error_line(out)  # gymnasium 1.1 names the missing mujoco_py, 1.2 gymnasium-robotics
    assert ("gymnasium-robotics" in line or "mujoco_py" in line) and os.listdir(tmp_path) == []


@pytest.mark.parametrize("script", LONG)
def test_episode_length_caps_every_episode_and_an_endless_environment_needs_it(
    script, tmp_path, capsys
):
    """An environment without a time limit is refused unless --episode-length caps its episodes
    (one could last forever)."""
    import gymnasium as gym

    if "EndlessPendulum-v0" not in gym.registry:  # Pendulum without its TimeLimit
        entry = "gymnasium.envs.classic_control.pendulum:PendulumEnv"
        gym.register("EndlessPendulum-v0", entry_point=entry)
    argv = [*TINY[script], "--iterations", "1", *ONE, "--out-dir", str(tmp_path)]
    endless = [a if a != "Pendulum-v1" else "EndlessPendulum-v0" for a in argv]
    line = one_error_line(call(capsys, script, *endless))
    assert "give --episode-length" in line and not os.listdir(tmp_path)
    assert call(capsys, script, *argv, "--episode-length", "30").returncode == 0  # not 200
    (run_dir,) = glob.glob(str(tmp_path / "Pendulum-v1__*"))
    row = Path(run_dir, "progress.csv").read_text().splitlines()[1]
    episodes, env_steps = (int(v) for v in row.split(",")[1:3])
    assert episodes >= 4 and env_steps == 30 * episodes


# ---------------------------------------------------------------- what a user meets


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_video_is_written_without_a_word_on_stderr_or_refused_before_any_episode(
    runs, script, tmp_path, capsys
):
    """pygame draws the frames of Box2D and classic-control tasks; with no display its SDL would
    look for one and print an error line (XDG_RUNTIME_DIR) although the frames need no window."""
    run_dir = copy_of(runs, script, tmp_path)
    env_id = json.loads(Path(run_dir, "config.json").read_text())["env"]
    hidden = ("SDL_VIDEODRIVER", "XDG_RUNTIME_DIR", "DISPLAY")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    gif = os.path.join(run_dir, "video", f"{env_id}.gif")
    os.makedirs(gif)  # a folder where the GIF should go
    out = call(capsys, script, "--play", run_dir, "--episodes", "1", "--video")
    assert "cannot write" in one_error_line(out) and "mean return" not in out.stdout
    os.rmdir(gif)
    out = run(script, "--play", run_dir, "--episodes", "1", "--video", env=env)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert Path(gif).read_bytes()[:6] == b"GIF89a"


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_reached_target_ends_the_run_with_its_episodes_and_env_steps(script, tmp_path, capsys):
    argv = [*TINY[script], "--iterations", "5", "--eval-every", "1", *ONE]
    result = MODULES[script].main([*argv, "--target-return=-1e9", "--out-dir", str(tmp_path)])
    assert result["status"] == "target" and result["iteration"] == 1
    said = f"{result['episodes']} episodes, {result['env_steps']} env steps"
    assert said in capsys.readouterr().out


@pytest.mark.parametrize("script", SCRIPTS)
def test_two_iterations_on_a_simulated_windows(script, tmp_path):
    """No fork, no signal.pthread_sigmask, workers started by spawn (tests/site/)."""
    argv = [*TINY[script], "--iterations", "2", "--workers", "2", "--out-dir", str(tmp_path)]
    out = run(script, *argv, env=with_start_method("spawn", SIMULATED_WINDOWS="1"))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    (run_dir,) = glob.glob(str(tmp_path / "*__*"))
    assert len(Path(run_dir, "progress.csv").read_text().splitlines()) == 3  # header, 2 rows


@POSIX_ONLY
@pytest.mark.parametrize("script", SCRIPTS)
def test_workers_end_when_their_master_is_killed(script, tmp_path):
    """kill -9 gives the master no chance to stop its workers: they notice and end. es_openai.py's
    noise table goes too: the resource tracker unlinks it (Linux: /dev/shm/psm_*)."""
    before = set(glob.glob("/dev/shm/psm_*"))
    argv = [*TINY[script], "--iterations", "100000", "--workers", "2", "--out-dir", str(tmp_path)]
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, script), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        for line in proc.stdout:  # its first iteration logged
            if line.startswith(("it ", "gen ")):
                break
        assert len(workers_in(proc.pid)) >= 2
        mine = set(glob.glob("/dev/shm/psm_*")) - before  # the run's table (others' come and go)
        assert mine or script != "es_openai.py" or not os.path.isdir("/dev/shm")
        proc.kill()
        proc.wait()
        deadline = time.time() + 15
        while time.time() < deadline and (
            left_in_session(proc.pid) or mine & set(glob.glob("/dev/shm/psm_*"))
        ):
            time.sleep(0.2)
        assert left_in_session(proc.pid) == "" and not mine & set(glob.glob("/dev/shm/psm_*"))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
