"""The loader the XLA strategies hand to the loops: torch_xla's background upload, closed when the loop ends.

torch_xla's ``MpDeviceLoader`` starts a ``ParallelLoader`` at every ``iter()``: two daemon threads, one reading
the DataLoader ahead (up to 16 batches), one copying batches to the device (up to 8 ahead). It stops them only
when the loader is exhausted or at its next ``iter()``. A loop that stops before the end of its loader (the
sanity check's two batches, ``limit_*_batches``, ``max_steps``, early stopping) therefore left both threads
running, still copying batches to the device, until the interpreter exited; one caught inside torch_xla's C++
code by the interpreter's shutdown ends the process with ``terminate called without an active exception``
(SIGABRT, exit 134) after the script's work had succeeded.

:class:`DeviceLoader` does the same upload with torch_xla's public ``ParallelLoader``, and stops its threads
(``ParallelLoader.close()``: the queues close, the threads are joined) as soon as the iteration ends, early or
not, and at the latest when :meth:`close` is called (the strategy's teardown does, for every loader it made).
Importing this module imports no torch_xla.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def halt(parallel: Any) -> None:
    """Stop a torch_xla ``ParallelLoader``'s threads without copying what they read ahead.

    ``ParallelLoader.close()`` alone lets its copy thread upload every batch still waiting in the host queue (up
    to 16) before it notices, work and device memory spent on batches nobody reads. So the host queues are
    closed and emptied first (torch_xla 2.x internals, checked on 2.9; where they are not found, the plain
    ``close()`` still stops the threads), then ``close()`` wakes and joins both threads.
    """
    queues = getattr(parallel, "_queues", None)
    if isinstance(queues, dict) and hasattr(parallel, "_done"):
        parallel._done = True  # the reading thread stops after the batch in hand
        for per_device in queues.values():
            host = getattr(per_device, "cpu_loader_queue", None)
            if host is None or not callable(getattr(host, "close", None)):
                continue
            host.close()  # puts are dropped from now on; get() returns what is left, then None
            while host.get() is not None:
                pass
    parallel.close()


class DeviceLoader:
    """Iterate ``loader`` with its batches already on ``device``, uploaded in the background by torch_xla.

    Like torch_xla's ``MpDeviceLoader`` (the graph is cut once per batch, tensors move and other objects in a
    batch pass through), but the upload threads of an iteration stop when it ends.

    :param loader: the DataLoader (or any iterable of batches) to upload from.
    :param device: the XLA device.
    :param parallel_loader_options: passed to ``torch_xla.distributed.parallel_loader.ParallelLoader``
        (``input_sharding``, ``loader_prefetch_size`` ...).
    """

    def __init__(self, loader: Any, device: Any, **parallel_loader_options: Any) -> None:
        self.loader = loader
        self.device = device
        self.parallel_loader_options = parallel_loader_options
        self._open: list[Any] = []  # ParallelLoaders whose threads may still run

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        import torch_xla.distributed.parallel_loader as pl

        self.close()  # a new pass: the previous one's threads stop first, as MpDeviceLoader does
        parallel = pl.ParallelLoader(self.loader, [self.device], **self.parallel_loader_options)
        self._open.append(parallel)
        return self._batches(parallel)

    def _batches(self, parallel: Any) -> Iterator[Any]:
        try:
            yield from parallel.per_device_loader(self.device)
        finally:  # exhausted, or the loop stopped early and dropped the iterator
            self._stop(parallel)

    def _stop(self, parallel: Any) -> None:
        if parallel in self._open:
            self._open.remove(parallel)
            halt(parallel)

    @property
    def running(self) -> int:
        """How many passes still have upload threads (0 once every iteration ended or :meth:`close` ran)."""
        return len(self._open)

    def close(self) -> None:
        """Stop the upload threads of every pass still open (joins them; they finish the batch in hand)."""
        for parallel in list(self._open):
            self._stop(parallel)

    def __repr__(self) -> str:
        return f"DeviceLoader({self.loader!r}, device={self.device})"
