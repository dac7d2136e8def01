"""The hooks of :class:`accelkit.Module`, with Lightning 2.x's names, signatures and defaults (the data hooks,
shared with the DataModule, are :class:`accelkit.module.datamodule.DataHooks`).

Split from ``module.py`` by concept: these are the points where the Trainer calls into the user's code. A hook a
module does not override costs nothing per step: the Trainer decides once per run which hooks to call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from accelkit.module.optimizers import Optimizer
    from accelkit.trainer.trainer import Trainer


class ModelHooks:
    """Hooks of the run's lifecycle, batches and optimization steps."""

    if TYPE_CHECKING:  # what the defaults below use of the Module this class is part of (for the type checker)
        @property
        def trainer(self) -> Trainer | None: ...

        def zero_grad(self, set_to_none: bool = True) -> None: ...

        def clip_gradients(self, optimizer: Optimizer | torch.optim.Optimizer, gradient_clip_val: float | None = None,
                           gradient_clip_algorithm: str | None = None) -> None: ...

    # ----------------------------------------------------------------- lifecycle
    def on_fit_start(self) -> None:
        """When fit begins (after ``setup`` and ``configure_optimizers``)."""

    def on_fit_end(self) -> None:
        """When fit ends."""

    def on_train_start(self) -> None:
        """When training begins (after the sanity check)."""

    def on_train_end(self) -> None:
        """When training ends."""

    def on_validation_start(self) -> None:
        """When a validation run begins (also inside fit)."""

    def on_validation_end(self) -> None:
        """When a validation run ends."""

    def on_test_start(self) -> None:
        """When the test run begins."""

    def on_test_end(self) -> None:
        """When the test run ends."""

    def on_predict_start(self) -> None:
        """When prediction begins."""

    def on_predict_end(self) -> None:
        """When prediction ends."""

    def configure_model(self) -> None:
        """Create layers here to build them directly on the device/strategy of the run (called in every process
        before the module is moved; it may be called more than once, so make it idempotent)."""

    def configure_sharded_model(self) -> None:
        """Deprecated name of :meth:`configure_model` (still called, with a warning)."""

    def on_post_move_to_device(self) -> None:
        """Right after the module is moved to its device: tie shared weights again here (accelkit extension)."""

    # ----------------------------------------------------------------- batches
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        """Before each training batch. Return ``-1`` to end the epoch here."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After each training batch; ``outputs`` is what ``training_step`` returned (a dict with ``"loss"``)."""

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before each validation batch."""

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After each validation batch."""

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before each test batch."""

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After each test batch."""

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Before each prediction batch."""

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """After each prediction batch."""

    # ----------------------------------------------------------------- epochs
    def on_train_epoch_start(self) -> None:
        """At the start of each training epoch."""

    def on_train_epoch_end(self) -> None:
        """At the end of each training epoch (after its validation); what it logs is an epoch value."""

    def on_validation_epoch_start(self) -> None:
        """At the start of the validation epoch."""

    def on_validation_epoch_end(self) -> None:
        """At the end of the validation epoch."""

    def on_test_epoch_start(self) -> None:
        """At the start of the test epoch."""

    def on_test_epoch_end(self) -> None:
        """At the end of the test epoch."""

    def on_predict_epoch_start(self) -> None:
        """At the start of the prediction epoch."""

    def on_predict_epoch_end(self) -> None:
        """At the end of the prediction epoch."""

    # ----------------------------------------------------------------- evaluation mode
    def _running_model(self) -> torch.nn.Module:
        """The model the Trainer runs (the strategy's wrapper of this module); an error outside a run."""
        trainer = self.trainer
        if trainer is None:
            raise RuntimeError(f"{type(self).__name__} has no Trainer: the evaluation-mode hooks switch the model "
                               "a Trainer runs; call them while a Trainer runs the module, or call eval()/train()")
        return trainer.model

    def on_validation_model_eval(self) -> None:
        """Put the module in evaluation mode for validation (default ``self.eval()``)."""
        self._running_model().eval()

    def on_validation_model_train(self) -> None:
        """Put the module back in training mode after validation inside fit (default ``self.train()``)."""
        self._running_model().train()

    def on_validation_model_zero_grad(self) -> None:
        """Before validation inside fit: drop gradients so validation does not hold their memory."""
        self.zero_grad(set_to_none=True)

    def on_test_model_eval(self) -> None:
        """Put the module in evaluation mode for testing."""
        self._running_model().eval()

    def on_test_model_train(self) -> None:
        """After testing (only called when testing inside another stage)."""
        self._running_model().train()

    def on_predict_model_eval(self) -> None:
        """Put the module in evaluation mode for prediction."""
        self._running_model().eval()

    # ----------------------------------------------------------------- optimization
    def on_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Before ``optimizer.zero_grad()``."""

    def on_before_backward(self, loss: torch.Tensor) -> None:
        """Before the backward pass."""

    def on_after_backward(self) -> None:
        """After the backward pass, before gradients are unscaled or clipped."""

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Before each optimizer step, after gradients are unscaled, before clipping."""

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Back-propagate ``loss`` (already scaled by the precision when it uses a gradient scaler)."""
        loss.backward(*args, **kwargs)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Optimizer | torch.optim.Optimizer,
                       optimizer_closure: Callable[[], Any] | None = None) -> None:
        """Step ``optimizer``: the default calls ``optimizer.step(closure=optimizer_closure)``; the closure runs
        ``training_step``, ``optimizer_zero_grad`` and ``backward``. Override it to change the learning rate
        around the step (warm-up) or to skip steps; the optimizer given still steps through the precision and
        the strategy."""
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
        """Zero the gradients (default ``optimizer.zero_grad()``, which sets them to ``None``)."""
        optimizer.zero_grad()

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step one scheduler: ``scheduler.step()``, or ``scheduler.step(metric)`` when it monitors a metric."""
        # (``scheduler`` is not annotated as a scheduler union: ``ReduceLROnPlateau.step`` requires the metric that
        # this default gives it only when one is monitored, which the type checker cannot follow)
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clip gradients before the step; the default applies the Trainer's ``gradient_clip_val`` and
        ``gradient_clip_algorithm`` through :meth:`~accelkit.Module.clip_gradients`."""
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val,
                            gradient_clip_algorithm=gradient_clip_algorithm)


class CheckpointHooks:
    """Hooks around checkpoints."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Before a checkpoint is written; may add entries."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """After a checkpoint is read, before it is applied."""
