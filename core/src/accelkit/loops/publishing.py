"""From logged values to ``trainer.callback_metrics``, the loggers and ``trainer.progress_bar_metrics`` (what a
progress-bar callback shows)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from accelkit.trainer.trainer import Trainer


class Publisher:
    """Moves what the ``MetricStore`` holds to the Trainer's metric dicts and loggers.

    ``callback_metrics`` and ``logged_metrics`` hold scalar tensors: CPU ones, except per-step values that no
    logger read, which stay on the device until the epoch's end (as in Lightning); ``progress_bar_metrics`` holds
    floats.
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def log_step(self) -> None:
        """Read the per-step values (one host read each), log them, and hand the progress bar its values
        (``trainer.progress_bar_metrics``, which a bar reads without touching the device). Without a logger, as in
        Lightning, nothing but the progress bar's values is read: ``logged_metrics`` and ``callback_metrics`` get
        the logged tensors as they are (on the device until :meth:`to_host` at the epoch's end)."""
        trainer = self.trainer
        loggers = bool(trainer.loggers)
        logged, shown = trainer.run_state.metrics.read_step(to_host=loggers)
        if logged:
            if loggers:
                self._to_loggers(logged)
            tensors = _as_tensors(logged)
            trainer.logged_metrics.update(tensors)
            trainer.callback_metrics.update(tensors)
        if shown:
            trainer.progress_bar_metrics.update(shown)

    def to_host(self) -> None:
        """Copy the values of ``logged_metrics`` and ``callback_metrics`` that are still on the device (per-step
        values no logger read, :meth:`log_step`) to the host: once per epoch, so that after a fit both hold CPU
        tensors."""
        trainer = self.trainer
        for values in (trainer.logged_metrics, trainer.callback_metrics):
            for name, value in values.items():
                if isinstance(value, torch.Tensor):
                    values[name] = value.cpu()

    def publish(self, logged: dict[str, float], shown: dict[str, float], aliases: dict[str, float] | None = None,
                to_loggers: bool = True) -> None:
        """Record epoch metrics; ``aliases`` are plain names of metrics also logged per step (``loss`` for
        ``loss_epoch``), visible to callbacks and schedulers but not logged twice."""
        trainer = self.trainer
        tensors = _as_tensors(logged)
        trainer.logged_metrics.update(tensors)
        trainer.callback_metrics.update(tensors)
        trainer.callback_metrics.update(_as_tensors(aliases or {}))
        trainer.progress_bar_metrics.update(shown)
        if logged and to_loggers:
            self._to_loggers(logged)

    def end_epoch(self, hooks: Any, hook: str, monitoring_last: bool = False, to_loggers: bool = True) -> dict:
        """Publish the epoch's aggregates, run the ``on_*_epoch_end`` hook (which sees them, and whose own
        ``self.log`` calls count as epoch values), then publish what the hook logged. Returns all logged."""
        trainer = self.trainer
        metrics, reduce = trainer.run_state.metrics, trainer.strategy.reduce
        if metrics.rank_zero_only_names and trainer.world_size > 1:
            _check_monitors(trainer, metrics.rank_zero_only_names)
        logged, shown = metrics.compute_epoch(reduce)
        self.publish(logged, shown, metrics.epoch_aliases, to_loggers)
        done = set(metrics.entries)
        metrics.epoch_end = True
        if monitoring_last:
            hooks.call_before_monitors(hook)
        else:
            hooks.call(hook)
        late, late_shown = metrics.compute_epoch(reduce, exclude=done)
        if late or late_shown:
            self.publish(late, late_shown, metrics.epoch_aliases, to_loggers)
        if monitoring_last:  # checkpointing and early stopping see what the Module's hook logged
            hooks.call_monitors(hook)
        return {**logged, **late}

    def _to_loggers(self, logged: dict[str, float]) -> None:
        trainer = self.trainer
        if trainer.loggers and trainer.strategy.is_global_zero:
            row = {**logged, "epoch": trainer.current_epoch}
            for logger in trainer.loggers:
                logger.log_metrics(row, step=trainer.global_step)


def _check_monitors(trainer: Trainer, rank_zero_names: set[str]) -> None:
    """A metric only rank 0 has cannot drive a decision every rank makes together (checkpoint names, early
    stopping, a plateau scheduler): the other ranks would wait for it forever. Every rank raises instead."""
    monitors = [(type(c).__name__, getattr(c, "monitor", None)) for c in trainer.callbacks]
    monitors += [(f"lr_scheduler {type(c.scheduler).__name__}", c.monitor) for c in trainer.lr_scheduler_configs]
    for owner, monitor in monitors:
        if monitor is not None and monitor in rank_zero_names:
            raise ValueError(f"{owner} monitors {monitor!r}, which is logged with rank_zero_only=True, so only rank 0 "
                             f"has it while all {trainer.world_size} ranks must decide together; log it with "
                             "sync_dist=True instead")


def _as_tensors(values: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {k: v if isinstance(v, torch.Tensor) else torch.tensor(v) for k, v in values.items()}

