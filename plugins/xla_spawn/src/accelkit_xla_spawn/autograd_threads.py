"""XLA backward passes in a process whose autograd engine started before torch_xla was imported.

PyTorch's autograd engine sizes its per-device worker queues once, at the first backward pass of the process,
from the device types registered then. torch_xla registers the XLA device when it is imported, so after a CPU
backward pass (a quick CPU training, a test, a CPU ``Trainer.fit``) every backward pass on an XLA tensor fails
with ``0 <= device.index() && device.index() < ... device_ready_queues_.size() INTERNAL ASSERT FAILED``
(pytorch/xla#4174): the engine has no queue for the XLA device.

The engine does not need one: with autograd's multithreading off (``torch.autograd.set_multithreading_enabled
(False)``, a per-thread setting) a backward pass runs in the thread that calls it, on the CPU queue every engine
has. :func:`autograd_for_xla` tries a one-element backward pass on the device (traced only, never executed) and,
when the engine refuses it, turns multithreading off for the calling thread; the XLA strategies do this when
they set up and restore the setting at teardown. A run in a fresh process keeps autograd's default.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

#: what the strategies say when even the single-threaded backward pass fails (the original error is chained)
STALE_ENGINE_MESSAGE = (
    "a backward pass on the XLA device fails in this process: PyTorch's autograd engine started its device queues "
    "before torch_xla was imported (a backward pass on the CPU ran first in this process), so it has none for the "
    "XLA device, and running the backward pass in the calling thread did not help either. Run the XLA training in "
    "a fresh process (a separate script, or subprocess/multiprocessing with the 'spawn' start method), or import "
    "torch_xla before the first backward pass of the process."
)


def _probe(device: Any) -> None:
    """A one-element backward pass on ``device``: traced, never run (nothing is synced)."""
    # grad on whatever the caller's mode (not ``inference_mode(False)``: it would switch multithreading back on)
    with torch.enable_grad():
        leaf = torch.zeros((), device=device, requires_grad=True)
        (leaf * 2.0).backward()


def autograd_for_xla(device: Any) -> contextlib.ExitStack | None:
    """Make backward passes on ``device`` work in the calling thread.

    Returns ``None`` when autograd already handles the device (the usual case: torch_xla was imported before
    the first backward pass of the process). Otherwise returns an open :class:`contextlib.ExitStack` that keeps
    autograd's multithreading off for this thread; close it to restore the previous setting. Raises
    ``RuntimeError`` (:data:`STALE_ENGINE_MESSAGE`, chained to the engine's error) when neither works.
    """
    try:
        _probe(device)
        return None
    except RuntimeError as first:
        failure = first
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autograd.set_multithreading_enabled(False))
    try:
        _probe(device)
    except RuntimeError:
        stack.close()
        raise RuntimeError(STALE_ENGINE_MESSAGE) from failure
    return stack
