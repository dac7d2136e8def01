"""Processes on this machine: whether one is still running."""

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
