"""The processes of one launch on this machine: started one by one, watched until every one has ended, stopped
together.

The launching process watches each worker's exit (its sentinel), so a worker that dies at any moment, while it
imports the user's script, while it reads the run or in the middle of training, is noticed within a poll
interval, whatever the size of what the workers receive: the run itself travels through a file in the launch's
private folder (see :class:`~accelkit.strategies.launchers.spawn.SpawnLauncher`), never through the pipe that
starts the process, in which the launching process could block forever writing to a worker that is already dead.

In the folder, each worker leaves ``started-<index>`` once its interpreter is up (the user's script re-imported),
``error-<index>.txt`` with its traceback when the run raised in it, and ``crash-<index>.txt`` with the Python stack
of its threads when native code crashed it (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT: ``faulthandler``): the
launch's error quotes it, so a crash in a library's native code names the Python line that called it.

A worker that is stopped (SIGSTOP or SIGTSTP sent to it) holds the others up at their next collective:
after :data:`STOPPED_NOTICE_S` one line names it; when the run then fails, the error names it too; and a worker
stopped for longer than the launch's ``stopped_limit_s`` ends the launch (the others would have failed at the
collective timeout by then). Ending the workers continues a stopped one, so that it exits through its handlers.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import faulthandler
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, TextIO

from accelkit.errors import WorkerError
from accelkit.utilities.file_modules import install_from_environment
from accelkit.utilities.processes import process_stopped

#: seconds a worker is seen stopped before one line names it
STOPPED_NOTICE_S = 5.0


def started_marker(folder: Path, index: int) -> Path:
    """The file worker ``index`` creates once its interpreter is up and its entry runs."""
    return folder / f"started-{index}"


def error_file(folder: Path, index: int) -> Path:
    """The file worker ``index`` writes its traceback to when its entry raises."""
    return folder / f"error-{index}.txt"


def crash_file(folder: Path, index: int) -> Path:
    """The file ``faulthandler`` writes worker ``index``'s Python stack to when native code crashes it."""
    return folder / f"crash-{index}.txt"


#: the open crash file of this worker process (faulthandler writes to its descriptor, which must stay open)
_crash_log: list[TextIO] = []

#: the most lines of a crashed worker's stack quoted in the launch's error
CRASH_LINES = 40


