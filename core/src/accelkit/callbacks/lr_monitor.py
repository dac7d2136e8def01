"""``LearningRateMonitor``: log the learning rate of every optimizer (Lightning 2.x behaviour and names)."""

from __future__ import annotations

import warnings
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import torch

from accelkit.callbacks.base import Callback
from accelkit.errors import ConfigurationError

if TYPE_CHECKING:
    from torch.optim import Optimizer

    from accelkit.trainer.trainer import Trainer
    from accelkit.utilities.types import LRSchedulerConfig


class LearningRateMonitor(Callback):
    """Log each optimizer's learning rate (and optionally momentum and weight decay) through ``trainer.loggers``.

    :param logging_interval: ``"step"``: every ``log_every_n_steps`` training steps; ``"epoch"``: at the start of
        every training epoch; ``None``: each scheduler at its own ``interval`` (optimizers without a scheduler
        at every logged step).
    :param log_momentum: also log ``<name>-momentum`` (``betas[0]`` for Adam-like optimizers, ``0`` for those
        without momentum).
    :param log_weight_decay: also log ``<name>-weight_decay``.

    Names follow Lightning: ``lr-<OptimizerClass>``, or the ``name`` of the scheduler's configuration; a second
    optimizer of the same class gets ``-1``, ``-2`` ...; an optimizer with several parameter groups gets
    ``/pg1``, ``/pg2`` ... (or ``/<group name>`` when its groups have a ``"name"``). Every value logged is also put
    in ``trainer.callback_metrics``. ``lrs`` keeps every value logged, by name. The Trainer must have a logger.
    """

    def __init__(self, logging_interval: str | None = None, log_momentum: bool = False,
                 log_weight_decay: bool = False) -> None:
        if logging_interval not in (None, "step", "epoch"):
            raise ConfigurationError(f"LearningRateMonitor(logging_interval={logging_interval!r}): must be 'step', "
                                     "'epoch' or None.")
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self.lrs: dict[str, list[float]] = {}
        self.last_momentum_values: dict[str, float | None] = {}
        self.last_weight_decay_values: dict[str, float | None] = {}

    def on_train_start(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        """Check there is a logger, and prepare the names of what will be logged."""
        if not getattr(trainer, "loggers", None):
            raise ConfigurationError("LearningRateMonitor needs a logger, but the Trainer has none (logger=False); "
                                     "pass logger=True or a logger, or remove the LearningRateMonitor.")
        if self.log_momentum and any(not _has_momentum(o) for o in self._optimizers(trainer)):
            warnings.warn("LearningRateMonitor(log_momentum=True): some optimizers have no momentum; their "
                          "momentum is logged as 0.", RuntimeWarning, stacklevel=2)
        names = [n for group in self._names(trainer)[0] for n in group]
        self.lrs = {name: [] for name in names}
        self.last_momentum_values = {f"{name}-momentum": None for name in names}
        self.last_weight_decay_values = {f"{name}-weight_decay": None for name in names}

    def on_train_batch_start(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        """Log the values used by the coming step, every ``log_every_n_steps`` batches that step (as Lightning)."""
        if self.logging_interval == "epoch":
            return
        every = getattr(trainer, "log_every_n_steps", 50)
        if (trainer.run_state.progress.batches_that_stepped + 1) % every != 0 and not trainer.should_stop:
            return
        self._log(trainer, self._extract_stats(trainer, "step" if self.logging_interval is None else "any"))

    def on_train_epoch_start(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        """Log the values of the coming epoch."""
        if self.logging_interval == "step":
            return
        self._log(trainer, self._extract_stats(trainer, "epoch" if self.logging_interval is None else "any"))

    # ----------------------------------------------------------------- values
    def _extract_stats(self, trainer: Trainer, interval: str) -> dict[str, float]:
        """The values to log now: schedulers whose ``interval`` matches (``"any"``: all), optimizers without a
        scheduler; also written into ``trainer.callback_metrics``."""
        (scheduler_names, optimizer_names), (configs, free_optimizers) = self._names(trainer), self._sources(trainer)
        stats: dict[str, float] = {}
        for names, config in zip(scheduler_names, configs, strict=True):
            if interval in ("any", config.interval):
                stats.update(self._optimizer_stats(config.scheduler.optimizer, names))
        for names, optimizer in zip(optimizer_names, free_optimizers, strict=True):  # no interval of their own: always
            stats.update(self._optimizer_stats(optimizer, names))
        metrics = trainer.callback_metrics
        for name, value in stats.items():
            metrics[name] = torch.tensor(value)
        return stats

    def _optimizer_stats(self, optimizer: Optimizer, names: list[str]) -> dict[str, float]:
        stats: dict[str, float] = {}
        betas = "betas" in optimizer.defaults
        for group, name in zip(optimizer.param_groups, names, strict=True):
            lr = float(group["lr"])
            self.lrs.setdefault(name, []).append(lr)
            stats[name] = lr
            if self.log_momentum:
                momentum = float(group["betas"][0] if betas else group.get("momentum", 0))
                self.last_momentum_values[f"{name}-momentum"] = momentum
                stats[f"{name}-momentum"] = momentum
            if self.log_weight_decay:
                decay = float(group.get("weight_decay", 0))
                self.last_weight_decay_values[f"{name}-weight_decay"] = decay
                stats[f"{name}-weight_decay"] = decay
        return stats

    @staticmethod
    def _log(trainer: Trainer, stats: dict[str, float]) -> None:
        """To the loggers at Lightning's step: the training batches that stepped before this one (as the values
        the Module logs; several optimizer steps in a batch count once)."""
        if stats and getattr(trainer, "is_global_zero", True):
            for logger in trainer.loggers:
                logger.log_metrics(stats, step=trainer.run_state.progress.batches_that_stepped)

    # ----------------------------------------------------------------- names
    @staticmethod
    def _optimizers(trainer: Trainer) -> list[Optimizer]:
        # A wrapper optimizer (DeepSpeed-like) keeps the real one in ``.optimizer``.
        return [getattr(o, "optimizer", o) for o in getattr(trainer, "optimizers", None) or []]

    def _sources(self, trainer: Trainer) -> tuple[list[LRSchedulerConfig], list[Optimizer]]:
        """The scheduler configurations, and the optimizers that no scheduler drives."""
        configs = list(getattr(trainer, "lr_scheduler_configs", None) or [])
        driven = [config.scheduler.optimizer for config in configs]
        free = [o for o in self._optimizers(trainer) if not any(o is d for d in driven)]
        return configs, free

    def _names(self, trainer: Trainer) -> tuple[list[list[str]], list[list[str]]]:
        """Names per parameter group: for each scheduler configuration, then for each optimizer without one."""
        configs, free = self._sources(trainer)
        seen_types: dict[type, int] = defaultdict(int)
        scheduler_names = []
        for config in configs:
            optimizer = config.scheduler.optimizer
            if config.name is None:
                seen_types[type(optimizer)] += 1
            base = config.name if config.name is not None else f"lr-{type(optimizer).__name__}"
            scheduler_names.append(self._group_names(optimizer, self._numbered(base, optimizer, seen_types)))
        optimizer_names = []
        for optimizer in free:
            seen_types[type(optimizer)] += 1
            base = self._numbered(f"lr-{type(optimizer).__name__}", optimizer, seen_types)
            optimizer_names.append(self._group_names(optimizer, base))
        for group in scheduler_names + optimizer_names:  # an optimizer that grew a parameter group keeps its history
            for name in group:
                if name.endswith("/pg1") and name[:-4] in self.lrs:
                    self.lrs[name] = self.lrs.pop(name[:-4])
        return scheduler_names, optimizer_names

    @staticmethod
    def _numbered(name: str, optimizer: object, seen_types: dict[type, int]) -> str:
        count = seen_types.get(type(optimizer), 0)
        return f"{name}-{count - 1}" if count > 1 else name

    @staticmethod
    def _group_names(optimizer: Optimizer, name: str) -> list[str]:
        groups = optimizer.param_groups
        labels = [group.get("name", f"pg{i}") for i, group in enumerate(groups, start=1)]
        duplicated = sorted({label for label in labels if labels.count(label) > 1})
        if duplicated:
            raise ConfigurationError(f"LearningRateMonitor: {name} has several parameter groups named "
                                     f"{duplicated}; give each group of one optimizer its own 'name'.")
        if len(groups) > 1:
            return [f"{name}/{label}" for label in labels]
        return [f"{name}/{groups[0]['name']}" if groups[0].get("name") else name]


def _has_momentum(optimizer: Optimizer) -> bool:
    return "momentum" in optimizer.defaults or "betas" in optimizer.defaults
