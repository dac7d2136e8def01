"""``accelkit.Module``: the user's model, with the names LightningModule users know."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Module(nn.Module):
    """A :class:`torch.nn.Module` that knows how to train itself.

    Override :meth:`training_step` and :meth:`configure_optimizers`; optionally the evaluation steps, the
    ``*_dataloader`` methods and the ``on_*`` hooks. Code written for a LightningModule ports by changing the
    base class: the method names and signatures are the same.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.__dict__["_trainer"] = None
        self.__dict__["hparams"] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__.copy()
        state = dict(state)
        state["_trainer"] = None  # a Module is pickled into workers without its Trainer
        return state

    # ----------------------------------------------------------------- context
    @property
    def trainer(self) -> Any:
        """The :class:`~accelkit.Trainer` running this module (``None`` outside a run)."""
        return self.__dict__.get("_trainer")

    @trainer.setter
    def trainer(self, trainer: Any) -> None:
        self.__dict__["_trainer"] = trainer

    @property
    def device(self) -> torch.device:
        """Device of the module's first parameter (CPU if it has none)."""
        for param in self.parameters():
            return param.device
        return torch.device("cpu")

    @property
    def current_epoch(self) -> int:
        """The epoch being run (0-based)."""
        return self.trainer.current_epoch if self.trainer else 0

    @property
    def global_step(self) -> int:
        """Number of optimizer steps taken."""
        return self.trainer.global_step if self.trainer else 0

    @property
    def global_rank(self) -> int:
        """This process's index among all processes."""
        return self.trainer.global_rank if self.trainer else 0

    @property
    def local_rank(self) -> int:
        """This process's index on its node."""
        return self.trainer.local_rank if self.trainer else 0

    def save_hyperparameters(self, **hparams: Any) -> None:
        """Record hyper-parameters: stored in checkpoints and written by the logger."""
        self.hparams.update(hparams)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` from the global-zero process only."""
        if self.trainer is None or self.trainer.is_global_zero:
            print(*args, **kwargs)

    # ----------------------------------------------------------------- steps
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        """Compute the loss of one batch: return the loss tensor, a dict with ``"loss"``, or ``None`` to skip."""
        raise NotImplementedError(f"{type(self).__name__} must implement training_step(batch, batch_idx) to be fit")

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        """Evaluate one validation batch (log metrics with :meth:`log`)."""

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        """Evaluate one test batch (log metrics with :meth:`log`)."""

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        """Return the prediction for one batch; by default ``self(batch)`` (or ``self(batch[0])`` for tuples)."""
        if isinstance(batch, (list, tuple)):
            return self(batch[0])
        return self(batch)

    def configure_optimizers(self) -> Any:
        """Return an optimizer, a list of them, ``(optimizers, schedulers)``, or a dict
        ``{"optimizer": ..., "lr_scheduler": scheduler or {"scheduler": ..., "interval": "epoch"|"step",
        "frequency": 1, "monitor": "val_loss"}}``."""
        raise NotImplementedError(f"{type(self).__name__} must implement configure_optimizers() to be fit")

    # ----------------------------------------------------------------- data (optional)
    def train_dataloader(self) -> Any:
        """Training data, when not passed to :meth:`Trainer.fit`."""
        return None

    def val_dataloader(self) -> Any:
        """Validation data, when not passed to :meth:`Trainer.fit`/``validate``."""
        return None

    def test_dataloader(self) -> Any:
        """Test data, when not passed to :meth:`Trainer.test`."""
        return None

    def predict_dataloader(self) -> Any:
        """Prediction data, when not passed to :meth:`Trainer.predict`."""
        return None

    # ----------------------------------------------------------------- logging
    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool = True,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str = "mean",
        sync_dist: bool = False,
        batch_size: int | None = None,
    ) -> None:
        """Record a metric.

        :param name: the metric's name.
        :param value: a number or a scalar tensor. Tensors are kept on the device: the Trainer reads them only
            every ``log_every_n_steps`` steps and at epoch end, so logging costs no host sync per step.
        :param prog_bar: show it in the progress bar.
        :param logger: send it to the logger.
        :param on_step: log the per-step value (default: ``True`` in training, ``False`` in evaluation).
        :param on_epoch: log the epoch aggregate (default: ``False`` in training, ``True`` in evaluation).
        :param reduce_fx: epoch aggregate: ``"mean"`` (weighted by batch size), ``"sum"``, ``"max"``, ``"min"``.
        :param sync_dist: reduce the epoch aggregate across processes with ``reduce_fx``.
        :param batch_size: weight for the mean (default: the batch's first dimension).
        """
        if self.trainer is None:
            raise RuntimeError(f"{type(self).__name__}.log({name!r}, ...) was called outside a Trainer run")
        self.trainer._metrics.log(name, value, prog_bar=prog_bar, logger=logger, on_step=on_step,
                                  on_epoch=on_epoch, reduce_fx=reduce_fx, sync_dist=sync_dist, batch_size=batch_size)

    def log_dict(self, metrics: dict[str, Any], **kwargs: Any) -> None:
        """:meth:`log` each item of ``metrics`` with the same options."""
        for name, value in metrics.items():
            self.log(name, value, **kwargs)

    # ----------------------------------------------------------------- hooks
    def on_post_move_to_device(self) -> None:
        """Called right after the module is moved to its device: tie shared weights again here."""

    def on_fit_start(self) -> None:
        """Before the first training epoch."""

    def on_fit_end(self) -> None:
        """After the last training epoch."""

    def on_train_start(self) -> None:
        """Before training starts (after ``on_fit_start``)."""

    def on_train_end(self) -> None:
        """After training ends."""

    def on_train_epoch_start(self) -> None:
        """Before each training epoch."""

    def on_train_epoch_end(self) -> None:
        """After each training epoch."""

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Before each training batch."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After each training batch."""

    def on_validation_start(self) -> None:
        """Before a validation run."""

    def on_validation_end(self) -> None:
        """After a validation run."""

    def on_validation_epoch_start(self) -> None:
        """Before each validation epoch."""

    def on_validation_epoch_end(self) -> None:
        """After each validation epoch."""

    def on_test_start(self) -> None:
        """Before the test run."""

    def on_test_end(self) -> None:
        """After the test run."""

    def on_test_epoch_start(self) -> None:
        """Before the test epoch."""

    def on_test_epoch_end(self) -> None:
        """After the test epoch."""

    def on_predict_start(self) -> None:
        """Before prediction."""

    def on_predict_end(self) -> None:
        """After prediction."""

    def on_before_backward(self, loss: torch.Tensor) -> None:
        """Before ``loss.backward()``."""

    def on_after_backward(self) -> None:
        """After the backward pass, before gradients are reduced, unscaled or clipped."""

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Before each optimizer step, after clipping."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Before a checkpoint is written; may add entries."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """After a checkpoint is read, before it is applied."""
