"""Guards for tests that start processes: a hang becomes a failure with tracebacks, not a stuck run."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


@contextlib.contextmanager
def hang_guard(seconds: float) -> Iterator[None]:
    """If the block runs longer than ``seconds``, dump every thread's traceback and exit the test process.

    pytest-timeout is not a dependency; this is the standard library's watchdog. It ends the whole run, which
    is what a hang in a test of process handling should do.
    """
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@contextlib.contextmanager
def standard_error_to(path: str | os.PathLike) -> Iterator[Path]:
    """Send this process's standard error (the file descriptor, so the processes it forks or starts meanwhile
    write there too: forked workers' warnings) to the file ``path`` for the block; read it after the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "w") as err:
        os.dup2(err.fileno(), 2)
    try:
        yield Path(path)
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists and is not a zombie (a zombie has exited; it only awaits reaping)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "State:\tZ" not in status


def wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    """Wait up to ``seconds`` for ``pids`` to exit; return those still alive."""
    deadline = time.monotonic() + seconds
    alive = [p for p in pids if pid_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if pid_alive(p)]
    return alive


def child_env() -> dict[str, str]:
    """Environment for subprocesses: ``tests`` on ``PYTHONPATH`` so ``helpers`` imports, output unbuffered."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONUNBUFFERED"] = "1"
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


PYTHON = sys.executable


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and those they started in turn (read from ``/proc``: Linux)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        parent = int(stat[stat.rfind(")") + 2:].split()[1])  # the field after the state
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def native_crash_worker(index: int, seconds: float) -> None:
    """A worker entry whose worker 1 is crashed by native code (it reads address 0: SIGSEGV) while the others
    sleep for ``seconds``."""
    if index == 1:
        import ctypes

        ctypes.string_at(0)
    time.sleep(seconds)


def idle_worker(index: int, seconds: float) -> None:
    """A worker entry (``entry(index, *args)`` of a launcher's workers) that only sleeps for ``seconds``."""
    time.sleep(seconds)