class WorkerProcesses:
    """Start, watch and stop the worker processes of one launch.

    :param folder: the launch's private folder (markers and tracebacks of the workers).
    :param start_method: the :mod:`multiprocessing` start method (``"spawn"``).
    :param stopped_limit_s: seconds a worker may stay stopped before the launch is ended (``None``: no limit).
    :param step_of: ``step_of(index)``, the step worker ``index`` last reported (named with a stopped worker).
    :param collective_timeout_s: the run's collective timeout (named in the line about a stopped worker).
    """

    def __init__(self, folder: str | Path, start_method: str = "spawn", stopped_limit_s: float | None = None,
                 step_of: Callable[[int], int] | None = None, collective_timeout_s: float | None = None) -> None:
        self.folder = Path(folder)
        self.start_method = start_method
        self.processes: list[Any] = []  # (multiprocessing processes; a started one has its pid)
        self.stopped_limit_s, self.step_of, self.collective_timeout_s = stopped_limit_s, step_of, collective_timeout_s
        self._stopped_since: dict[int, float] = {}
        self._noticed: set[int] = set()

    def start(self, entry: Callable[..., None], args: tuple, count: int) -> None:
        """Start ``count`` workers running ``entry(index, *args)``. The arguments are pickled into the pipe that
        starts each process: keep them small (file paths, a shared-memory block)."""
        context = multiprocessing.get_context(self.start_method)
        for index in range(count):
            # typeshed's BaseContext (what get_context returns for a str) lacks Process; every real context has it
            process = context.Process(target=run_worker,  # type: ignore[attr-defined]
                                      args=(entry, index, args, str(self.folder), self.start_method == "fork"),
                                      name=f"accelkit-worker-{index}")
            self.processes.append(process)  # known before it starts: a signal during start() still stops it
            process.start()

    def started(self) -> bool:
        """Whether every worker is up (its interpreter started and the user's script imported)."""
        return bool(self.processes) and all(started_marker(self.folder, i).exists()
                                            for i in range(len(self.processes)))

    def poll(self, timeout: float) -> bool:
        """``True`` when every worker has ended well; ``False`` after waiting up to ``timeout`` seconds for one
        to end. Raises :class:`~accelkit.errors.WorkerError` describing the first failure as soon as a worker
        ended with a non-zero status (the caller then stops the others with :meth:`kill`)."""
        failed = [(i, p) for i, p in enumerate(self.processes) if p.exitcode not in (None, 0)]
        if failed:
            raise WorkerError(self.describe_failure(failed) + self.describe_stopped())
        running = [p for p in self.processes if p.exitcode is None]
        if not running:
            return True
        self.watch_stopped()
        wait([p.sentinel for p in running], timeout)
        return False

    def watch_stopped(self) -> None:
        """Note which workers are stopped, name one stopped for :data:`STOPPED_NOTICE_S` (once per stop), and
        raise :class:`~accelkit.errors.WorkerError` for one stopped longer than ``stopped_limit_s``."""
        now = time.monotonic()
        for index, process in enumerate(self.processes):
            if process.pid is None or process.exitcode is not None or not process_stopped(process.pid):
                self._stopped_since.pop(index, None)  # running again (or ended): a new stop is a new episode
                self._noticed.discard(index)
                continue
            since = self._stopped_since.setdefault(index, now)
            if now - since >= STOPPED_NOTICE_S and index not in self._noticed:
                self._noticed.add(index)
                timeout = (f" when the collective timeout ({self.collective_timeout_s:.0f} s) ends"
                           if self.collective_timeout_s is not None else "")
                print(f"accelkit: {self._stopped_worker(index)}; the other workers wait for it, and the run "
                      f"fails{timeout} unless it continues (kill -CONT {process.pid}).", file=sys.stderr, flush=True)
            if self.stopped_limit_s is not None and now - since > self.stopped_limit_s:
                raise WorkerError(f"{self._stopped_worker(index)} for {now - since:.0f} s, past the launch's limit "
                                  f"({self.stopped_limit_s:.0f} s: the collective timeout and a margin); the workers "
                                  "were ended.")

    def _stopped_worker(self, index: int) -> str:
        step = self.step_of(index) if self.step_of is not None else None
        return (f"worker {index} (pid {self.processes[index].pid}) is stopped (SIGSTOP or SIGTSTP)"
                + (f" after step {step}" if step is not None else ""))

    def describe_stopped(self) -> str:
        """A sentence naming the workers seen stopped when the run failed (they are ended with the others), or
        ``""``."""
        stopped = [i for i, p in enumerate(self.processes)
                   if p.pid is not None and p.exitcode is None and process_stopped(p.pid)]
        if not stopped:
            return ""
        return "\n" + "; ".join(self._stopped_worker(i) for i in stopped) + " (ended with the others)."

    def describe_failure(self, failed: list[tuple[int, Any]]) -> str:
        """One sentence for the failure that came first: a worker's traceback (the earliest written) when one
        raised, else how the first failed worker ended and what that usually means."""
        tracebacks = [(error_file(self.folder, i), i) for i, _ in failed if error_file(self.folder, i).is_file()]
        if tracebacks:
            path, index = min(tracebacks, key=lambda item: item[0].stat().st_mtime_ns)
            return f"worker {index} failed; its traceback:\n{path.read_text(errors='replace').rstrip()}"
        index, process = failed[0]
        code = process.exitcode
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
            how = f"was killed by {name}" + (" (often the system's out-of-memory killer)" if -code == 9 else "")
        else:
            how = f"exited with status {code}"
        if not started_marker(self.folder, index).exists():
            return (f"worker {index} {how} before it started the run. A worker started with the "
                    f"{self.start_method!r} method first imports the script that called the Trainer (its "
                    "__main__ module) again, and that import ended it (its output above says why): keep the "
                    "script's work under `if __name__ == \"__main__\":` and let its top level run in a worker "
                    f"process.{self.crash_stack(index)}")
        return (f"worker {index} {how} without a Python exception (killed from outside, os._exit, or a crash in "
                f"native code); the other workers were stopped.{self.crash_stack(index)}")

    def crash_stack(self, index: int) -> str:
        """The Python stack worker ``index``'s threads were in when native code crashed it, as a paragraph to
        end the launch's error with (its last :data:`CRASH_LINES` lines), or ``""`` when it did not crash."""
        try:
            lines = crash_file(self.folder, index).read_text(errors="replace").rstrip().splitlines()
        except OSError:
            return ""
        if not lines:
            return ""
        cut = f"(the first {len(lines) - CRASH_LINES} lines left out)\n" if len(lines) > CRASH_LINES else ""
        return (f"\nIt crashed in native code called from Python; the stack of each of its threads at the crash "
                f"(faulthandler):\n{cut}" + "\n".join(lines[-CRASH_LINES:]))

    def kill(self, grace_s: float = 3.0) -> None:
        """SIGTERM to every live worker (they exit through their cleanup handlers), SIGKILL after ``grace_s``."""
        alive = [p for p in self.processes if p.pid is not None and p.exitcode is None]
        for process in alive:
            process.terminate()
            if process_stopped(process.pid):  # a stopped process acts on SIGTERM once continued
                with contextlib.suppress(OSError):
                    os.kill(process.pid, signal.SIGCONT)
        deadline = time.monotonic() + grace_s
        for process in alive:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.exitcode is None:
                process.kill()
                process.join(timeout=5)


