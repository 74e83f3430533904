"""Imported at start-up by every Python whose PYTHONPATH holds this folder (conftest.py puts it
there): START_METHOD chooses how multiprocessing starts processes, as another platform's default
would; SIMULATED_WINDOWS=1 also takes away what Windows lacks (fork, signal.pthread_sigmask)."""

import multiprocessing
import os
import signal

if os.environ.get("SIMULATED_WINDOWS"):
    del signal.pthread_sigmask
    get_context = multiprocessing.get_context

    def no_fork(method=None):
        if method == "fork":
            raise ValueError("cannot find context for 'fork'")
        return get_context(method)

    multiprocessing.get_context = no_fork
    os.environ["START_METHOD"] = "spawn"

if os.environ.get("START_METHOD"):
    multiprocessing.set_start_method(os.environ["START_METHOD"], force=True)
