r"""Memory of a whole es_openai.py run: the largest proportional set size (PSS) of the master and
its workers together, sampled every 0.2 s. PSS splits each shared page among the processes that
map it, so the shared noise table counts once, not once per worker.

    python docs/bench/es_openai_memory.py -- --env HalfCheetah-v5 --workers 2 --iterations 3
    python docs/bench/es_openai_memory.py --script ../old/es_openai.py -- --env HalfCheetah-v5 \
        --workers 2 --iterations 3

Everything after -- goes to es_openai.py (or the --script given). Each run becomes a row of
docs/results/memory.csv. Linux only (/proc/<pid>/smaps_rollup).
"""

import os
import subprocess
import sys
import tempfile
import time

from results_csv import ROOT, append, machine


def children(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    own = sys.argv[1 : sys.argv.index("--")] if "--" in sys.argv else sys.argv[1:]
    if own in (["-h"], ["--help"]):
        print(__doc__.strip())
        return
    script = (
        own[1] if len(own) == 2 and own[0] == "--script" else os.path.join(ROOT, "es_openai.py")
    )
    if own and not (len(own) == 2 and own[0] == "--script" and os.path.isfile(script)):
        print(
            "es_openai_memory.py: error: give --script FILE or nothing before --, "
            "es_openai.py's options after it",
            file=sys.stderr,
        )
        sys.exit(2)
    argv = (
        sys.argv[sys.argv.index("--") + 1 :]
        if "--" in sys.argv
        else ["--env", "HalfCheetah-v5", "--iterations", "3"]
    )
    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.Popen(
            [sys.executable, script, *argv, "--out-dir", out], stdout=subprocess.DEVNULL
        )
        peak, peak_procs = 0, 0
        while proc.poll() is None:
            pids = [proc.pid] + children(proc.pid)
            total = sum(pss_kib(p) for p in pids)
            if total > peak:
                peak, peak_procs = total, len(pids)
            time.sleep(0.2)
    if proc.returncode != 0:  # es_openai.py said why on stderr
        sys.exit(proc.returncode)
    print(
        f"peak PSS of the run: {peak / 2**20:.2f} GiB ({peak * 1024 / 1e9:.2f} GB) "
        f"over {peak_procs} processes; "
        f"exit status {proc.returncode}"
    )
    commit = subprocess.run(
        ["git", "rev-parse", "--short=7", "HEAD"],
        cwd=os.path.dirname(os.path.abspath(script)),
        capture_output=True,
        text=True,
    ).stdout.strip()
    row = dict(
        machine(),
        script=f"{os.path.basename(script)} at {commit}",
        options=" ".join(argv),
        peak_pss_gib=round(peak / 2**20, 3),
        processes=peak_procs,
    )
    print(
        append(
            "memory.csv",
            [row],
            "script options peak_pss_gib processes processor simd cores date commit".split(),
        )
    )


if __name__ == "__main__":
    main()
