"""What one run holds: :class:`RunState`, owned by the Trainer (``trainer.run_state``) and read by the loops and
the Module. Nothing else keeps a run's objects: a new ``fit``/``validate``/``test``/``predict`` starts from a
fresh one (:meth:`RunState.begin`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accelkit.loops.metrics import MetricStore


@dataclass(eq=False)
class RunState:
    """The objects of the latest run of a Trainer, in the process running it.

    :ivar module: the user's :class:`~accelkit.Module` (kept after the run: ``trainer.lightning_module``).
    :ivar model: what the strategy made of it (a DDP wrapper, say); ``None`` outside a worker's run.
    :ivar metrics: what ``Module.log`` recorded, kept on the device until read (``MetricStore``).
    :ivar hooks: the ``HookCaller`` of the run.
    :ivar data: the ``DataConnector`` (the run's loaders and their sizes).
    :ivar publisher: the ``Publisher`` of logged values.
    :ivar optimization: the ``Optimization`` of a fit (``None`` otherwise).
    :ivar optimizers: the optimizers ``configure_optimizers`` returned, as the strategy set them up.
    :ivar schedulers: their :class:`~accelkit.module.optimizers.LRSchedulerConfig`.
    :ivar worker_training_state: optimizer/scheduler/precision state that spawned workers sent back (their
        optimizers stayed in the workers), for ``trainer.save_checkpoint`` in the caller.
    :ivar resume_position: where a resumed fit continues (:func:`accelkit.loops.resume.position`).
    :ivar epoch_training_done: the current epoch's training batches are all done (validation may still run).
    :ivar warned_unknown_hooks: the misspelled-hook warning was given once for this Trainer.
    :ivar stop_reason: why the latest fit stopped (``"max_epochs=20 reached"``, early stopping, a time limit...),
        as its fit loop saw it; ``None`` before a fit ended (see :mod:`accelkit.trainer.summary`).
    """

    module: Any = None
    model: Any = None
    metrics: MetricStore = field(default_factory=MetricStore)
    hooks: Any = None
    data: Any = None
    publisher: Any = None
    optimization: Any = None
    optimizers: list[Any] = field(default_factory=list)
    schedulers: list[Any] = field(default_factory=list)
    worker_training_state: Any = None
    resume_position: Any = None
    epoch_training_done: bool = False
    warned_unknown_hooks: bool = False
    stop_reason: str | None = None

    def begin(self, module: Any) -> None:
        """Start a run of ``module``: a fresh metric store; nothing of an earlier run's loop objects is kept."""
        self.module, self.metrics = module, MetricStore()
        self.optimization = None
        self.epoch_training_done = False
        self.stop_reason = None

    def __getstate__(self) -> dict[str, Any]:
        # sent to spawned workers with the Trainer: the loop objects of the caller's last run stay behind
        state = self.__dict__.copy()
        state.update(hooks=None, data=None, publisher=None, optimization=None)
        return state
