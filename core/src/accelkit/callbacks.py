"""Callbacks: code that watches or steers a run from outside the Module."""

from __future__ import annotations

from typing import Any


class Callback:
    """Base class. Override the hooks you need; each receives the Trainer and the user's Module.

    The hooks have the names of the Module's hooks and run right after them.
    """

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        """Before the first training epoch."""

    def on_fit_end(self, trainer: Any, module: Any) -> None:
        """After the last training epoch."""

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        """Before each training epoch."""

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        """After each training epoch (and its validation), with epoch metrics in ``trainer.callback_metrics``."""

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After each training batch."""

    def on_validation_epoch_end(self, trainer: Any, module: Any) -> None:
        """After each validation epoch."""

    def on_test_epoch_end(self, trainer: Any, module: Any) -> None:
        """After the test epoch."""

    def on_save_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
        """Before a checkpoint is written; may add entries to ``checkpoint``."""

    def teardown(self, trainer: Any, module: Any, stage: str) -> None:
        """At the end of ``fit``/``validate``/``test``/``predict``, in every worker, before the strategy's teardown."""


class DeviceStatsMonitor(Callback):
    """Logs the accelerator's device statistics (memory and the like) every ``log_every_n_steps`` steps.

    What is reported comes from :meth:`accelkit.Accelerator.get_device_stats`; an accelerator without
    statistics logs nothing.
    """

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step % trainer.log_every_n_steps:
            return
        strategy = trainer.strategy
        stats = strategy.accelerator.get_device_stats(strategy.root_device)
        if stats and trainer.logger is not None and strategy.is_global_zero:
            trainer.logger.log_metrics({f"device/{k}": float(v) for k, v in stats.items()}, step=trainer.global_step)
