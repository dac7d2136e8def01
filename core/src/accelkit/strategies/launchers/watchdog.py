"""Say which rank holds a distributed run up, instead of waiting silently.

Each process of a ``torch.distributed`` run notes what it is doing in a module-level slot (:func:`mark`: the step,
the batch and a phase such as ``"training_step"`` or ``"barrier 'save_checkpoint'"``; a few attribute writes per
batch). A daemon thread publishes that note to the process group's key-value store when it changes (at most once a
second). When this process has made no progress for :attr:`Watchdog.warn_after_s`, the thread reads every rank's
note and prints one diagnosis naming the ranks that are behind, what each rank is doing and for how long. When the
collective timeout (``Trainer(collective_timeout=...)``) ends the run, the same diagnosis is attached to the error.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

#: phases in which a process waits for the others (a collective); anything else is the process's own work
WAITING_PREFIXES = ("backward", "barrier", "reduce", "all_gather", "broadcast", "setup")

_state: dict[str, Any] = {"step": 0, "batch": -1, "phase": "setup", "since": time.time()}


def mark(phase: str, step: int | None = None, batch: int | None = None) -> None:
    """Note what this process is doing now (cheap: called in the training loop)."""
    state = _state
    state["phase"] = phase
    if step is not None:
        state["step"] = step
    if batch is not None:
        state["batch"] = batch
    state["since"] = time.time()


def phase() -> str:
    """The phase last noted by :func:`mark`."""
    return _state["phase"]


class Watchdog:
    """The thread that publishes this rank's note and diagnoses stalls (see the module docstring).

    :param store: the process group's ``torch.distributed.Store``.
    :param rank: this process's global rank.
    :param world_size: number of processes.
    :param timeout_s: the collective timeout (reported in the diagnosis).
    :param warn_after_s: seconds without progress before the diagnosis is printed.
    """

    def __init__(self, store: Any, rank: int, world_size: int, timeout_s: float, warn_after_s: float) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size
        self.timeout_s, self.warn_after_s = timeout_s, warn_after_s
        self.last_diagnosis = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="accelkit-watchdog", daemon=True)

    def start(self) -> Watchdog:
        """Start the thread; returns ``self``."""
        mark("setup")
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (at teardown)."""
        self._stop.set()
        self._thread.join(timeout=15)  # a store call in flight ends within its 5 s timeout

    def _key(self, rank: int) -> str:
        return f"accelkit/watchdog/{rank}"

    def _run(self) -> None:
        published, warned_for = None, None
        while not self._stop.wait(1.0):
            note = (_state["step"], _state["batch"], _state["phase"], _state["since"])
            try:
                if note != published:
                    self.store.set(self._key(self.rank), json.dumps(note))
                    published = note
                if time.time() - note[3] >= self.warn_after_s and warned_for != note:
                    warned_for = note
                    self.last_diagnosis = self.diagnose()
                    print(f"accelkit watchdog (rank {self.rank}): {self.last_diagnosis}", file=sys.stderr,
                          flush=True)
            except Exception:  # noqa: BLE001 - the store is gone (the run ended, or a rank died): stop quietly
                return

    def notes(self) -> dict[int, tuple[int, int, str, float] | None]:
        """Every rank's last published note (``None`` for a rank that never published one)."""
        found: dict[int, Any] = {}
        keys = [self._key(r) for r in range(self.world_size)]
        try:
            present = self.store.check(keys)
        except Exception:  # noqa: BLE001 - some stores lack check(): ask key by key
            present = False
        for rank, key in enumerate(keys):
            try:
                if present or self.store.check([key]):
                    found[rank] = tuple(json.loads(self.store.get(key)))
                else:
                    found[rank] = None
            except Exception:  # noqa: BLE001 - a key that cannot be read is reported as unknown
                found[rank] = None
        return found

    def diagnose(self) -> str:
        """One paragraph: which ranks are behind, and what every rank is doing, for how long."""
        notes = self.notes()
        notes[self.rank] = (_state["step"], _state["batch"], _state["phase"], _state["since"])
        now = time.time()
        known = {r: n for r, n in notes.items() if n is not None}
        silent = sorted(r for r, n in notes.items() if n is None)
        working = sorted(r for r, n in known.items() if not str(n[2]).startswith(WAITING_PREFIXES))
        phases = {str(n[2]) for n in known.values()}
        if working or silent:
            behind = sorted(set(working) | set(silent))
            head = (f"rank{'s' if len(behind) > 1 else ''} {', '.join(map(str, behind))} "
                    f"{'are' if len(behind) > 1 else 'is'} behind (not in a collective); the others wait for "
                    f"{'them' if len(behind) > 1 else 'it'}")
        elif len(phases) > 1:
            head = ("the ranks wait in different collectives: one was called on some ranks only, or the ranks run "
                    "different numbers of steps")
        else:
            lowest = min((n[0], n[1]) for n in known.values()) if known else None
            behind = sorted(r for r, n in known.items() if (n[0], n[1]) == lowest)
            head = (f"every rank waits in {phases.pop() if phases else 'a collective'}"
                    + (f"; ranks {', '.join(map(str, behind))} are at an earlier step" if len(behind) < len(known)
                       else " at the same step (a network or device problem?)"))
        lines = []
        for rank in sorted(notes)[:16]:
            note = notes[rank]
            if note is None:
                lines.append(f"rank {rank}: no report (not started, or stuck before its first step)")
            else:
                step, batch, what, since = note
                lines.append(f"rank {rank}: step {step}, batch {batch}, in {what} for {now - since:.0f} s")
        return (f"no progress for {self.warn_after_s:.0f} s: {head}. " + "; ".join(lines)
                + f". The run fails when the collective timeout ({self.timeout_s:.0f} s, "
                "Trainer(collective_timeout=...)) ends.")


_active: Watchdog | None = None


def start(store: Any, rank: int, world_size: int, timeout_s: float) -> Watchdog | None:
    """Start the watchdog of this process (warning after a tenth of the timeout, at least 10 s, at most 120 s)."""
    global _active
    if store is None or world_size <= 1:
        return None
    _active = Watchdog(store, rank, world_size, timeout_s, warn_after_s=min(120.0, max(10.0, timeout_s / 10))).start()
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


def explain(exc: BaseException) -> None:
    """Attach the latest diagnosis to ``exc`` (a collective timeout, say) as a note, when the watchdog has one."""
    watchdog = _active
    if watchdog is None:
        return
    try:
        text = watchdog.diagnose()
    except Exception:  # noqa: BLE001 - the store may be gone with the failed collective
        text = watchdog.last_diagnosis
    if text and hasattr(exc, "add_note"):
        exc.add_note(f"accelkit watchdog (rank {watchdog.rank}): {text}")
