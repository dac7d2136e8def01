"""``BasePredictionWriter``: write predictions where you want them, per batch and/or per epoch, on every rank."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

from accelkit.callbacks.base import Callback
from accelkit.errors import ConfigurationError

if TYPE_CHECKING:
    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer


class WriteInterval(str, Enum):  # noqa: UP042 - not StrEnum: str() as Lightning's gives (WriteInterval.BATCH)
    """When a :class:`BasePredictionWriter` writes (compares equal to its string value)."""

    BATCH = "batch"
    EPOCH = "epoch"
    BATCH_AND_EPOCH = "batch_and_epoch"

    @property
    def on_batch(self) -> bool:
        """Whether :meth:`~accelkit.callbacks.BasePredictionWriter.write_on_batch_end` is called."""
        return self in (WriteInterval.BATCH, WriteInterval.BATCH_AND_EPOCH)

    @property
    def on_epoch(self) -> bool:
        """Whether :meth:`~accelkit.callbacks.BasePredictionWriter.write_on_epoch_end` is called."""
        return self in (WriteInterval.EPOCH, WriteInterval.BATCH_AND_EPOCH)


class BasePredictionWriter(Callback):
    """Base class of callbacks that store what ``predict_step`` returns (Lightning's ``BasePredictionWriter``).

    Subclass it and override :meth:`write_on_batch_end` (``write_interval="batch"``), :meth:`write_on_epoch_end`
    (``"epoch"``) or both (``"batch_and_epoch"``). The writer runs in every process of a distributed run, so
    each rank writes its own share (name the files after ``trainer.global_rank``); combine them afterwards.
    Use it with ``trainer.predict(..., return_predictions=False)`` to keep the predictions out of memory:
    with ``"batch"`` nothing is kept; with ``"epoch"`` the loop keeps this process's predictions for
    :meth:`write_on_epoch_end` only, and drops them afterwards.

    ``batch_indices`` are the positions in the dataset of the samples of a batch, as this rank's sampler drew
    them (with a distributed sampler: this rank's shard; padding that repeats a sample for an even split shows
    the repeated index). They are known for map-style datasets read through a ``DataLoader``; for iterable
    datasets and other loaders they are empty lists, with a warning.

    :param write_interval: ``"batch"``, ``"epoch"`` or ``"batch_and_epoch"``.
    """

    def __init__(self, write_interval: str = "batch") -> None:
        try:
            #: a :class:`~accelkit.callbacks.prediction_writer.WriteInterval` (``interval.on_batch``,
            #: ``interval.on_epoch``)
            self.interval = WriteInterval(getattr(write_interval, "value", write_interval))
        except ValueError:
            raise ConfigurationError(f"BasePredictionWriter(write_interval={write_interval!r}): must be one of "
                                     f"{', '.join(repr(i.value) for i in WriteInterval)}") from None

    def write_on_batch_end(self, trainer: Trainer, pl_module: Module, prediction: Any,
                           batch_indices: Sequence[int] | None, batch: Any, batch_idx: int,
                           dataloader_idx: int) -> None:
        """Write one batch's ``prediction``; ``batch_indices`` are its samples' dataset indices."""
        raise NotImplementedError(f"{type(self).__name__}(write_interval={self.interval.value!r}) must override "
                                  "write_on_batch_end(trainer, pl_module, prediction, batch_indices, batch, "
                                  "batch_idx, dataloader_idx)")

    def write_on_epoch_end(self, trainer: Trainer, pl_module: Module, predictions: Sequence[Any],
                           batch_indices: Sequence[Any]) -> None:
        """Write every prediction of the run in this process. ``predictions``: one list per loader (a flat list
        of batch predictions when there is one loader); ``batch_indices``: per loader, per batch, the dataset
        indices (``batch_indices[dataloader_idx][batch_idx]``)."""
        raise NotImplementedError(f"{type(self).__name__}(write_interval={self.interval.value!r}) must override "
                                  "write_on_epoch_end(trainer, pl_module, predictions, batch_indices)")

    def on_predict_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int,
                             dataloader_idx: int = 0) -> None:
        if self.interval.on_batch:
            self.write_on_batch_end(trainer, pl_module, outputs, trainer.predict_loop.current_batch_indices, batch,
                                    batch_idx, dataloader_idx)

    def on_predict_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self.interval.on_epoch:
            loop = trainer.predict_loop
            self.write_on_epoch_end(trainer, pl_module, loop.predictions, loop.epoch_batch_indices)
