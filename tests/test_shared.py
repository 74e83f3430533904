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
from typing import NamedTuple

import numpy as np
import pytest

from conftest import ROOT

import ars
import es_basic
import es_openai

SCRIPTS = ("ars.py", "es_basic.py", "es_openai.py")
LONG = ("ars.py", "es_openai.py")  # the scripts of long runs: resume, checkpoints, plot during the run
OPENAI = ("es_openai.py",)  # its own guards: sizes, hand-edited files, plot throttling, MuJoCo warnings
MODULES = {"ars.py": ars, "es_basic.py": es_basic, "es_openai.py": es_openai}
TINY = {  # one short iteration on a cheap environment
    "ars.py": ["--env", "Pendulum-v1", "--n-directions", "2", "--top-b", "1"],
    "es_basic.py": ["--env", "CartPole-v1", "--population", "4", "--hidden", "4"],
    "es_openai.py": ["--env", "Pendulum-v1", "--population", "4", "--hidden", "4", "--noise-size", "100000"],
}


def run(script, *argv, cwd=ROOT, timeout=120):
    return subprocess.run([sys.executable, os.path.join(ROOT, script), *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


class Out(NamedTuple):
    returncode: int
    stderr: str


def call(capsys, script, *argv) -> Out:
    """The script's main(argv) in this process (much faster than a new interpreter): exit status, stderr."""
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
    return {os.path.relpath(p, folder): hashlib.sha256(open(p, "rb").read()).hexdigest()
            for p in glob.glob(os.path.join(folder, "**"), recursive=True) if os.path.isfile(p)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A finished one-iteration run directory of each script."""
    out = {}
    for script in SCRIPTS:
        folder = tmp_path_factory.mktemp(script.replace(".py", ""))
        done = run(script, *TINY[script], "--iterations", "1", "--eval-every", "1", "--eval-episodes", "1",
                   "--workers", "1", "--out-dir", str(folder))
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
    for name, copies in (("stream", (es_basic, ars, es_openai)), ("centered_ranks", (es_basic, es_openai)),
                         ("check", (es_basic, ars)), ("at_least", (es_basic, ars))):
        assert len({inspect.getsource(getattr(m, name)) for m in copies}) == 1, name
    assert ars.COLUMNS[:11] == es_openai.SHARED_COLUMNS == es_basic.COLUMNS.split()[:11]


# ---------------------------------------------------------------- a run directory of another script

@pytest.mark.parametrize("script", SCRIPTS)
def test_a_run_directory_of_another_script_is_refused_and_left_untouched(runs, script, tmp_path, capsys):
    for other in SCRIPTS:
        if other == script:
            continue
        run_dir = copy_of(runs, other, tmp_path / other)
        before = digest(run_dir)
        for flag in ("--resume", "--play") if script != "es_basic.py" else ("--play",):
            line = one_error_line(call(capsys, script, flag, run_dir, "--iterations", "2"))
            if script == "es_basic.py":  # it reads policy.npz alone, which no other script writes
                assert "holds no policy.npz of es_basic.py" in line
            else:
                assert f"run directory of {other}" in line and f"python {other}" in line
        assert digest(run_dir) == before


@pytest.mark.parametrize("script", LONG)
def test_each_script_resumes_its_own_run(runs, script, tmp_path):
    """The check above refuses only other scripts' folders: the script's own run goes on."""
    run_dir = copy_of(runs, script, tmp_path)
    cfg = json.load(open(os.path.join(run_dir, "config.json")))
    assert cfg["script"] == script
    out = run(script, "--resume", run_dir, "--iterations", "2")
    assert out.returncode == 0, out.stderr
    assert len(open(os.path.join(run_dir, "progress.csv")).read().splitlines()) == 3  # header and 2 rows


# ---------------------------------------------------------------- flags with impossible values

@pytest.mark.parametrize("script", SCRIPTS)
def test_an_empty_run_dir_is_refused_and_starts_no_run(script, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    flags = ("--resume", "--play") + (("--evaluate-snapshots",) if script == "es_openai.py" else ())
    for flag in flags if script != "es_basic.py" else ("--play",):
        line = one_error_line(call(capsys, script, flag, ""))
        assert "'' is not a run directory" in line or "'' holds no policy.npz" in line
    assert os.listdir(tmp_path) == []  # no runs/ folder: no training started


@pytest.mark.parametrize("script", OPENAI)
def test_sizes_that_cannot_fit_in_memory_are_refused(script, tmp_path, capsys):
    huge = ["--workers 100000", "--eval-episodes 10000000000", "--episodes 10000000000 --play x"]
    huge += {"ars.py": ["--n-directions 100000000 --top-b 1"],
             "es_openai.py": ["--hidden 1000000000", "--ac-bins 1000000000", "--population 10000000000"]}[script]
    for flags in huge:
        argv = flags.split()
        if "--play" in argv:  # checked before the run directory is read
            argv[argv.index("--play") + 1] = str(tmp_path / "missing")
        line = one_error_line(call(capsys, script, *TINY[script], *argv, "--out-dir", str(tmp_path)))
        assert "must be" in line or "more than 16 per CPU" in line, (flags, line)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("script", OPENAI)
def test_flags_of_another_mode_are_refused(runs, script, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = runs[script]
    before = digest(run_dir)
    cases = [(["--video"], "--video goes with --play"), (["--episodes", "3"], "--episodes goes with --play"),
             (["--play", run_dir, "--resume", run_dir], "--play and --resume do not go together")]
    if script == "es_openai.py":
        cases += [(["--play", run_dir, "--evaluate-snapshots", run_dir], "do not go together"),
                  (["--evaluate-snapshots", run_dir, "--video"], "--video goes with --play")]
    cases += [(["--play", run_dir, "--ray"], "--ray is for training")]
    if script == "es_openai.py":
        cases += [(["--evaluate-snapshots", run_dir, "--ray"], "--ray is for training")]
    for argv, message in cases:
        assert message in one_error_line(call(capsys, script, *TINY[script], *argv)), argv
    assert os.listdir(tmp_path) == [] and digest(run_dir) == before  # no training started, nothing written


@pytest.mark.parametrize("script", OPENAI)
def test_an_out_dir_too_deep_to_create_is_one_line(script, tmp_path, capsys):
    deep = os.path.join(str(tmp_path), *["d"] * 3000)
    line = one_error_line(call(capsys, script, *TINY[script], "--out-dir", deep))
    assert "cannot create the run directory" in line
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- hand-edited or damaged files

@pytest.mark.parametrize("script", OPENAI)
@pytest.mark.parametrize("key, value", [("seed", 1.5), ("iterations", "ten"), ("alpha", True), ("env", "CartPole-v1"),
                                        ("fitness", "best"), ("out_dir", 7), ("save_every", None)],
                         ids=["float-seed", "string", "bool", "env", "choice", "number-for-a-path", "null-for-a-default"])
def test_a_hand_edited_config_is_one_line(runs, script, key, value, tmp_path, capsys):
    run_dir = copy_of(runs, script, tmp_path)
    cfg = json.load(open(os.path.join(run_dir, "config.json")))
    if script == "ars.py" and key == "fitness":
        key, value = "version", 3  # ars.py has no --fitness; --version takes 1 or 2
    cfg[key] = value
    json.dump(cfg, open(os.path.join(run_dir, "config.json"), "w"))
    before = digest(run_dir)
    one_error_line(call(capsys, script, "--resume", run_dir, "--iterations", "2"))
    assert digest(run_dir) == before


@pytest.mark.parametrize("script", LONG)
def test_a_flag_that_would_change_a_resumed_run_is_refused(runs, script, tmp_path, capsys):
    run_dir = copy_of(runs, script, tmp_path)
    before = digest(run_dir)
    own = {"ars.py": ["--n-directions", "4"], "es_openai.py": ["--population", "8"]}
    for argv in (["--seed", "3"], own[script], ["--out-dir", str(tmp_path)]):
        line = one_error_line(call(capsys, script, "--resume", run_dir, "--iterations", "2", *argv))
        assert f"{argv[0]} cannot change a resumed run" in line and "--iterations" in line, line
    assert digest(run_dir) == before


@pytest.mark.parametrize("script", OPENAI)
@pytest.mark.parametrize("key, value", [("episode_length", 0), ("hidden", "0")])
def test_a_hand_edited_config_is_one_line_for_play(runs, script, key, value, tmp_path, capsys):
    if (script, key) == ("ars.py", "hidden"):
        pytest.skip(f"{script} has no --{key.replace('_', '-')}")
    run_dir = copy_of(runs, script, tmp_path)
    cfg = json.load(open(os.path.join(run_dir, "config.json")))
    cfg[key] = value
    json.dump(cfg, open(os.path.join(run_dir, "config.json"), "w"))
    before = digest(run_dir)
    line = one_error_line(call(capsys, script, "--play", run_dir, "--episodes", "1"))
    assert "config.json" in line and "must be at least 1" in line, line
    assert digest(run_dir) == before


@pytest.mark.parametrize("script", OPENAI)
@pytest.mark.parametrize("damage", ["empty", "text-in-a-cell", "short-row", "other-header"])
def test_a_damaged_progress_csv_is_refused_on_resume(runs, script, damage, tmp_path, capsys):
    run_dir = copy_of(runs, script, tmp_path)
    path = os.path.join(run_dir, "progress.csv")
    header, *rows = open(path).read().splitlines()
    text = {"empty": "",
            "text-in-a-cell": "\n".join([header] + [r.split(",", 1)[0] + ",x," + r.split(",", 2)[2] for r in rows]),
            "short-row": "\n".join([header] + [r.rsplit(",", 1)[0] for r in rows]),
            "other-header": "\n".join(["a,b,c"] + rows)}[damage] + "\n"
    open(path, "w").write(text)
    before = digest(run_dir)
    line = one_error_line(call(capsys, script, "--resume", run_dir, "--iterations", "2"))
    assert "progress.csv" in line and "damaged" in line
    assert digest(run_dir) == before


@pytest.mark.parametrize("script", OPENAI)
def test_a_failed_rename_leaves_no_temporary_file(script, tmp_path):
    mod = MODULES[script]
    target = tmp_path / "config.json"
    target.mkdir()  # a folder where the file should go: os.replace fails
    with pytest.raises(OSError):
        mod.write_json(str(target), {"a": 1})
    with pytest.raises(OSError):
        mod.write_csv_rows(str(target), [["1"]], ["iteration"])
    assert sorted(os.listdir(tmp_path)) == ["config.json"]


@pytest.mark.parametrize("script", OPENAI)
def test_a_checkpoint_holding_nan_is_refused(runs, script, tmp_path, capsys):
    """Right keys and shapes, but NaN where the policy should be: no run saves that (a diverged update
    never enters a checkpoint), so it is damage, refused before any episode is played."""
    run_dir = copy_of(runs, script, tmp_path)
    latest = os.path.join(run_dir, "checkpoints", "latest.npz")
    with np.load(latest, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    key = "M" if script == "ars.py" else "theta"
    arrays[key] = np.full_like(arrays[key], np.nan)
    np.savez(latest, **arrays)
    before = digest(run_dir)
    for argv in (["--resume", run_dir, "--iterations", "2"], ["--play", run_dir, "--episodes", "1"]):
        assert "NaN or inf" in one_error_line(call(capsys, script, *argv))
    assert digest(run_dir) == before


@pytest.mark.parametrize("script", OPENAI)
def test_a_resumed_run_whose_checkpoints_folder_takes_no_file_is_refused_before_writing(runs, script, tmp_path, capsys,
                                                                                          monkeypatch):
    """A resumed run writes its checkpoints into a folder it did not make: it asks whether that
    folder takes files before it writes anything. os.access answers as for a read-only folder here,
    since permissions do not stop root and a test cannot mount a read-only file system."""
    run_dir = copy_of(runs, script, tmp_path)
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: not str(path).endswith("checkpoints")
                        and access(path, mode, **kw))
    before = digest(run_dir)
    assert "cannot write to the run directory" in one_error_line(call(capsys, script, "--resume", run_dir,
                                                                      "--iterations", "2"))
    assert digest(run_dir) == before


@pytest.mark.parametrize("script", OPENAI)
def test_a_checkpoint_that_cannot_be_written_during_a_run_is_one_line(runs, script, tmp_path, capsys):
    """The disk fills or the folder turns read-only mid-run: one line, exit status 1, and the last
    checkpoint, written atomically, is still whole to resume from."""
    run_dir = copy_of(runs, script, tmp_path)
    os.mkdir(os.path.join(run_dir, "checkpoints", "latest.npz.tmp.npz"))  # the next latest.npz cannot be written
    line = one_error_line(call(capsys, script, "--resume", run_dir, "--iterations", "2"), status=1)
    assert "cannot write" in line and "the last checkpoint is kept" in line
    with np.load(os.path.join(run_dir, "checkpoints", "latest.npz"), allow_pickle=False) as f:
        assert int(f["iteration"]) == 1


@pytest.mark.parametrize("script", ("es_basic.py", "es_openai.py"))
def test_a_video_that_cannot_be_written_is_refused_before_any_episode(runs, script, tmp_path):
    run_dir = copy_of(runs, script, tmp_path)
    env_id = json.load(open(os.path.join(run_dir, "config.json")))["env"]
    os.makedirs(os.path.join(run_dir, "video", f"{env_id}.gif"))  # a folder where the GIF should go
    out = run(script, "--play", run_dir, "--episodes", "1", "--video")
    assert "cannot write" in one_error_line(out) and "mean return" not in out.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_video_is_written_without_a_word_on_stderr(runs, script, tmp_path):
    """pygame draws the frames of Box2D and classic-control tasks; with no display its SDL would look
    for one and print an error line (XDG_RUNTIME_DIR) although the frames need no window."""
    run_dir = copy_of(runs, script, tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("SDL_VIDEODRIVER", "XDG_RUNTIME_DIR", "DISPLAY")}
    out = subprocess.run([sys.executable, os.path.join(ROOT, script), "--play", run_dir, "--episodes", "1", "--video"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert glob.glob(os.path.join(run_dir, "video", "*.gif"))


@pytest.mark.parametrize("script", OPENAI)
def test_a_plot_that_fails_costs_the_picture_not_the_run(script, tmp_path, capsys, monkeypatch):
    """Ctrl-C while matplotlib is first imported can leave it half-imported: every later plot
    fails. The run must still stop with its checkpoint, and say the picture is missing."""
    mod = MODULES[script]
    calls = []

    def draw(*a):
        calls.append(1)
        raise KeyboardInterrupt if len(calls) == 1 else ImportError("cannot import name 'pyplot'")
    monkeypatch.setattr(mod, "draw_progress", draw)
    monkeypatch.setattr(mod, "PLOT_EVERY", 0.0)  # a plot at every checkpoint: the first one is inside the loop
    argv = TINY[script] + ["--iterations", "3", "--eval-every", "1", "--eval-episodes", "1", "--workers", "1",
                           "--out-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as stop:
        mod.main(argv)
    assert stop.value.code == 130 and len(calls) == 2
    assert "progress.png not redrawn (ImportError" in capsys.readouterr().err
    (run_dir,) = glob.glob(str(tmp_path / "*__*"))
    assert os.path.exists(os.path.join(run_dir, "checkpoints", "latest.npz"))


@pytest.mark.parametrize("script", OPENAI)
def test_progress_png_is_redrawn_at_most_every_plot_every_seconds_and_at_the_end(script, tmp_path, capsys, monkeypatch):
    """A plot costs the master about 0.2 s while the workers wait: during a run progress.png is
    redrawn with a checkpoint only if the last plot is PLOT_EVERY seconds old, and at the end only
    if rows came since."""
    mod = MODULES[script]
    drawn = []
    monkeypatch.setattr(mod, "draw_progress", lambda run_dir, rows, title: drawn.append(len(rows)))
    argv = TINY[script] + ["--iterations", "3", "--eval-every", "1", "--eval-episodes", "1", "--workers", "1"]
    assert call(capsys, script, *argv, "--out-dir", str(tmp_path / "a")).returncode == 0
    assert drawn == [3]  # a run of a second or two: no redraw before the end, one at the end
    drawn.clear()
    monkeypatch.setattr(mod, "PLOT_EVERY", 0.0)
    assert call(capsys, script, *argv, "--out-dir", str(tmp_path / "b")).returncode == 0
    assert drawn == [1, 2, 3]  # a checkpoint at every evaluation, each with its plot; none more at the end


@pytest.mark.parametrize("script", LONG)
def test_episode_length_caps_every_episode_and_an_endless_environment_needs_it(script, tmp_path, capsys):
    """Episodes last the environment's time limit unless --episode-length is given (ars.py,
    es_openai.py); an environment without a time limit is refused without it (an episode could
    last forever)."""
    import gymnasium as gym
    if "EndlessPendulum-v0" not in gym.registry:  # Pendulum without its TimeLimit
        gym.register("EndlessPendulum-v0", entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv")
    argv = [a if a != "CartPole-v1" else "Pendulum-v1" for a in TINY[script]] + [
        "--iterations", "1", "--eval-episodes", "1", "--workers", "1", "--out-dir", str(tmp_path)]
    line = one_error_line(call(capsys, script, *[a if a != "Pendulum-v1" else "EndlessPendulum-v0" for a in argv]))
    assert "has no time limit" in line and not os.listdir(tmp_path)
    assert "give --episode-length" in line
    assert call(capsys, script, *argv, "--episode-length", "30").returncode == 0  # Pendulum's own limit: 200
    (run_dir,) = glob.glob(str(tmp_path / "Pendulum-v1__*"))
    header, row = open(os.path.join(run_dir, "progress.csv")).read().splitlines()
    assert header.startswith("iteration,episodes,env_steps,")
    episodes, env_steps = (int(v) for v in row.split(",")[1:3])
    assert episodes >= 4 and env_steps == 30 * episodes


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_reached_target_is_reported_with_its_episodes_and_env_steps(script, tmp_path, capsys):
    argv = TINY[script] + ["--iterations", "5", "--eval-every", "1", "--eval-episodes", "1", "--workers", "1",
                           "--target-return=-1e9", "--out-dir", str(tmp_path)]
    result = MODULES[script].main(argv)
    out = capsys.readouterr()
    assert result["status"] == "target" and result["iteration"] == 1
    if script == "es_basic.py":  # the closing line of every run: how it ended
        assert f"target after iteration 1: {result['episodes']} episodes, {result['env_steps']} env steps" in out.err
        return
    assert (f"target -1000000000.0 reached at {'generation' if script == 'es_openai.py' else 'iteration'} 1: "
            f"{result['episodes']} episodes, {result['env_steps']} env steps") in out.out


# ---------------------------------------------------------------- workers end with their master

def children(pid: int) -> list:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def running(pid: int) -> bool:
    """Whether pid is a live process (not gone, not a zombie waiting for its parent)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def training(script, tmp_path, **popen):
    """A long two-worker run of the script in a session of its own, yielded once its first iteration
    is logged; whatever is left of the session is killed afterwards, if the test failed."""
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, script), *TINY[script], "--iterations", "100000",
                             "--workers", "2", "--out-dir", str(tmp_path)], stdout=subprocess.PIPE, text=True,
                            start_new_session=True, **popen)
    try:
        for line in proc.stdout:
            if line.startswith(("it ", "gen ")):
                break
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


