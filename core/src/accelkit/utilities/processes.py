"""Processes on this machine: whether one is still running, whether it is stopped."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (a process of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_stopped(pid: int) -> bool:
    """Whether process ``pid`` on this machine is stopped (SIGSTOP, SIGTSTP; state ``T`` in ``/proc``). ``False``
    where that cannot be read (the process is gone, or the system has no ``/proc``)."""
    try:
        stat = open(f"/proc/{pid}/stat", encoding="ascii", errors="replace").read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:stat.rfind(")") + 3] == "T"  # the field after the (command name)
