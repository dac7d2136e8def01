"""Say which rank holds a distributed run up, instead of waiting silently.

Each process of a ``torch.distributed`` run notes what it is doing in a module-level record written in place
(:func:`mark`: the step, the batch, a phase such as ``"validation"`` or ``"barrier 'save_checkpoint'"`` and since
when; the training loop calls :func:`mark_step` once per batch, one slice assignment). The backward pass, where
data parallel waits for the other ranks' gradients, costs no note at all: while the step's phase is
``"training_step"``, the watchdog reads ``"backward"`` when the training thread is inside
``torch.autograd.backward`` (its stack, looked at once a second; a failure's traceback after a collective fails).
A daemon thread publishes that note, with the time it was published, to the process group's key-value
store once a second. When this process has made no progress for ``warn_after_s``, the thread reads
every rank's note and prints one diagnosis naming the ranks that are behind or that stopped reporting, what each
rank is doing and for how long. When a collective fails (the collective timeout, ``Trainer(collective_timeout=...)``,
or a lost peer), the same diagnosis is attached to the error.

Every store call of the watchdog is bounded (:data:`STORE_TIMEOUT_S`): the store lives in one process (rank 0's,
or the launcher's), and a call to a process that is stopped or frozen would otherwise never return. A diagnosis
that cannot be read in time says so instead. A call given up on still runs in its thread; the end of the run
(:func:`stop`, also run at interpreter exit) waits up to :data:`SETTLE_S` for it, because a store call returning
while the interpreter shuts down aborts the process on Python 3.11 ("terminate called without an active
exception"), turning a finished run into a failed one.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from accelkit.utilities.processes import process_stopped

if TYPE_CHECKING:
    from torch.distributed import Store

_T = TypeVar("_T")

#: phases in which a process waits for the others (a collective); anything else is the process's own work
WAITING_PREFIXES = ("backward", "barrier", "reduce", "all_gather", "broadcast", "setup")
#: seconds a store call of the watchdog may take before it is given up (the store's process does not answer)
STORE_TIMEOUT_S = 5.0
#: the name of the thread each store call of the watchdog runs in
STORE_CALL_THREAD = "accelkit-watchdog-store"
#: seconds the end of a run waits for a store call of the watchdog that was given up on but still runs
SETTLE_S = 10.0
#: seconds between two reports of a rank; a rank whose last report is older than ``SILENT_AFTER_S`` has
#: stopped reporting (its process is stopped, frozen or gone: a live process's thread reports on time)
REPORT_EVERY_S = 1.0
SILENT_AFTER_S = 5.0

#: the phase of a training step (:func:`mark_step`); read as :data:`BACKWARD` while its backward pass runs
STEP_PHASE = "training_step"
#: the phase reported while the training thread is inside ``torch.autograd.backward`` during a training step
BACKWARD = "backward"

_time = time.time
#: this process's note: step, batch, phase, since. One list, written in place by whole-slice assignments and read
#: whole (``tuple(_note)``): each is one step of the interpreter, so the watchdog thread never reads half a note.
_note: list[Any] = [0, -1, "setup", time.time()]  # (a record kept in a list: see above)
#: a rank's note as published (:meth:`Watchdog.own_note`): step, batch, phase, since, published at, pid, host
Note = tuple[int, int, str, float, float, int, str]
#: the note's whole slice, built once (:func:`mark_step` runs every batch)
_WHOLE = slice(None)


def mark(phase: str, step: int | None = None, batch: int | None = None) -> None:
    """Note what this process is doing now (``step`` and ``batch`` kept where not given)."""
    note = _note
    note[:] = (note[0] if step is None else step, note[1] if batch is None else batch, phase, _time())


def mark_step(step: int, batch: int) -> None:
    """Note that this process runs the training step of batch ``batch`` at optimizer step ``step`` (the training
    loop's one note per batch; its backward pass is seen without a note, see the module's docstring)."""
    _note[_WHOLE] = step, batch, STEP_PHASE, _time()


def phase() -> str:
    """The phase last noted by :func:`mark` or :func:`mark_step`."""
    return _note[2]


def _backward_code() -> CodeType:
    import torch.autograd

    return torch.autograd.backward.__code__


def in_backward(frame: FrameType | None) -> bool:
    """Whether the stack that ``frame`` tops runs ``torch.autograd.backward`` (a backward pass: where data
    parallel all-reduces the gradients)."""
    code = _backward_code()
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def raised_in_backward(exc: BaseException) -> bool:
    """Whether ``exc`` came out of ``torch.autograd.backward`` (its traceback passes through it)."""
    code, tb = _backward_code(), exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return True
        tb = tb.tb_next
    return False


def waiting(what: str) -> bool:
    """Whether the phase ``what`` is a wait for the other ranks (a collective)."""
    return str(what).startswith(WAITING_PREFIXES)


class StoreNotAnswering(TimeoutError):
    """A store call of the watchdog did not return within :data:`STORE_TIMEOUT_S`."""


class BoundedStore:
    """Calls to a ``torch.distributed.Store`` that give up after ``timeout_s``: each runs in a daemon thread, and
    while one has not returned (the store's process is stopped) the next fails at once instead of queueing
    behind it.

    :param store: the store.
    :param timeout_s: seconds a call may take.
    """

    def __init__(self, store: Store, timeout_s: float = STORE_TIMEOUT_S) -> None:
        self.store, self.timeout_s = store, timeout_s
        self._lock = threading.Lock()
        self._pending: threading.Thread | None = None

    def call(self, fn: Callable[[Store], _T]) -> _T:
        """``fn(store)``, or :class:`StoreNotAnswering` after ``timeout_s`` (an exception of ``fn`` is raised)."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn(self.store)
            except BaseException as exc:  # noqa: BLE001 - carried to the caller
                box["error"] = exc

        with self._lock:
            if self._pending is not None and self._pending.is_alive():
                raise StoreNotAnswering("an earlier call to the store has not returned")
            self._pending = thread = threading.Thread(target=run, name=STORE_CALL_THREAD, daemon=True)
            thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            raise StoreNotAnswering(f"the store did not answer within {self.timeout_s:.0f} s")
        if "error" in box:
            raise box["error"]
        return box["value"]  # (there: run() ended without an error)

    def settle(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a call given up on that still runs; whether none runs now."""
        with self._lock:
            pending = self._pending
        if pending is not None:
            pending.join(timeout_s)
        return pending is None or not pending.is_alive()


def _set(store: Store, key: str, text: str) -> None:
    store.set(key, text)


class Watchdog:
    """The thread that publishes this rank's note and diagnoses stalls (see the module docstring).

    :param store: the process group's ``torch.distributed.Store``.
    :param rank: this process's global rank.
    :param world_size: number of processes.
    :param timeout_s: the collective timeout (reported in the diagnosis).
    :param warn_after_s: seconds without progress before the diagnosis is printed.
    :param store_owner: the rank whose process keeps the store (``None``: a launcher's process keeps it).
    """

    def __init__(self, store: Store, rank: int, world_size: int, timeout_s: float, warn_after_s: float,
                 store_owner: int | None = 0) -> None:
        self.store, self.rank, self.world_size = BoundedStore(store), rank, world_size
        self.timeout_s, self.warn_after_s, self.store_owner = timeout_s, warn_after_s, store_owner
        self.last_diagnosis = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="accelkit-watchdog", daemon=True)
        self._where = (os.getpid(), socket.gethostname())
        #: the thread that trains (the one that starts the watchdog), whose stack says when it is in backward
        self.training_thread = threading.get_ident()
        # when the training thread's stack was last looked at, and the backward pass last seen: (step, batch, since)
        self._looked_at = time.time()
        self._backward_seen: tuple[int, int, float] | None = None

    def start(self) -> Watchdog:
        """Start the thread; returns ``self``."""
        mark("setup")
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (at teardown)."""
        self._stop.set()
        self._thread.join(timeout=STORE_TIMEOUT_S + 2)  # every store call of the thread ends within its timeout
        if not self.store.settle(SETTLE_S):
            print(f"accelkit watchdog (rank {self.rank}): a call to the run's store given up on has not returned "
                  f"after {SETTLE_S:.0f} s more: the store's process does not answer. If it answers while this "
                  "process exits, Python may abort the process.", file=sys.stderr, flush=True)

    def _key(self, rank: int) -> str:
        return f"accelkit/watchdog/{rank}"

    def own_note(self, backward: bool | None = None) -> Note:
        """This rank's note as published: step, batch, phase, since, published at, pid, host. A training step in its
        backward pass (``backward``; ``None``: the training thread's stack says) reads :data:`BACKWARD`, since
        the first time it was seen there (no later than it began: the previous look, or the step's start)."""
        step, batch, what, since = tuple(_note)
        now = time.time()
        if what == STEP_PHASE:
            if backward is None:
                backward = in_backward(sys._current_frames().get(self.training_thread))
            if backward:
                seen = self._backward_seen
                if seen is None or seen[:2] != (step, batch):
                    self._backward_seen = seen = (step, batch, max(since, self._looked_at))
                what, since = BACKWARD, seen[2]
            self._looked_at = now
        return (step, batch, what, since, now, *self._where)

    def _run(self) -> None:
        warned_for, tick = None, time.monotonic()
        while not self._stop.wait(REPORT_EVERY_S):
            note, last_tick, tick = self.own_note(), tick, time.monotonic()
            if tick - last_tick > SILENT_AFTER_S:  # this process was itself stopped or frozen: no diagnosis now
                warned_for = note[:4]
            try:
                # functools.partial binds this round's key and note now: the call may outlive the round
                self.store.call(functools.partial(_set, key=self._key(self.rank), text=json.dumps(note)))
            except StoreNotAnswering:
                pass  # the store's process does not answer: the diagnosis below says so
            except Exception:  # noqa: BLE001 - the store is gone (the run ended, or a rank died): stop quietly
                return
            if time.time() - note[3] >= self.warn_after_s and warned_for != note[:4]:
                warned_for = note[:4]
                self.last_diagnosis = self.diagnose()
                print(f"accelkit watchdog (rank {self.rank}): {self.last_diagnosis}", file=sys.stderr, flush=True)

    def notes(self) -> dict[int, Note | None]:
        """Every rank's last published note (``None`` for a rank that never published one); raises
        :class:`StoreNotAnswering` when the store does not answer within :data:`STORE_TIMEOUT_S`."""
        return self.store.call(self._read_notes)

    def _read_notes(self, store: Store) -> dict[int, Note | None]:
        found: dict[int, Note | None] = {}
        keys = [self._key(r) for r in range(self.world_size)]
        try:
            present = store.check(keys)
        except Exception:  # noqa: BLE001 - some stores lack check(): ask key by key
            present = False
        for rank, key in enumerate(keys):
            try:
                if present or store.check([key]):
                    found[rank] = tuple(json.loads(store.get(key)))
                else:
                    found[rank] = None
            except Exception:  # noqa: BLE001 - a key that cannot be read is reported as unknown
                found[rank] = None
        return found

    def diagnose(self, failed: bool = False, backward: bool | None = None) -> str:
        """One paragraph saying what was observed: which ranks are behind or stopped reporting, and what every rank
        is doing, for how long (``failed``: written for the error of a failed collective, not as a warning;
        ``backward``: whether this rank's training step was in its backward pass, see :meth:`own_note`)."""
        now = time.time()
        own = self.own_note(backward)
        prefix = (f"when the collective failed, rank {self.rank} had waited {now - own[3]:.0f} s in {own[2]}"
                  if failed else f"no progress for {now - own[3]:.0f} s")
        try:
            notes = self.notes()
        except StoreNotAnswering as exc:
            keeper = f"rank {self.store_owner}'s process" if self.store_owner is not None else "the launcher"
            return (f"{prefix}; the other ranks' reports could not be read: the run's store, kept by {keeper}, "
                    f"does not answer ({exc}): that process is stopped, frozen or gone. The diagnosis was skipped."
                    + ("" if failed else self._ending()))
        notes[self.rank] = own
        return f"{prefix}: {_summary(notes, now)}. {_ranks(notes, now)}." + ("" if failed else self._ending())

    def _ending(self) -> str:
        return (f" The run fails when the collective timeout ({self.timeout_s:.0f} s, "
                "Trainer(collective_timeout=...)) ends.")


def _silent(note: Note | None, now: float) -> bool:
    """Whether a rank has stopped reporting (no note, or its last one is older than ``SILENT_AFTER_S``)."""
    return note is None or len(note) < 5 or now - note[4] > SILENT_AFTER_S


def _summary(notes: dict[int, Note | None], now: float) -> str:
    """The first sentence of a diagnosis: which ranks hold the others up, from what they reported."""
    silent = sorted(r for r, n in notes.items() if _silent(n, now))
    live = {r: n for r, n in notes.items() if n is not None and r not in silent}
    working = sorted(r for r, n in live.items() if not waiting(n[2]))
    if silent:
        stopped, never = [r for r in silent if notes[r] is not None], [r for r in silent if notes[r] is None]
        said = ([f"{_ranks_named(stopped)} stopped reporting"] if stopped else []) + (
            [f"{_ranks_named(never)} never reported"] if never else [])
        return f"{'; '.join(said)}; the others wait for {'them' if len(silent) > 1 else 'it'}"
    if working:
        return (f"{_ranks_named(working)} {'are' if len(working) > 1 else 'is'} behind (not in a collective); the "
                f"others wait for {'them' if len(working) > 1 else 'it'}")
    phases = sorted({str(n[2]) for n in live.values()})
    if len(phases) > 1:
        return f"the ranks are in different phases ({', '.join(phases)})"
    lowest = min((n[0], n[1]) for n in live.values())
    behind = sorted(r for r, n in live.items() if (n[0], n[1]) == lowest)
    if len(behind) < len(live):
        return f"every rank is in {phases[0]}; {_ranks_named(behind)} at an earlier step"
    return f"every rank is in {phases[0]} at the same step"


def _ranks_named(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _ranks(notes: dict[int, Note | None], now: float) -> str:
    """What each rank (the first 16) reported, and how long ago for a rank that stopped reporting."""
    lines = []
    for rank in sorted(notes)[:16]:
        note = notes[rank]
        if note is None:
            lines.append(f"rank {rank}: no report (not started, or stuck before its first report)")
            continue
        step, batch, what, since = note[:4]
        line = f"rank {rank}: step {step}, batch {batch}, in {what} for {now - since:.0f} s"
        if _silent(note, now):
            line = (f"rank {rank}: no report for {now - note[4]:.0f} s{_process_state(note)}; its last one: step "
                    f"{step}, batch {batch}, in {what}")
        lines.append(line)
    return "; ".join(lines)


def _process_state(note: Note) -> str:
    """`` (process N is stopped)`` where the rank's process runs on this machine and is seen stopped."""
    if len(note) >= 7 and note[6] == socket.gethostname() and process_stopped(int(note[5])):
        return f" (its process {note[5]} is stopped: SIGSTOP or SIGTSTP)"
    return f" (process {note[5]} on {note[6]})" if len(note) >= 7 else ""


_active: Watchdog | None = None


def start(store: Store | None, rank: int, world_size: int, timeout_s: float,
          store_owner: int | None = 0) -> Watchdog | None:
    """Start the watchdog of this process (warning after a tenth of the timeout, at least 10 s, at most 120 s);
    ``store_owner`` is the rank whose process keeps the store (``None``: a launcher's process)."""
    global _active
    if store is None or world_size <= 1:
        return None
    atexit.unregister(stop)  # registered once: a run that ends without its teardown still settles its store calls
    atexit.register(stop)
    _active = Watchdog(store, rank, world_size, timeout_s, warn_after_s=min(120.0, max(10.0, timeout_s / 10)),
                       store_owner=store_owner).start()
    return _active


def running() -> bool:
    """Whether this process's watchdog runs (a distributed run): only then do the loops note their phases."""
    return _active is not None


def stop() -> None:
    """Stop this process's watchdog, if one runs."""
    global _active
    if _active is not None:
        _active.stop()
        _active = None


def failed_in_collective(exc: BaseException) -> bool:
    """Whether ``exc`` came out of a collective (a collective timeout, a lost peer): an error of
    ``torch.distributed`` itself or raised inside its code (a sharded module's gathers), or, where this process's
    watchdog runs, one raised while it waited for the other processes (a phase of :data:`WAITING_PREFIXES` other
    than the set-up, or the backward pass of a step)."""
    import torch.distributed as dist

    if isinstance(exc, getattr(dist, "DistError", ())) or _raised_in_distributed(exc):
        return True
    if _active is None or phase() == "setup":
        return False
    return waiting(phase()) or phase() == STEP_PHASE and raised_in_backward(exc)


def _raised_in_distributed(exc: BaseException) -> bool:
    """Whether the innermost Python frame of ``exc``'s traceback is ``torch.distributed``'s code."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and str(tb.tb_frame.f_globals.get("__name__", "")).startswith("torch.distributed")


def explain(exc: BaseException) -> None:
    """Attach a diagnosis to ``exc`` as a note when it came out of a collective (a collective timeout, a lost
    peer): what every rank reported then. It takes at most :data:`STORE_TIMEOUT_S`; a failure in this rank's own
    work (its traceback says what happened) gets none."""
    watchdog = _active
    backward = phase() == STEP_PHASE and raised_in_backward(exc)
    if watchdog is None or not (backward or waiting(phase())) or phase() == "setup":
        return
    try:
        text = watchdog.diagnose(failed=True, backward=backward)
    except Exception:  # noqa: BLE001 - a diagnosis must not hide the error it explains
        text = watchdog.last_diagnosis
    if text and hasattr(exc, "add_note"):
        exc.add_note(f"accelkit watchdog (rank {watchdog.rank}): {text}")