@pytest.mark.parametrize("script", SCRIPTS)
def test_workers_end_when_their_master_is_killed(script, tmp_path):
    """kill -9 gives the master no chance to stop its workers: they must notice and end."""
    with training(script, tmp_path, stderr=subprocess.DEVNULL) as proc:
        workers = children(proc.pid)
        assert len(workers) >= 2
        proc.kill()
        proc.wait()
        deadline = time.time() + 15
        while time.time() < deadline and any(running(w) for w in workers):
            time.sleep(0.2)
        assert not any(running(w) for w in workers)


@pytest.mark.parametrize("script", SCRIPTS)
def test_kill_int_stops_a_run_started_in_the_background(script, tmp_path):
    """A job started in the background (`cmd &` in a script) begins with SIGINT ignored: the script
    installs its own handler, so kill -INT still stops it, with a checkpoint to resume from."""
    with training(script, tmp_path, stderr=subprocess.PIPE,
                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) as proc:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        said = "interrupted after iteration" if script == "es_basic.py" else "--resume"
        assert proc.returncode == 130 and said in err and "Traceback" not in err, (proc.returncode, err)
        (run_dir,) = glob.glob(str(tmp_path / "*__*"))
        kept = "policy.npz" if script == "es_basic.py" else os.path.join("checkpoints", "latest.npz")
        assert os.path.isfile(os.path.join(run_dir, kept))


# ---------------------------------------------------------------- stderr keeps to what matters

@pytest.mark.parametrize("script", OPENAI)
def test_mujocos_warning_about_gymnasiums_model_files_is_silenced(script, tmp_path, capfd, monkeypatch):
    mujoco = pytest.importorskip("mujoco")
    monkeypatch.chdir(tmp_path)
    previous = mujoco.get_mju_user_warning()
    try:
        MODULES[script].quiet_mujoco()
        capfd.readouterr()
        mujoco.MjModel.from_xml_string('<mujoco><compiler settotalmass="2"/><worldbody><body>'
                                       '<freejoint/><geom size="1"/></body></worldbody></mujoco>')
        assert capfd.readouterr().err == "" and os.listdir(tmp_path) == []  # no MUJOCO_LOG.TXT either
        mujoco.get_mju_user_warning()("Nan, Inf or huge value in QACC at DOF 0 ")  # any other warning
        assert capfd.readouterr().err == "MuJoCo warning: Nan, Inf or huge value in QACC at DOF 0\n"
    finally:
        mujoco.set_mju_user_warning(previous)
