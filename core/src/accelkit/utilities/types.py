"""The type names Lightning users put in annotations (``lightning.pytorch.utilities.types``), for accelkit.

They describe what the hooks take and return; nothing here is checked at run time::

    from accelkit.utilities.types import STEP_OUTPUT, OptimizerLRScheduler

    def training_step(self, batch, batch_idx) -> STEP_OUTPUT: ...
    def configure_optimizers(self) -> OptimizerLRScheduler: ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.utils.data import DataLoader


class MetricLike(Protocol):
    """What ``self.log`` uses of a metric object (a torchmetrics ``Metric``): its epoch value and its reset (it is
    updated by the user's code)."""

    def compute(self) -> object: ...

    def reset(self) -> None: ...


#: a number as ``self.log`` takes it
_NUMBER = int | float
#: a value ``self.log`` takes: a tensor, a number, or a metric object (torchmetrics ``Metric``)
_METRIC = Tensor | _NUMBER | MetricLike
#: what ``training_step`` (and the evaluation steps) return: the loss tensor, a dict with ``"loss"``, or ``None``
STEP_OUTPUT = Tensor | Mapping[str, Any] | None
#: what ``Trainer.validate``/``test`` return: one dict of metrics per loader
_EVALUATE_OUTPUT = list[Mapping[str, float]]
#: what ``Trainer.predict`` returns: the predictions of each batch (a list per loader with several loaders)
_PREDICT_OUTPUT = list[object] | list[list[object]]
#: what ``train_dataloader`` returns: any iterable of batches, or a collection of them (a dict or list, combined by
#: :class:`~accelkit.utilities.combined_loader.CombinedLoader`)
TRAIN_DATALOADERS = Iterable[object]
#: what ``val_dataloader``/``test_dataloader``/``predict_dataloader`` return: a loader or a collection of them
EVAL_DATALOADERS = Iterable[object]
#: the ``mode`` of a :class:`~accelkit.utilities.combined_loader.CombinedLoader`
_COMBINED_MODE = Literal["min_size", "max_size_cycle", "max_size", "sequential"]
#: a DataLoader or a list of them (older annotations)
_DATALOADERS = DataLoader | Sequence[DataLoader]


@runtime_checkable
class LRScheduler(Protocol):
    """What a learning-rate scheduler offers (``torch.optim.lr_scheduler.LRScheduler`` and compatible classes)."""

    optimizer: Optimizer
    base_lrs: list[float]

    def step(self, epoch: int | None = None) -> None: ...

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state_dict: dict[str, object]) -> None: ...


@runtime_checkable
class ReduceLROnPlateau(Protocol):
    """What a scheduler that steps on a metric offers (``torch.optim.lr_scheduler.ReduceLROnPlateau``)."""

    optimizer: Optimizer
    mode: str

    def step(self, metrics: float | int | Tensor, epoch: int | None = None) -> None: ...

    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state_dict: dict[str, object]) -> None: ...


#: the scheduler classes of torch, as a tuple for ``isinstance``
LRSchedulerTypeTuple = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
#: a torch learning-rate scheduler
LRSchedulerTypeUnion = torch.optim.lr_scheduler.LRScheduler | torch.optim.lr_scheduler.ReduceLROnPlateau
#: a class of torch learning-rate scheduler
LRSchedulerType = type[torch.optim.lr_scheduler.LRScheduler] | type[torch.optim.lr_scheduler.ReduceLROnPlateau]
#: any learning-rate scheduler the Trainer steps
LRSchedulerPLType = LRScheduler | ReduceLROnPlateau


@dataclass
class LRSchedulerConfig:
    """One learning-rate scheduler and when the Trainer steps it (Lightning's ``lr_scheduler`` dict, and Lightning's
    class of this name in the same module); :func:`accelkit.module.optimizers.configure_optimizers` makes one for
    every scheduler ``configure_optimizers`` returns.

    :param scheduler: the scheduler.
    :param name: its name for :class:`~accelkit.callbacks.LearningRateMonitor` (``None``: derived).
    :param interval: ``"epoch"`` or ``"step"``.
    :param frequency: step it every this many intervals.
    :param monitor: metric passed to ``scheduler.step(metric)`` (``ReduceLROnPlateau``).
    :param strict: a missing ``monitor`` metric is an error (``False``: a warning, and the step is skipped).
    """

    scheduler: Any
    name: str | None = None
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    strict: bool = True

    @property
    def reduce_on_plateau(self) -> bool:
        """Whether the scheduler steps on a metric (``ReduceLROnPlateau``); only such schedulers use ``monitor``,
        as in Lightning."""
        return isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


class LRSchedulerConfigType(TypedDict, total=False):
    """The ``"lr_scheduler"`` dict of ``configure_optimizers`` (see
    :class:`LRSchedulerConfig` for the keys' meaning)."""

    scheduler: LRSchedulerTypeUnion
    name: str | None
    interval: str
    frequency: int
    reduce_on_plateau: bool
    monitor: str | None
    strict: bool


class OptimizerConfig(TypedDict):
    """``{"optimizer": optimizer}``."""

    optimizer: Optimizer


class OptimizerLRSchedulerConfig(TypedDict, total=False):
    """``{"optimizer": optimizer, "lr_scheduler": scheduler or LRSchedulerConfigType, "monitor": name}``."""

    optimizer: Optimizer
    lr_scheduler: LRSchedulerTypeUnion | LRSchedulerConfigType
    monitor: str


#: every form ``configure_optimizers`` may return
OptimizerLRScheduler = (
    Optimizer
    | Sequence[Optimizer]
    | tuple[Sequence[Optimizer], Sequence[LRSchedulerTypeUnion | LRSchedulerConfig | LRSchedulerConfigType]]
    | OptimizerConfig
    | OptimizerLRSchedulerConfig
    | Sequence[OptimizerConfig]
    | Sequence[OptimizerLRSchedulerConfig]
    | None
)

__all__ = [
    "EVAL_DATALOADERS",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
    "LRScheduler",
    "LRSchedulerConfig",
    "LRSchedulerConfigType",
    "LRSchedulerPLType",
    "LRSchedulerType",
    "LRSchedulerTypeTuple",
    "LRSchedulerTypeUnion",
    "OptimizerConfig",
    "OptimizerLRScheduler",
    "OptimizerLRSchedulerConfig",
    "ReduceLROnPlateau",
]
