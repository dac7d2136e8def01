"""Processes on this machine: whether one is still running, whether it is stopped, its parents' names."""

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
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:stat.rfind(")") + 3] == "T"  # the field after the (command name)


def ancestor_names(pid: int | None = None) -> list[str] | None:
    """The command names (``/proc/<pid>/comm``, at most 15 characters) of the parent of ``pid`` (default: this
    process), its parent, and so on up to process 1; ``None`` where ``/proc`` cannot tell (not Linux)."""
    names: list[str] = []
    current = os.getpid() if pid is None else pid
    seen: set[int] = set()
    while current > 1 and current not in seen:
        seen.add(current)
        try:
            with open(f"/proc/{current}/stat") as handle:
                stat = handle.read()
        except OSError:
            return names if names else None
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split at the last ")"
        parent = int(stat[stat.rindex(")") + 2:].split()[1])
        if parent < 1:
            break
        try:
            with open(f"/proc/{parent}/comm") as handle:
                names.append(handle.read().strip())
        except OSError:
            break
        current = parent
    return names
