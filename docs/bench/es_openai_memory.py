"""Memory of a whole es_openai.py run: the largest proportional set size (PSS) of the master and
its workers together, sampled every 0.2 s. PSS splits each shared page among the processes that
map it, so the shared noise table counts once, not once per worker.

    python docs/bench/es_openai_memory.py --env HalfCheetah-v5 --workers 2 --iterations 3

Every option goes to es_openai.py (default: --env HalfCheetah-v5 --iterations 3); the run becomes
a row of docs/results/memory.csv. Linux only (/proc/<pid>/smaps_rollup).
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
            return next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
    except (OSError, StopIteration):  # the process has ended
        return 0


def main():
    argv = sys.argv[1:] or ["--env", "HalfCheetah-v5", "--iterations", "3"]
    if argv[0] in ("-h", "--help"):
        sys.exit(print(__doc__.strip()))
    if not os.path.exists("/proc/self/smaps_rollup"):  # elsewhere every PSS would read 0
        print("es_openai_memory.py: error: needs Linux's /proc/PID/smaps_rollup", file=sys.stderr)
        sys.exit(2)
    peak, processes = 0, 0
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, os.path.join(ROOT, "es_openai.py"), *argv, "--out-dir", out]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        while proc.poll() is None:
            pids = [proc.pid, *children(proc.pid)]
            peak, processes = max((peak, processes), (sum(map(pss_kib, pids)), len(pids)))
            time.sleep(0.2)
    if proc.returncode != 0:  # es_openai.py said why on stderr
        sys.exit(proc.returncode)
    print(f"peak PSS of the run: {peak / 2**20:.2f} GiB over {processes} processes")
    here = machine()
    row = dict(here, script=f"es_openai.py at {here['commit']}", options=" ".join(argv))
    row.update(peak_pss_gib=round(peak / 2**20, 3), processes=processes)
    columns = "script options peak_pss_gib processes processor simd cores date commit".split()
    print(append("memory.csv", [row], columns))


if __name__ == "__main__":
    main()