def run_worker(entry: Callable[..., None], index: int, args: tuple, folder: str, forked: bool = False) -> None:
    """Body of every worker process: mark it started, tie its life to the launching process, run
    ``entry(index, *args)``; an exception's traceback goes to the launch's folder and the worker exits with 1.
    The worker then ends through :func:`end_process`. A ``forked`` worker first forgets the ``atexit`` handlers
    it inherited: they are the launching process's (removing its temporary folders, closing its loggers)."""
    if forked:
        atexit._clear()  # the interpreter's own way to drop every handler; the worker's code registers its own
    path = Path(folder)
    install_from_environment()  # the launching process's modules imported from files (a CLI's lib/nets.py:Net)
    _record_native_crashes(crash_file(path, index))
    started_marker(path, index).touch()
    _die_with_parent()
    try:
        entry(index, *args)
        code = 0
    except SystemExit as exc:  # SIGTERM from the launcher (or the user's sys.exit)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception:  # noqa: BLE001 - every failure travels to the launching process
        text = traceback.format_exc()
        try:
            error_file(path, index).write_text(text)
        except OSError:  # the folder is gone (the launch was stopped): say it here at least
            print(text, file=sys.stderr, flush=True)
        code = 1
    end_process(code)


def end_process(code: int) -> None:
    """End this process with ``code`` after what an interpreter's exit does for the user: wait for the
    non-daemon threads, run the ``atexit`` handlers (loggers flush and close, child processes such as
    DataLoader workers stop), flush the standard streams (Python's and the C library's); then leave with
    :func:`os._exit`, skipping only the interpreter's own final teardown.

    That teardown is where a finished worker could abort: the process-group backend outlives
    ``destroy_process_group`` (torch keeps a reference; gloo's worker threads, the rendezvous store's thread
    keep running), and a native thread that re-enters Python while the interpreter finalizes (releasing a tensor
    a collective held, returning from a store call) ends the process with ``terminate called without an active
    exception`` (SIGABRT, exit 134) although the run succeeded.
    """
    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # noqa: SLF001 - the interpreter's own exit step, run here before os._exit
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # closed or replaced by the user
            pass
    try:
        ctypes.CDLL(None).fflush(None)  # C/C++ output (the process-group backend's lines)
    except (OSError, AttributeError):
        pass
    os._exit(code)


def _record_native_crashes(path: Path) -> None:
    """Have ``faulthandler`` write this worker's Python stack to ``path`` if native code crashes the process,
    unless the user turned faulthandler on themselves (``PYTHONFAULTHANDLER``, ``-X faulthandler``): then it
    writes where they asked. A forked worker's inherited setting (pytest turns it on) is replaced."""
    if os.environ.get("PYTHONFAULTHANDLER") or "faulthandler" in sys._xoptions:
        return
    try:
        log = open(path, "w")  # noqa: SIM115 - stays open for the life of the process
    except OSError:
        return
    _crash_log[:] = [log]
    faulthandler.enable(file=log, all_threads=True)


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the launching process dies (killed with ``-9``, say), as if the whole job
    had been killed, instead of training on as an orphan. Elsewhere nothing is set."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # the launcher died before the line above
        os._exit(1)
