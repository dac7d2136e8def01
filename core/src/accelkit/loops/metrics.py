"""What ``Module.log`` records, kept on the device until it is read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from accelkit.utilities.apply_func import batch_size_of

_REDUCERS = ("mean", "sum", "max", "min")
#: ``reduce_fx`` as given (a name or a torch function) -> its name
_REDUCE_FX: dict[Any, str] = {**{name: name for name in _REDUCERS}, torch.mean: "mean", torch.sum: "sum",
                              torch.max: "max", torch.min: "min"}


def is_metric_object(value: Any) -> bool:
    """Whether ``value`` is a metric object (``update``/``compute``/``reset``, as a torchmetrics ``Metric``)."""
    return not isinstance(value, torch.Tensor) and all(
        callable(getattr(value, name, None)) for name in ("update", "compute", "reset"))


@dataclass
class _Entry:
    on_step: bool
    on_epoch: bool
    prog_bar: bool
    logger: bool
    reduce_fx: str
    sync_dist: bool
    rank_zero_only: bool = False
    step_value: Any = None
    total: Any = None
    weight: Any = 0.0
    metric: Any = None  # a metric object: its compute() is the epoch value


class MetricStore:
    """Collects logged values for one loop (training, validation, test).

    Values stay tensors (on the device) until :meth:`read_step` or :meth:`compute_epoch` converts them, so a
    lazy device is not forced to run per step just because something was logged.
    """

    def __init__(self) -> None:
        self.entries: dict[str, _Entry] = {}
        self.training = True
        self.current_batch: Any = None
        #: index of the evaluation loader being run, and how many there are (names get a suffix when > 1)
        self.dataloader_idx = 0
        self.num_dataloaders = 1
        #: after :meth:`compute_epoch`: plain names of metrics logged both per step and per epoch, with their
        #: epoch value (``loss`` for ``loss_epoch``), for callbacks and schedulers
        self.epoch_aliases: dict[str, float] = {}
        #: set while an ``on_*_epoch_end`` hook runs: logs there default to epoch values
        self.epoch_end = False
        #: this process is global rank zero (values logged with ``rank_zero_only`` elsewhere are dropped)
        self.is_global_zero = True
        #: names logged with ``rank_zero_only=True`` (known on every rank)
        self.rank_zero_only_names: set[str] = set()

    def reset_metric_objects(self) -> None:
        """Reset the metric objects logged this epoch (after their epoch value is published, as Lightning does)."""
        for entry in self.entries.values():
            if entry.metric is not None:
                entry.metric.reset()

    def reset(self, training: bool) -> None:
        """Start a new epoch of a loop (metric objects logged last epoch are reset)."""
        self.reset_metric_objects()
        self.entries = {}
        self.training = training
        self.epoch_aliases = {}
        self.epoch_end = False

    def log(self, name: str, value: Any, prog_bar: bool, logger: bool, on_step: bool | None,
            on_epoch: bool | None, reduce_fx: Any, sync_dist: bool, batch_size: int | None,
            rank_zero_only: bool = False, add_dataloader_idx: bool = True) -> None:
        """Record one value (see :meth:`accelkit.Module.log`). Called every step: the common case (a scalar
        tensor) takes a few attribute reads besides the ``detach``."""
        try:
            reduce_fx = _REDUCE_FX[reduce_fx]
        except (KeyError, TypeError):
            also = " (or torch.mean/sum/max/min)" if callable(reduce_fx) else ""
            raise ValueError(f"log({name!r}): reduce_fx={reduce_fx!r} is not one of {_REDUCERS}{also}") from None
        if add_dataloader_idx and self.num_dataloaders > 1:
            name = f"{name}/dataloader_idx_{self.dataloader_idx}"
        if rank_zero_only:
            self.rank_zero_only_names.add(name)
            if not self.is_global_zero:
                return
        metric = None
        if isinstance(value, torch.Tensor):
            if value.ndim:  # a zero-dimensional tensor holds one value; others must hold exactly one
                if value.numel() != 1:
                    raise ValueError(f"log({name!r}): expected a scalar, got a tensor of shape {tuple(value.shape)}")
                value = value.reshape(())
            value = value.detach()
            if not value.is_floating_point():
                value = value.float()
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)
        elif is_metric_object(value):
            metric = value
        else:
            raise TypeError(f"log({name!r}): value must be a number, a scalar tensor or a metric object with "
                            f"update/compute/reset, not {type(value).__name__}")
        on_step = (self.training and not self.epoch_end) if on_step is None else on_step
        on_epoch = (not self.training or self.epoch_end) if on_epoch is None else on_epoch
        entry = self.entries.get(name)
        if entry is None:
            entry = self.entries[name] = _Entry(on_step, on_epoch, prog_bar, logger, reduce_fx, sync_dist,
                                                rank_zero_only)
        if metric is not None:
            # A metric object keeps its own state (and syncs it across processes in compute()); the step value
            # is what its forward() returned last, read when the step value is read.
            entry.metric = metric
            entry.step_value = getattr(metric, "_forward_cache", None) if on_step else None
            if entry.step_value is None and on_step:
                entry.step_value = metric
            return
        entry.step_value = value
        if on_epoch:
            if reduce_fx == "mean":
                weight = float(batch_size if batch_size is not None else batch_size_of(self.current_batch))
                contribution = value * weight
                entry.total = contribution if entry.total is None else entry.total + contribution
                entry.weight += weight
            elif reduce_fx == "sum":
                entry.total = value if entry.total is None else entry.total + value
            elif reduce_fx == "max":
                entry.total = value if entry.total is None else _maximum(entry.total, value)
            else:
                entry.total = value if entry.total is None else _minimum(entry.total, value)

    def read_step(self, clear: bool = True, to_host: bool = True) -> tuple[dict[str, Any], dict[str, float]]:
        """Per-step values logged since the last read: ``(for the logger, for the progress bar)``.

        The progress bar's are floats (one host read each). The logger's are floats too, unless ``to_host`` is
        ``False`` (nobody writes them out: no logger), when they stay as logged, tensors on the device, and only
        the progress bar's values are read. ``clear=False`` keeps them for the next read (a display-only peek),
        so a value logged once is not reported again at later steps.
        """
        log: dict[str, Any] = {}
        bar: dict[str, float] = {}
        for name, entry in self.entries.items():
            if not entry.on_step or entry.step_value is None:
                continue
            key = f"{name}_step" if entry.on_epoch else name
            raw = entry.step_value
            value = raw.compute() if is_metric_object(raw) else raw
            if to_host or entry.prog_bar:
                value = float(value)
            if clear:
                entry.step_value = None
            if entry.logger:
                log[key] = value
            if entry.prog_bar:
                bar[name] = value
        return log, bar

    def latest_step_values(self) -> dict[str, torch.Tensor]:
        """The last per-step value of every metric logged on step, as detached CPU tensors, without clearing
        them (no logger sees them here)."""
        values = {}
        for name, entry in self.entries.items():
            raw = entry.step_value
            if not entry.on_step or raw is None:
                continue
            if is_metric_object(raw):
                raw = raw.compute()
            key = f"{name}_step" if entry.on_epoch else name
            values[key] = raw.detach().cpu() if isinstance(raw, torch.Tensor) else torch.tensor(float(raw))
        return values

    def compute_epoch(self, reduce: Callable[[torch.Tensor, str], torch.Tensor],
                      exclude: set[str] | frozenset[str] = frozenset()) -> tuple[dict[str, float], dict[str, float]]:
        """Epoch aggregates as floats, reduced across processes where ``sync_dist`` asks: ``(logger, bar)``.

        Every process must call this together (it may run collectives). ``exclude``: names already computed.
        """
        log, bar = {}, {}
        for name, entry in self.entries.items():
            if not entry.on_epoch or name in exclude:
                continue
            if entry.metric is not None:
                value = entry.metric.compute()
                value = value if isinstance(value, torch.Tensor) else torch.tensor(float(value))
            elif entry.total is None:
                continue
            else:
                total = entry.total if isinstance(entry.total, torch.Tensor) else torch.tensor(entry.total)
                value = total / entry.weight if entry.reduce_fx == "mean" else total
                if entry.sync_dist and not entry.rank_zero_only:
                    value = reduce(value, entry.reduce_fx)
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
