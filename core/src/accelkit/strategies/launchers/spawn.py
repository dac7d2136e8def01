"""Starting workers on this machine: :class:`SpawnLauncher` pickles the run once, starts one process per
worker, and brings rank 0's result back; temporary folders of dead runs are cleaned up."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import torch

from accelkit.checkpoint import files as ckpt
from accelkit.errors import TrainingInterrupted, WorkerError
from accelkit.strategies.launchers import interrupt
from accelkit.strategies.launchers.base import Launcher
from accelkit.strategies.launchers.workers import WorkerProcesses
from accelkit.utilities.pickling import pickling_failure
from accelkit.utilities.processes import process_alive

if TYPE_CHECKING:
    from accelkit.strategies.base import Strategy

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: seconds past the collective timeout a worker may stay stopped before the launch ends (its peers fail at the
#: timeout; this ends the launch should they not)
STOPPED_MARGIN_S = 30.0
#: seconds the launching process waits on its workers between two looks at them: a worker that ends wakes it at
#: once; the timeout only paces the notice of a stopped worker (``STOPPED_NOTICE_S``) and a signal's deadline, so a
#: run's launcher wakes once a second, not on every step's clock (a core a 2-core machine's workers need)
WATCH_EVERY_S = 1.0


class SpawnLauncher(Launcher):
    """Start ``num_processes`` workers on this machine and run the work in each.

    :param num_processes: how many workers to start.
    :param start_method: the :mod:`multiprocessing` start method (``"spawn"``: a fresh interpreter per worker,
        the only method that is safe with threads and device runtimes).
    """

    launches_workers = True
    _workers: WorkerProcesses | None = None  # the launch in progress (set by launch)
    #: prefix of the temporary folder that carries the global-zero worker's result back
    temp_prefix = "accelkit-spawn-"
    # set by launch() for the run it watches (declared for the type checker)
    _deadline: float | None

    def __init__(self, num_processes: int, start_method: str = "spawn") -> None:
        if not isinstance(num_processes, int) or isinstance(num_processes, bool) or num_processes < 1:
            raise ValueError(f"num_processes={num_processes!r} must be an int >= 1")
        self.num_processes = num_processes
        self.start_method = start_method

    def payload(self, strategy: Strategy, function: Callable[..., object], args: tuple[object, ...],
                kwargs: dict[str, object]) -> bytes:
        """The run, pickled once. Plain pickle, not torch.multiprocessing's reducer: that one would move every
        tensor (the caller's module included) into shared memory, and the workers would then all step the
        same parameters."""
        try:
            return pickle.dumps((strategy, function, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            roots = {"strategy": strategy, "function": function, **{f"kwargs[{k!r}]": v for k, v in kwargs.items()},
                     **{type(a).__name__.lower() if hasattr(a, "__dict__") else f"args[{i}]": a
                        for i, a in enumerate(args)}}
            raise WorkerError(
                f"strategy {strategy.name or type(strategy).__name__!r} sends the trainer, the module and the data "
                f"to each worker by pickling them, and that failed: {pickling_failure(roots, exc)}"
            ) from None

    #: seconds the workers get to reach the agreed step and save after the first signal, before they are killed
    #: (:data:`~accelkit.strategies.launchers.interrupt.STOP_GRACE_S`: within a scheduler's 30 s pre-emption grace)
    grace_s: float = interrupt.STOP_GRACE_S
    #: whether the workers can receive a shared-memory block through :meth:`start`'s arguments (needed for the
    #: graceful stop on a first signal; without it, a signal stops the workers at once)
    shares_memory: bool = True

    def start(self, entry: Callable[..., None], args: tuple, num_processes: int) -> None:
        """Start ``num_processes`` workers running ``entry(index, *args)`` and wait for all of them.

        Every worker's exit is watched while they start, run and end: when one fails (or dies before it started,
        while importing the user's script), the others are stopped and a :class:`~accelkit.errors.WorkerError`
        says what happened. On a second signal (:meth:`stop_now`) every worker is killed."""
        workers = self._workers
        if workers is None:
            raise RuntimeError(f"{type(self).__name__}.start() runs inside launch(), which sets up the workers; "
                               "call launch() instead")
        try:
            workers.start(entry, args, num_processes)
            while not workers.poll(WATCH_EVERY_S):
                if self._deadline is not None and time.monotonic() > self._deadline:
                    raise TrainingInterrupted(
                        f"the workers did not reach a consistent point within {self.grace_s:.0f} s of the signal "
                        "and were stopped; nothing was saved by this interruption.")
        finally:
            workers.kill()  # nothing outlives the launch, whatever ended it

    def _kill(self) -> None:
        """Stop every live worker of this launch (SIGTERM, SIGKILL after 3 s)."""
        workers = self._workers
        if workers is not None:
            workers.kill()

    def _workers_up(self) -> bool:
        """Whether every worker of the launch in progress is up (its interpreter started, the script imported)."""
        workers = self._workers
        return workers is not None and workers.started()

    def stop_gracefully(self, signum: int, stage: str | None) -> None:
        """First signal: during ``fit``, agree on a step for every worker to stop at and give them
        :attr:`grace_s` to get there and save; in other stages, or while a worker is not yet up (still importing
        the user's script), there is nothing to save, so stop at once."""
        if stage != "fit" or self._block is None or not self._workers_up():
            self.stop_now(signum)  # nothing to save (or the workers are not even up): stop at once
        interrupt.StopControl(self._block).request(signum, workers=self.num_processes)
        self._deadline = time.monotonic() + self.grace_s
        interrupt.announce_first(signum, "the workers stop after the same step and save a checkpoint")

    def stop_now(self, signum: int) -> None:
        """Second signal (or a stage with nothing to save, or workers not yet up): kill every worker and raise."""
        workers = self._workers
        up = workers is None or not workers.processes or workers.started()  # (XLA replicas are not tracked)
        self._kill()
        raise TrainingInterrupted(f"{interrupt.signal_name(signum)}: the workers were stopped at once"
                                  + ("" if up else " (they had not started the run yet)")
                                  + "; nothing was saved by this interruption.")

    def missing_result(self, strategy: Strategy) -> Any:
        """What to return when no worker of this host wrote a result (global zero runs on another host)."""
        raise WorkerError("the workers ended without the global-zero worker returning its result.")

    def launch(self, strategy: Strategy, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Pickle the run into a file of a private temporary folder, start the workers (each reads the file),
        watch them, and return the global-zero worker's result."""
        remove_stale_temp_dirs()
        payload = self.payload(strategy, function, args, kwargs)
        self._block = interrupt.shared_block(self.num_processes) if self.shares_memory else None
        self._deadline = None
        stage = strategy.run_context.stage
        with tempfile.TemporaryDirectory(prefix=f"{self.temp_prefix}{os.getpid()}-") as tmp:
            folder = Path(tmp)
            run_path, result_path = folder / "run.pkl", folder / "result.pt"
            run_path.write_bytes(payload)  # a file, not the start pipe: a dead worker cannot block the writer
            del payload
            timeout = getattr(strategy, "collective_timeout_s", None)
            # the step a worker last finished, named with a stopped worker (workers record it while fitting)
            progress = interrupt.StopControl(self._block) if self._block is not None and stage == "fit" else None
            self._workers = WorkerProcesses(
                folder, self.start_method, stopped_limit_s=None if timeout is None else timeout + STOPPED_MARGIN_S,
                step_of=None if progress is None else progress.step_of, collective_timeout_s=timeout)
            try:
                with interrupt.handle_signals(lambda s: self.stop_gracefully(s, stage), self.stop_now):
                    self.start(worker_entry, (str(run_path), str(result_path), self._block), self.num_processes)
            except WorkerError as exc:
                name = strategy.name or type(strategy).__name__
                raise WorkerError(f"strategy {name!r}: {exc}") from exc.__cause__
            finally:
                self._workers = None  # the ended processes are forgotten
            if not result_path.is_file():
                return self.missing_result(strategy)
            return torch.load(result_path, weights_only=False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_processes={self.num_processes})"


def worker_entry(index: int, payload: bytes | str, result_path: str, block: interrupt.Block | None = None) -> None:
    """Body of one spawned worker: unpickle a private copy of the run (``payload``: the pickled bytes, or the path
    of the file holding them), let the strategy set up this process
    (:meth:`~accelkit.Strategy.worker_init`), run the work, and, on global zero, write the result atomically.

    A terminal's Ctrl-C reaches every process of its group: workers ignore SIGINT and leave the decision to the
    launching process, which shares ``block`` (see :mod:`accelkit.strategies.launchers.interrupt`) with them."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, _exit_on_sigterm)  # exit through finally/atexit: temp files go too
    if isinstance(payload, str):
        payload = Path(payload).read_bytes()
    strategy, function, args, kwargs = pickle.loads(payload)
    del payload
    strategy.worker_init(index)
    with interrupt.active(interrupt.StopControl(block, index)):
        result = function(*args, **kwargs)
    if strategy.global_rank == 0:
        ckpt.atomic_save(result, result_path)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


#: a launcher's temporary folder: ``{temp_prefix}{pid of the launching process}-{random}``; every launcher's
#: :attr:`SpawnLauncher.temp_prefix` starts with ``accelkit-`` and ends with ``-``
_TEMP_DIR = re.compile(r"accelkit-[a-z][a-z0-9_-]*?-(\d+)-")


def remove_stale_temp_dirs(root: str | None = None) -> list[Path]:
    """Remove the result folders of earlier launches whose launching process is gone (killed with ``-9``, say);
    their names carry the launching process's id. Returns what was removed."""
    removed = []
    base = Path(root or tempfile.gettempdir())
    for path in base.glob("accelkit-*-*"):
        match = _TEMP_DIR.match(path.name)
        if match is None or int(match.group(1)) == os.getpid() or process_alive(int(match.group(1))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def share_cores(num_processes: int) -> None:
    """Give each of ``num_processes`` workers its share of the host's cores, unless ``OMP_NUM_THREADS`` says.

    N workers each running as many intra-op threads as there are cores oversubscribe the host; while one waits in
    a collective its threads spin and starve the others (40x slower steps seen with gloo on 2 cores). torchrun
    sets ``OMP_NUM_THREADS`` for the same reason."""
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(worker_threads(num_processes))


def worker_threads(num_processes: int) -> int:
    """The intra-op threads each of ``num_processes`` workers will run
    (:func:`~accelkit.strategies.launchers.share_cores`, or ``OMP_NUM_THREADS``; an unreadable value counts as more
    than one)."""
    value = os.environ.get("OMP_NUM_THREADS")
    if value is None:
        return max(1, (os.cpu_count() or 1) // max(1, num_processes))
    return int(value) if value.strip().isdigit() else 2


def native_threads() -> int | None:
    """The threads of this process that Python did not start (``None`` where ``/proc`` cannot tell)."""
    try:
        return len(os.listdir("/proc/self/task")) - threading.active_count()
    except OSError:
        return None


#: :func:`native_threads` when accelkit was imported: torch's own (usually before any parallel tensor operation)
NATIVE_THREADS_AT_IMPORT = native_threads()


def intra_op_pool_started() -> bool:
    """Whether this process probably runs torch's intra-op thread pool (OpenMP's worker threads, started by the
    first parallel tensor operation): more native threads than torch starts by itself. A child forked from such a
    process hangs in its first parallel operation with more than one thread (OpenMP is not fork-safe)."""
    now = native_threads()
    if now is None:
        return False
    baseline = 1 if NATIVE_THREADS_AT_IMPORT is None else min(NATIVE_THREADS_AT_IMPORT, 1)
    return now > baseline
