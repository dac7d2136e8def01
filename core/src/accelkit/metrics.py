"""What ``Module.log`` records, kept on the device until it is read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from accelkit.utils import batch_size_of

_REDUCERS = ("mean", "sum", "max", "min")


@dataclass
class _Entry:
    on_step: bool
    on_epoch: bool
    prog_bar: bool
    logger: bool
    reduce_fx: str
    sync_dist: bool
    step_value: Any = None
    total: Any = None
    weight: Any = 0.0


class MetricStore:
    """Collects logged values for one loop (training, validation, test).

    Values stay tensors (on the device) until :meth:`read_step` or :meth:`compute_epoch` converts them, so a
    lazy device is not forced to run per step just because something was logged.
    """

    def __init__(self) -> None:
        self.entries: dict[str, _Entry] = {}
        self.training = True
        self.current_batch: Any = None
        #: after :meth:`compute_epoch`: plain names of metrics logged both per step and per epoch, with their
        #: epoch value (``loss`` for ``loss_epoch``), for callbacks and schedulers
        self.epoch_aliases: dict[str, float] = {}
        #: set while an ``on_*_epoch_end`` hook runs: logs there default to epoch values
        self.epoch_end = False

    def reset(self, training: bool) -> None:
        """Start a new epoch of a loop."""
        self.entries = {}
        self.training = training
        self.epoch_aliases = {}
        self.epoch_end = False

    def log(self, name: str, value: Any, *, prog_bar: bool, logger: bool, on_step: bool | None,
            on_epoch: bool | None, reduce_fx: str, sync_dist: bool, batch_size: int | None) -> None:
        if reduce_fx not in _REDUCERS:
            raise ValueError(f"log({name!r}): reduce_fx={reduce_fx!r} is not one of {_REDUCERS}")
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ValueError(f"log({name!r}): expected a scalar, got a tensor of shape {tuple(value.shape)}")
            value = value.detach().reshape(())
            if not value.is_floating_point():
                value = value.float()
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)
        else:
            raise TypeError(f"log({name!r}): value must be a number or a scalar tensor, not {type(value).__name__}")
        on_step = (self.training and not self.epoch_end) if on_step is None else on_step
        on_epoch = (not self.training or self.epoch_end) if on_epoch is None else on_epoch
        entry = self.entries.get(name)
        if entry is None:
            entry = self.entries[name] = _Entry(on_step, on_epoch, prog_bar, logger, reduce_fx, sync_dist)
        entry.step_value = value
        if on_epoch:
            weight = float(batch_size if batch_size is not None else batch_size_of(self.current_batch))
            if reduce_fx == "mean":
                contribution = value * weight
                entry.total = contribution if entry.total is None else entry.total + contribution
                entry.weight += weight
            elif reduce_fx == "sum":
                entry.total = value if entry.total is None else entry.total + value
            elif reduce_fx == "max":
                entry.total = value if entry.total is None else _maximum(entry.total, value)
            else:
                entry.total = value if entry.total is None else _minimum(entry.total, value)

    def read_step(self, clear: bool = True) -> tuple[dict[str, float], dict[str, float]]:
        """Per-step values logged since the last read, as floats: ``(for the logger, for the progress bar)``.

        One host read per value. ``clear=False`` keeps them for the next read (a display-only peek), so a
        value logged once is not reported again at later steps.
        """
        log, bar = {}, {}
        for name, entry in self.entries.items():
            if not entry.on_step or entry.step_value is None:
                continue
            key = f"{name}_step" if entry.on_epoch else name
            value = float(entry.step_value)
            if clear:
                entry.step_value = None
            if entry.logger:
                log[key] = value
            if entry.prog_bar:
                bar[name] = value
        return log, bar

    def compute_epoch(self, reduce: Callable[[torch.Tensor, str], torch.Tensor],
                      exclude: set[str] | frozenset[str] = frozenset()) -> tuple[dict[str, float], dict[str, float]]:
        """Epoch aggregates as floats, reduced across processes where ``sync_dist`` asks: ``(logger, bar)``.

        Every process must call this together (it may run collectives). ``exclude``: names already computed.
        """
        log, bar = {}, {}
        for name, entry in self.entries.items():
            if not entry.on_epoch or entry.total is None or name in exclude:
                continue
            total = entry.total if isinstance(entry.total, torch.Tensor) else torch.tensor(entry.total)
            value = total / entry.weight if entry.reduce_fx == "mean" else total
            if entry.sync_dist:
                value = reduce(value, "mean" if entry.reduce_fx == "mean" else entry.reduce_fx)
            key = f"{name}_epoch" if entry.on_step else name
            result = float(value)
            if entry.on_step:
                self.epoch_aliases[name] = result
            if entry.logger:
                log[key] = result
            if entry.prog_bar:
                bar[name] = result
        return log, bar


def _maximum(a: Any, b: Any) -> Any:
    return torch.maximum(a, b) if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) else max(a, b)


def _minimum(a: Any, b: Any) -> Any:
    return torch.minimum(a, b) if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) else min(a, b)
