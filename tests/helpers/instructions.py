"""Python instructions a call runs: a deterministic measure of the loops' own cost (unlike a clock on a loaded
machine), counted with ``benchmarks/bench_trainer.py``'s :class:`OpcodeCounter`."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def opcode_counter() -> Any:
    """A fresh ``bench_trainer.OpcodeCounter`` (imported from ``benchmarks/``)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from bench_trainer import OpcodeCounter
    finally:
        sys.path.remove(str(BENCHMARKS))
    return OpcodeCounter()


def instructions(call: Callable[[], Any], within: str = "") -> int:
    """The Python instructions ``call()`` runs in functions whose file path contains ``within`` (all: ``""``).

    The cyclic garbage collector is off during the call: a collection it happened to start there would run the
    finalizers and weak-reference callbacks of objects other tests of the same worker left behind, counted as the
    call's (one way a count can differ with the tests run before it in the same process)."""
    counter, previous, collecting = opcode_counter(), sys.gettrace(), gc.isenabled()
    gc.disable()
    counter.install()
    counter.counting = True
    try:
        call()
    finally:
        counter.counting = False
        sys.settrace(previous)
        if collecting:
            gc.enable()
    return sum(n for code, n in counter.by_code.items() if within in code.co_filename)
