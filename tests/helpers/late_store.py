"""A run's store that answers late, for the watchdog's end-of-run tests: ``python late_store.py server`` keeps a
``TCPStore`` and prints its port (the test SIGSTOPs and SIGCONTs this process); ``python late_store.py exit PORT
PID`` starts a watchdog against it, stops the store's process ``PID``, lets a read of the watchdog be given up on,
resumes the store 1 s later from a daemon timer and exits without stopping the watchdog. At its very end (an
``atexit`` function registered before the watchdog's) it prints how many store calls of the watchdog still run."""

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from accelkit.strategies.launchers.watchdog import STORE_CALL_THREAD


def calls_running() -> int:
    """How many store calls of the watchdog still run in this process."""
    return sum(t.name == STORE_CALL_THREAD and t.is_alive() for t in threading.enumerate())


def serve() -> None:
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    print(store.port, flush=True)
    time.sleep(600)


def exit_with_a_call_given_up_on(port: int, pid: int) -> None:
    from accelkit.strategies.launchers import watchdog

    atexit.register(lambda: print(f"calls running at exit: {calls_running()}", flush=True))
    # the client's own time-out well past STORE_TIMEOUT_S (5 s): at an equal 5 s the C++ call could give up first
    # and return, and the bounded call then never gave up (a fresh clone's fast tier failed so once)
    client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    dog = watchdog.start(client, 0, 2, timeout_s=60)
    assert dog is not None
    os.kill(pid, signal.SIGSTOP)
    with contextlib.suppress(watchdog.StoreNotAnswering):
        dog.notes()
        print("the stopped store answered", flush=True)
    print(f"calls running after the read was given up on: {calls_running()}", flush=True)
    resume = threading.Timer(1.0, os.kill, (pid, signal.SIGCONT))
    resume.daemon = True  # the interpreter's exit does not wait for it
    resume.start()


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve()
    else:
        exit_with_a_call_given_up_on(int(sys.argv[2]), int(sys.argv[3]))
