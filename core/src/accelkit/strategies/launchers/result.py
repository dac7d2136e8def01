"""What a worker sends back to the process that called ``fit``/``validate``/``test``/``predict``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class WorkerResult:
    """The outcome of one stage in the global-zero worker, on the CPU.

    Strategies that start workers of their own (``ddp_spawn``, ``xla_spawn``) return the global-zero worker's
    result from :meth:`~accelkit.Strategy.launch`; the Trainer then copies it into the caller's objects.

    :param result: what the stage returns (metrics of ``validate``/``test``, predictions, ``None`` for fit).
    :param state_dict: the trained weights (``fit`` in a spawned worker; ``None`` otherwise).
    :param training_state: optimizer, scheduler and precision state (``fit`` in a spawned worker).
    :param callback_metrics: ``trainer.callback_metrics`` at the end.
    :param logged_metrics: ``trainer.logged_metrics`` at the end.
    :param progress_bar_metrics: ``trainer.progress_bar_metrics`` at the end.
    :param current_epoch: epochs completed.
    :param global_step: optimizer steps taken.
    :param batches_that_stepped: training batches that stepped (the loggers' step, ``Progress.batches_that_stepped``).
    :param callback_states: each callback's ``state_dict()`` by its ``state_key`` (best checkpoint paths...).
    :param should_stop: whether a callback or the module asked to stop.
    :param interrupted: set when SIGINT/SIGTERM stopped ``fit``: the line saying where it stopped, where the state
        was saved and how to resume (the caller then raises :class:`~accelkit.errors.TrainingInterrupted`).
    :param stop_reason: why ``fit`` stopped, as the worker's fit loop saw it (``"max_epochs=20 reached"``...).
    """

    result: object = None
    state_dict: dict[str, object] | None = None
    training_state: dict[str, object] | None = None
    callback_metrics: dict[str, object] = field(default_factory=dict)
    logged_metrics: dict[str, object] = field(default_factory=dict)
    progress_bar_metrics: dict[str, float] = field(default_factory=dict)
    current_epoch: int = 0
    global_step: int = 0
    batches_that_stepped: int = 0
    callback_states: dict[str, dict[str, object]] = field(default_factory=dict)
    should_stop: bool = False
    interrupted: str | None = None
    stop_reason: str | None = None
