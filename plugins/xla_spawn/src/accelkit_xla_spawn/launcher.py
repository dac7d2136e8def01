"""Starting XLA replicas: :class:`XLALauncher`, the core's spawn protocol started through ``torch_xla.launch``.

torch_xla is imported only at the moment of spawning, never when this module is imported.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from accelkit.errors import WorkerError
from accelkit.strategies.launchers import SpawnLauncher, WorkerResult
from accelkit_xla_spawn.removed_api import add_removed_api_hint, removed_api_hint
from accelkit_xla_spawn.runtime import RUNTIME_TOUCHED_MESSAGE, launch_failure_hint, xla_runtime_initialized


class XLALauncher(SpawnLauncher):
    """Starts one replica per local XLA device with ``torch_xla.launch`` (PJRT), using the core's spawn protocol
    (:class:`~accelkit.strategies.launchers.spawn.SpawnLauncher`): the run is pickled once here and each replica
    unpickles its
    own copy, so replicas share no Python state even where PJRT runs them as threads of one process.

    On a pod, hosts other than host 0 return an empty :class:`~accelkit.strategies.launchers.result.WorkerResult`:
    replica 0, on
    host 0, reports the run.
    """

    temp_prefix = "accelkit-xla-"
    #: ``torch_xla.launch`` pickles its arguments, which a shared-memory block does not survive: a signal stops
    #: the replicas at once
    shares_memory = False

    def __init__(self) -> None:
        super().__init__(num_processes=1)  # torch_xla decides: every local device

    def start(self, entry: Callable[..., None], args: tuple, num_processes: int) -> None:
        """``torch_xla.launch(entry, args)``; a failure names the replica's exception, with the torch_xla 1.x
        replacement or the PJRT CPU collectives note when one explains it."""
        from concurrent.futures.process import BrokenProcessPool

        import torch_xla  # imported at the moment of spawning; the runtime is not started here

        try:
            torch_xla.launch(_replica_entry, args=(entry, *args))
        except Exception as exc:  # noqa: BLE001 - any failure in a replica
            # the CPU collectives note explains a replica process that died (XLA's rendezvous aborts it), not an
            # exception a replica raised, nor one that names a torch_xla 1.x name
            aborted = isinstance(exc, BrokenProcessPool) and not removed_api_hint(exc)
            raise WorkerError(
                f"a replica failed: {type(exc).__name__}: {exc}."
                + (launch_failure_hint(os.environ, self._world_size) if aborted else "")
            ) from exc

    def launch(self, strategy: Any, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Refuse when this process already runs the XLA runtime, then spawn the replicas."""
        if xla_runtime_initialized():
            raise RuntimeError(RUNTIME_TOUCHED_MESSAGE)
        self._world_size = strategy.world_size
        return super().launch(strategy, function, *args, **kwargs)

    def missing_result(self, strategy: Any) -> Any:
        """Another host of a pod has replica 0: this host reports an empty result."""
        if strategy.node_rank != 0:
            return WorkerResult()
        return super().missing_result(strategy)


def _replica_entry(index: int, entry: Callable[..., None], *args: Any) -> None:
    """Body of one replica: the core's worker entry; an ``AttributeError``/``ImportError`` naming a torch_xla 1.x
    name that 2.x removed gets its replacement added to the message (same exception, re-raised)."""
    try:
        entry(index, *args)
    except (AttributeError, ImportError) as exc:
        add_removed_api_hint(exc)
        raise
