"""Optimizers and learning-rate schedulers: what ``configure_optimizers`` returns, and stepping them through the
strategy and the precision."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from accelkit.utilities.types import LRSchedulerConfig

if TYPE_CHECKING:
    from accelkit.module.module import Module

#: the keys of an ``lr_scheduler`` dict, the fields of :class:`LRSchedulerConfig`
_KEYS = tuple(field.name for field in fields(LRSchedulerConfig))


def _scheduler_config(entry: object, where: str) -> LRSchedulerConfig:
    if not isinstance(entry, dict):
        return LRSchedulerConfig(scheduler=entry)
    unknown = sorted(set(entry) - set(_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown lr_scheduler key(s) {unknown}; accepted: {list(_KEYS)}")
    if "scheduler" not in entry:
        raise ValueError(f"{where}: an lr_scheduler dict needs the key 'scheduler'")
    config = LRSchedulerConfig(**{k: entry[k] for k in _KEYS if k in entry})
    if config.interval not in ("epoch", "step"):
        raise ValueError(f"{where}: lr_scheduler interval={config.interval!r} must be 'epoch' or 'step'")
    if not isinstance(config.frequency, int) or config.frequency < 1:
        raise ValueError(f"{where}: lr_scheduler frequency={config.frequency!r} must be an int >= 1")
    return config


def configure_optimizers(module: Module) -> tuple[list[torch.optim.Optimizer], list[LRSchedulerConfig]]:
    """Call ``module.configure_optimizers()`` and normalise every form Lightning accepts: an optimizer, a list or
    tuple of them, ``([optimizers], [schedulers])``, a dict ``{"optimizer", "lr_scheduler", "monitor"}`` or a
    list of such dicts. ``None`` means no optimizer (manual optimization that steps nothing)."""
    where = f"{type(module).__name__}.configure_optimizers()"
    config = module.configure_optimizers()
    optimizers: list[object] = []
    schedulers: list[LRSchedulerConfig] = []

    def from_dict(d: Mapping[str, Any]) -> None:  # (the dict configure_optimizers returned, as written)
        if "optimizer" not in d:
            raise ValueError(f"{where} returned a dict without the key 'optimizer': {sorted(d)}")
        unknown = sorted(set(d) - {"optimizer", "lr_scheduler", "monitor"})
        if unknown:
            raise ValueError(f"{where} returned a dict with unknown key(s) {unknown}; "
                             "accepted: 'optimizer', 'lr_scheduler', 'monitor'")
        optimizers.append(d["optimizer"])
        if d.get("lr_scheduler") is not None:
            sched = _scheduler_config(d["lr_scheduler"], where)
            if sched.monitor is None and d.get("monitor") is not None:
                sched.monitor = d["monitor"]
            schedulers.append(sched)

    if config is None:
        return [], []
    if isinstance(config, torch.optim.Optimizer):
        optimizers = [config]
    elif isinstance(config, dict):
        from_dict(config)
    elif (isinstance(config, (list, tuple)) and len(config) == 2 and isinstance(config[0], (list, tuple))
          and isinstance(config[1], (list, tuple))):
        optimizers = list(config[0])
        schedulers = [_scheduler_config(s, where) for s in config[1]]
    elif isinstance(config, (list, tuple)) and config and all(isinstance(d, dict) for d in config):
        for d in config:
            from_dict(d)
    elif isinstance(config, (list, tuple)) and all(isinstance(o, torch.optim.Optimizer) for o in config):
        optimizers = list(config)
    else:
        raise TypeError(
            f"{where} returned {type(config).__name__}; return an optimizer, a list of optimizers, "
            "([optimizers], [schedulers]), {'optimizer': ..., 'lr_scheduler': ...} or a list of such dicts"
        )
    for opt in optimizers:
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError(f"{where} returned {type(opt).__name__} where an optimizer belongs")
    if not optimizers:
        raise TypeError(f"{where} returned no optimizer")
    for sched in schedulers:
        if isinstance(sched.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) and sched.monitor is None:
            raise ValueError(f"{where}: ReduceLROnPlateau needs a metric to monitor: return "
                             "{'optimizer': opt, 'lr_scheduler': {'scheduler': sched, 'monitor': 'val_loss'}}")
    return cast("list[torch.optim.Optimizer]", optimizers), schedulers  # (each one checked above)


class Stepper(Protocol):
    """What steps an :class:`Optimizer`: the run's optimization (:class:`accelkit.loops.optimization.Optimization`),
    through the precision and the strategy."""

    def step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], object] | None, /) -> object:
        """Run ``closure`` (if given), step ``optimizer``; returns the closure's result."""


class Optimizer:
    """What ``self.optimizers()`` returns: the user's optimizer, stepped through the run's precision and strategy.

    Attribute access goes to the wrapped optimizer (``param_groups``, ``state``, ``zero_grad`` ...), so code that
    uses ``torch.optim.Optimizer`` works unchanged. :meth:`step` reduces gradients across processes where the
    strategy does so at step time, calls the ``on_before_optimizer_step`` hooks, steps through the precision (a
    gradient scaler's ``step``) and lets the strategy end the step (a lazy device cuts its graph).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, stepper: Stepper) -> None:
        self.__dict__["_optimizer"] = optimizer
        self.__dict__["_stepper"] = stepper

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The wrapped ``torch.optim.Optimizer``."""
        return self._optimizer

    def step(self, closure: Callable[[], object] | None = None, **kwargs: object) -> object:
        """Run ``closure`` (if given), then take the optimizer step; returns the closure's result."""
        if kwargs:
            raise TypeError(f"optimizer.step() got unexpected keyword argument(s) {sorted(kwargs)}; accelkit passes "
                            "only closure=")
        return self._stepper.step(self._optimizer, closure)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._optimizer, name)

    def __setattr__(self, name: str, value: object) -> None:
        setattr(self._optimizer, name, value)

    def __repr__(self) -> str:
        return f"accelkit.module.optimizers.Optimizer({self._optimizer!r})"


def step_scheduler(module: object, config: LRSchedulerConfig, metrics: Mapping[str, object],
                   call_hook: Callable[[object, object], object]) -> None:
    """Step one scheduler through the module's ``lr_scheduler_step`` hook (with its monitored metric)."""
    metric = None
    if config.reduce_on_plateau and config.monitor is not None:
        if config.monitor not in metrics:
            message = (f"lr_scheduler monitors {config.monitor!r}, which was not logged; logged metrics: "
                       f"{sorted(metrics)}")
            if config.strict:
                raise KeyError(message)
            import warnings

            warnings.warn(message + " (strict=False: the scheduler is not stepped)", UserWarning, stacklevel=2)
            return
        metric = metrics[config.monitor]
    call_hook(config.scheduler, metric)
