"""From logged values to ``trainer.callback_metrics``, the loggers and ``trainer.progress_bar_metrics`` (what a
progress-bar callback shows)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from accelkit.loops.metrics import KINDS

if TYPE_CHECKING:
    from accelkit.loops.hooks import HookCaller
    from accelkit.trainer.trainer import Trainer


class Publisher:
    """Moves what the ``MetricStore`` holds to the Trainer's metric dicts and loggers.

    ``trainer.callback_metrics``, ``logged_metrics`` and ``progress_bar_metrics`` are computed when read, as in
    Lightning: what was published (``RunState``'s dicts) updated with the running loop's current values
    (:meth:`~accelkit.loops.metrics.MetricStore.current`). The Publisher publishes a loop's values when its phase
    ends (:meth:`publish`), so that they stay visible afterwards, and sends values to the loggers. A step costs
    nothing here without a logger.
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def log_step(self) -> None:
        """Send the per-step values logged since the last logging step to the loggers (one host read each: they
        write numbers); nothing without a logger."""
        trainer = self.trainer
        if trainer.loggers:
            logged = trainer.run_state.metrics.read_step()
            if logged:
                self._to_loggers(logged)

    def log_eval_step(self, loader: int) -> None:
        """Send the per-step values an evaluation batch of loader ``loader`` logged to the loggers, as Lightning:
        without an ``epoch``, at that loader's own step (its batches run so far in this ``fit``'s validations, or in
        this ``validate``/``test`` call; the sanity check's are not counted). Call it only with loggers."""
        steps = self.trainer.run_state.progress.eval_logger_steps
        step = steps.get(loader, 0)
        steps[loader] = step + 1
        logged = self.trainer.run_state.metrics.read_step()
        if logged:
            self._to_loggers(logged, step, with_epoch=False)

    def publish(self) -> None:
        """Publish the running loop's current values (per-step or epoch values, :attr:`MetricStore.phase`) into
        the Trainer's dicts, where they stay once the loop moves on: when its batches end, before an evaluation
        loop starts inside a fit, and when its epoch ends."""
        trainer = self.trainer
        state = trainer.run_state
        for kind in KINDS:
            getattr(state, kind).update(state.metrics.current(kind))

    def publish_loader(self, loader: int) -> None:
        """Publish the epoch values of what evaluation loader ``loader`` logged, once its batches are done and before
        the next loader's start (as Lightning does): a callback sees them while the next loaders run. Every process
        calls this together (a ``sync_dist`` value is reduced)."""
        state = self.trainer.run_state
        for kind in KINDS:
            getattr(state, kind).update(state.metrics.current(kind, loader=loader))

    def to_host(self) -> None:
        """Copy the values of ``logged_metrics`` and ``callback_metrics`` still on the device to the host: once, at
        the run's end (as Lightning's teardown), so that after a run both hold CPU tensors."""
        state = self.trainer.run_state
        for values in (state.logged_metrics, state.callback_metrics):
            for name, value in values.items():
                if isinstance(value, torch.Tensor):
                    values[name] = value.cpu()

    def end_epoch(self, hooks: HookCaller, hook: str, monitoring_last: bool = False,
                  to_loggers: bool = True, step: int | None = None) -> dict[str, torch.Tensor]:
        """Compute the epoch's aggregates, run the ``on_*_epoch_end`` hook (which sees them, and whose own
        ``self.log`` calls count as epoch values), then send them all to the loggers in one row, publish them and
        close the loop's epoch. Returns what is the loggers' (tensors). ``step``: the loggers' step (default:
        :meth:`~accelkit.loops.state.Progress.logger_step`)."""
        trainer = self.trainer
        metrics, reduce = trainer.run_state.metrics, trainer.strategy.reduce
        self.publish()  # the last step's values stay visible after the epoch
        logged = metrics.compute_epoch(reduce)
        done = set(metrics.entries)
        metrics.set_epoch_end(True)
        if monitoring_last:
            hooks.call_before_monitors(hook)
        else:
            hooks.call(hook)
        late = metrics.compute_epoch(reduce, exclude=done)
        if monitoring_last:  # checkpointing and early stopping see what the Module's hook logged
            hooks.call_monitors(hook)
        if (logged or late) and to_loggers:  # one row, after the hooks, as Lightning: a name the hook logged too
            self._to_loggers({**logged, **late}, step)  # is the hook's value (the later hook's, as in current())
        self.publish()
        metrics.phase = "closed"
        return {**logged, **late}

    def _to_loggers(self, logged: Mapping[str, torch.Tensor | float], step: int | None = None,
                    with_epoch: bool = True) -> None:
        """Numbers to the loggers (one host read per tensor), on global rank zero, with the ``epoch`` (unless
        ``with_epoch`` is false) at ``step`` (default: :meth:`~accelkit.loops.state.Progress.logger_step`); with
        ``with_epoch``, a value logged as ``"step"`` is the step instead, without an ``epoch`` (Lightning's rule)."""
        trainer = self.trainer
        if trainer.loggers and trainer.strategy.is_global_zero:
            row = {k: float(v) for k, v in logged.items()}
            at = trainer.run_state.progress.logger_step() if step is None else step
            if with_epoch:  # as Lightning: a value logged as "step" is the row's step, and no epoch is added
                own = row.pop("step", None)
                if own is None:
                    row["epoch"] = trainer.current_epoch
                else:
                    at = int(own)
            for logger in trainer.loggers:
                logger.log_metrics(row, step=at)
