"""Stopping a run on SIGINT/SIGTERM at a consistent point.

The first signal asks the run to stop: every process finishes the same training step, a checkpoint of that state
is written, and ``fit`` raises :class:`~accelkit.errors.TrainingInterrupted` with one line saying where it stopped
and how to resume. A second signal stops at once.

With a :class:`~accelkit.strategies.launchers.spawn.SpawnLauncher`, the signal reaches the launching process (a
terminal's Ctrl-C
reaches the workers too; they ignore it). The launcher and its workers share a small block of memory: each worker
writes its step there after every batch, and on a signal the launcher writes the step at which all of them stop
(two steps past the furthest, so no worker has passed it: data-parallel workers stay within one step of each other).
Reading it costs a memory load per batch, no collective.

A stop is bounded: a run that has not reached the agreed step :data:`STOP_GRACE_S` seconds after the first signal
(a step that is still compiling, a loader that hangs) is stopped without saving, and the error says so, before a
scheduler's pre-emption grace runs out and it kills the processes with nothing said.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType
from typing import Protocol

#: slots of the shared block: [requested (0/1), stop at step, signal number, step of worker 0, worker 1, ...]
_REQUESTED, _STOP_AT, _SIGNAL, _PROGRESS = 0, 1, 2, 3
_NAMES: dict[int, str] = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}
#: seconds a run gets after the first SIGINT/SIGTERM to reach a consistent step and save it, before it is stopped
#: without saving: within the 30 s that schedulers wait between SIGTERM and SIGKILL by default (Kubernetes'
#: ``terminationGracePeriodSeconds``, SLURM's ``KillWait``), with 15 s left to exit (after a compilation cut short the
#: interpreter's own exit took up to 9 s on a loaded 2-core machine: ``benchmarks/sigterm_compile.py``)
STOP_GRACE_S = 15.0
#: modules whose frames on the main thread's stack mean the step is being compiled (``torch.compile``)
_COMPILER_MODULES = ("torch._dynamo", "torch._inductor", "torch._functorch")


class Block(Protocol):
    """The integer slots a stop request is kept in: a ``multiprocessing`` array shared with the launcher
    (:func:`shared_block`), or a list for a process's own."""

    def __getitem__(self, index: int, /) -> int: ...

    def __setitem__(self, index: int, value: int, /) -> None: ...


def signal_name(signum: int) -> str:
    """``"SIGINT"``/``"SIGTERM"`` for the signals a run stops on; ``"signal N"`` for others."""
    return _NAMES.get(signum, f"signal {signum}")


class StopControl:
    """The stop request one process sees: either its own (in place) or the block it shares with its launcher.

    :param block: a ``multiprocessing`` integer array without a lock (shared with the launcher), or ``None`` for a
        private one.
    :param index: this worker's slot for its progress (its local index).
    """

    def __init__(self, block: Block | None = None, index: int = 0) -> None:
        self.block: Block = block if block is not None else [0] * (_PROGRESS + index + 1)
        self.index = index
        #: ``report(global_step)`` records this process's step (after every batch): one store into the block, with
        #: no Python function of its own (the training loop calls it every batch)
        self.report: Callable[[int], object] = functools.partial(operator.setitem, self.block, _PROGRESS + index)
        #: ``pending()``: whether a stop was asked for, as ``0``/``1``, with no Python function of its own either (the
        #: training loop reads it every batch, and asks :meth:`due` only once it is set)
        self.pending: Callable[[], object] = functools.partial(operator.getitem, self.block, _REQUESTED)

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for (cheap: one memory read)."""
        return bool(self.block[_REQUESTED])

    @property
    def signal_name(self) -> str:
        """``"SIGINT"``/``"SIGTERM"`` of the request."""
        return signal_name(self.block[_SIGNAL])

    def step_of(self, index: int) -> int:
        """The step worker ``index`` last recorded (:meth:`report`)."""
        return int(self.block[_PROGRESS + index])

    def due(self, global_step: int) -> bool:
        """Whether this process should stop now, at ``global_step``: a stop was requested and every process has
        reached the step agreed on."""
        return bool(self.block[_REQUESTED]) and global_step >= self.block[_STOP_AT]

    def request(self, signum: int, workers: int = 1) -> None:
        """Ask to stop: at the next batch end in place; two steps past the furthest worker across processes."""
        furthest = max(self.block[_PROGRESS + i] for i in range(workers))
        self.block[_SIGNAL] = int(signum)
        self.block[_STOP_AT] = furthest + (2 if workers > 1 else 0)
        self.block[_REQUESTED] = 1


_current: StopControl | None = None


def current() -> StopControl | None:
    """The stop control of the run executing in this process (``None`` outside a run started by a launcher)."""
    return _current


@contextlib.contextmanager
def active(control: StopControl) -> Iterator[StopControl]:
    """Make ``control`` the one :func:`current` returns while the run executes."""
    global _current
    previous, _current = _current, control
    try:
        yield control
    finally:
        _current = previous


def shared_block(workers: int) -> Block:
    """A zeroed block the launcher shares with ``workers`` spawned processes."""
    import multiprocessing

    return multiprocessing.get_context("spawn").Array("q", _PROGRESS + workers, lock=False)


@contextlib.contextmanager
def handle_signals(on_first: Callable[[int], object], on_second: Callable[[int], object]) -> Iterator[None]:
    """While the block runs, the first SIGINT/SIGTERM calls ``on_first(signum)`` and the next one
    ``on_second(signum)``. Nothing is installed outside the main thread (signals only reach that one)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)
        (on_first if len(seen) == 1 else on_second)(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


def doing(frame: FrameType | None) -> str:
    """What the main thread was doing at ``frame`` (a signal handler's frame), for a stop message:
    ``" (it was compiling the step with torch.compile)"`` when a frame of torch's compiler is on its stack, else
    ``""``."""
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith(_COMPILER_MODULES):
            return " (it was compiling the step with torch.compile)"
        frame = frame.f_back
    return ""


class Deadline:
    """Stops the run in this process (the main thread) ``seconds`` after :meth:`arm` unless the block ends first:
    a ``SIGALRM`` timer whose handler raises :class:`~accelkit.errors.TrainingInterrupted`, saying that nothing
    was saved and what the process was doing (:func:`doing`). Used as a context manager, whose exit disarms it and
    gives ``SIGALRM`` its former handler back, and lets that error be the one raised when code it went through
    raised another while unwinding (torch 2.9's compiler raises ``UnboundLocalError`` when its compilation is cut
    short); outside the main thread, :meth:`arm` does nothing.

    :param seconds: the grace (:data:`STOP_GRACE_S` by default).
    """

    def __init__(self, seconds: float = STOP_GRACE_S) -> None:
        self.seconds = seconds
        self._previous: Callable[[int, FrameType | None], object] | int | None = None
        self._armed = False
        #: the error raised when the grace ran out (``None`` until then)
        self.fired: BaseException | None = None

    def arm(self, signum: int) -> None:
        """Start the countdown after signal ``signum`` (named in the error)."""
        if self._armed or threading.current_thread() is not threading.main_thread():
            return
        seconds = self.seconds

        def expired(alarm: int, frame: FrameType | None) -> None:
            from accelkit.errors import TrainingInterrupted

            self.fired = TrainingInterrupted(
                f"{signal_name(signum)}: the run did not reach the end of a step within {seconds:g} s of the signal"
                f"{doing(frame)}, so it was stopped there; nothing was saved by this interruption. Resume from its "
                "last checkpoint.")
            raise self.fired

        self._previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        self._armed = True

    def disarm(self) -> None:
        """Cancel the countdown, if armed, and restore the former ``SIGALRM`` handler."""
        if self._armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)
            self._armed = False

    def __enter__(self) -> Deadline:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.disarm()
        if self.fired is not None and error is not None and error is not self.fired:
            raise self.fired from error  # another error replaced it on the way out: the stop is what happened


def announce_first(signum: int, how: str) -> None:
    """The line printed when the first signal arrives."""
    print(f"\naccelkit: {signal_name(signum)} received: {how}; press Ctrl-C again to stop at once.",
          file=sys.stderr, flush=True)
