"""The learning-rate range test: train a few steps while the learning rate grows, and watch the loss.

:func:`lr_find` runs ``num_training`` optimizer steps of a ``fit`` with the learning rate raised before each step,
from ``min_lr`` to ``max_lr`` (geometrically or linearly), records the smoothed training loss of every step and
stops early once that loss diverges. The module's weights, the optimizer and the Trainer are then put back as they
were. The :class:`LRFinder` it returns holds the curve (``results``), proposes a learning rate
(:meth:`LRFinder.suggestion`) and draws the curve (:meth:`LRFinder.plot`, with matplotlib).
"""

from __future__ import annotations

import copy
import math
import numbers
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from accelkit.callbacks.base import Callback
from accelkit.errors import ConfigurationError
from accelkit.tuner.session import TuningSession, attribute_holders, check_tunable, set_attribute

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure

    from accelkit.module.datamodule import DataModule
    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer
    from accelkit.tuner.session import Holders

#: how the learning rate grows from ``min_lr`` to ``max_lr``
MODES = ("exponential", "linear")
#: names the learning rate is looked for under when ``attr_name`` is not given (as in Lightning)
LR_ATTRIBUTES = ("lr", "learning_rate")


class LRFinder:
    """The outcome of :meth:`Tuner.lr_find <accelkit.tuner.Tuner.lr_find>`.

    :ivar results: ``{"lr": [...], "loss": [...]}``: the learning rate of each step taken and the smoothed
        training loss after it (an exponential moving average with bias correction, ``beta=0.98``).
    :ivar raw_losses: the unsmoothed loss of each step.
    :ivar stopped_early: whether the sweep stopped before ``num_training`` steps because the loss diverged.
    :ivar optimal_index: the index in ``results`` of the last :meth:`suggestion` (``None`` before one, or when
        there was none).
    """

    def __init__(self, mode: str, lr_min: float, lr_max: float, num_training: int) -> None:
        self.mode, self.lr_min, self.lr_max, self.num_training = mode, lr_min, lr_max, num_training
        self.results: dict[str, list[float]] = {"lr": [], "loss": []}
        self.raw_losses: list[float] = []
        self.stopped_early = False
        self.optimal_index: int | None = None

    def lr_at(self, step: int) -> float:
        """The learning rate of step ``step`` (0-based): ``min_lr`` at the first step, ``max_lr`` at the last."""
        if self.num_training <= 1:
            return self.lr_min
        fraction = step / (self.num_training - 1)
        if self.mode == "linear":
            return self.lr_min + (self.lr_max - self.lr_min) * fraction
        return self.lr_min * (self.lr_max / self.lr_min) ** fraction

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The learning rate where the smoothed loss falls fastest: the steepest descent of the curve as
        :meth:`plot` draws it (against log10 of the learning rate in ``exponential`` mode, against the learning
        rate in ``linear`` mode), each slope taken from the points a twentieth of the curve away on either side
        (at least the neighbours), so that a sustained fall outweighs step-to-step noise. The first
        ``skip_begin`` and the last ``skip_end`` points are left out, so are points whose loss is not finite, and
        so is everything after the lowest loss (where the curve rises again, a dip is not a descent). ``None``,
        with a warning, when fewer than two points remain.
        """
        for name, value in (("skip_begin", skip_begin), ("skip_end", skip_end)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"LRFinder.suggestion({name}={value!r}): give an int >= 0")
        lrs, losses = self.results["lr"], self.results["loss"]
        finite = [i for i in range(skip_begin, len(losses) - skip_end) if math.isfinite(losses[i])]
        lowest = min(finite, key=losses.__getitem__) if finite else -1
        kept = [i for i in finite if i <= lowest]
        if len(kept) < 2:
            warnings.warn(
                f"LRFinder.suggestion(): {len(kept)} usable point(s) of the {len(losses)} recorded (the first "
                f"{skip_begin} and last {skip_end} left out, and those after the lowest loss), and at least 2 are "
                "needed. Run more steps (num_training) or give a smaller skip_begin/skip_end; if the loss rose from "
                "the start, lower min_lr; if the sweep stopped early, lower max_lr or raise early_stop_threshold",
                UserWarning, stacklevel=2)
            self.optimal_index = None
            return None
        x = [math.log10(lrs[i]) if self.mode == "exponential" else lrs[i] for i in kept]
        y = [losses[i] for i in kept]
        # The slope at each point spans a twentieth of the curve on each side: a sustained fall outweighs the
        # step-to-step noise of the early, briefly averaged points that a one-step difference would follow.
        reach = max(1, round(len(losses) / 20))
        slopes = []
        for j in range(len(kept)):
            left, right = max(0, j - reach), min(len(kept) - 1, j + reach)
            slopes.append((y[right] - y[left]) / (x[right] - x[left]))
        self.optimal_index = kept[min(range(len(kept)), key=slopes.__getitem__)]
        return lrs[self.optimal_index]

    def plot(self, suggest: bool = False, show: bool = False, ax: Axes | None = None) -> Figure | SubFigure:
        """Draw the smoothed loss against the learning rate (a log axis in ``exponential`` mode) with matplotlib
        and return the figure. ``suggest=True`` marks :meth:`suggestion`'s point; ``show=True`` calls
        ``matplotlib.pyplot.show()``; ``ax`` draws into existing axes instead of a new figure."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as exc:
            raise ImportError("LRFinder.plot() draws with matplotlib, which is not installed here: "
                              "pip install matplotlib (the curve itself is in lr_finder.results)") from exc
        figure: Figure | SubFigure
        if ax is None:
            figure, ax = plt.subplots()
        else:
            figure = ax.figure
        lrs, losses = self.results["lr"], self.results["loss"]
        ax.plot(lrs, losses)
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("Learning rate")
        ax.set_ylabel("Loss (smoothed)")
        index = self.optimal_index if suggest and self.suggestion() is not None else None
        if index is not None:
            ax.plot(lrs[index], losses[index], marker="o", markersize=10, color="red")
        if show:
            plt.show()
        return figure

    def __repr__(self) -> str:
        return (f"LRFinder(mode={self.mode!r}, min_lr={self.lr_min}, max_lr={self.lr_max}, "
                f"steps={len(self.results['lr'])}/{self.num_training}, stopped_early={self.stopped_early})")


class _LRSweep(Callback):
    """Sets the learning rate before each optimizer step and records the loss after it."""

    beta = 0.98

    def __init__(self, finder: LRFinder, early_stop_threshold: float | None) -> None:
        self.finder, self.threshold = finder, early_stop_threshold
        self.optimizers: list[torch.optim.Optimizer] = []
        self.optimizer_states: list[dict[str, Any]] = []  # torch's Optimizer.state_dict()
        self._window: list[float] = []
        self._steps_seen = 0
        self._average = 0.0
        self._best = math.inf

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        optimizers = list(trainer.optimizers)
        if len(optimizers) != 1:
            raise ConfigurationError(f"Tuner.lr_find() sweeps the learning rate of one optimizer, and "
                                     f"{type(pl_module).__name__}.configure_optimizers() returned {len(optimizers)}; "
                                     "tune a module that returns one optimizer")
        # An optimizer the module keeps between fits gets its state back after the sweep.
        self.optimizers = optimizers
        self.optimizer_states = [copy.deepcopy(o.state_dict()) for o in optimizers]
        # The sweep sets the learning rate itself: the module's schedulers do not step during it.
        trainer.lr_scheduler_configs.clear()

    def on_train_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int) -> None:
        lr = self.finder.lr_at(trainer.global_step)
        for optimizer in self.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = lr

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            self._window.append(float(loss.detach().float().mean()))
        if trainer.global_step <= self._steps_seen or not self._window:
            return  # inside an accumulation window, or a batch training_step skipped
        self._steps_seen = trainer.global_step
        self._record(trainer, sum(self._window) / len(self._window))
        self._window = []

    def _record(self, trainer: Trainer, loss: float) -> None:
        finder = self.finder
        count = len(finder.raw_losses)
        self._average = self.beta * self._average + (1 - self.beta) * loss
        smoothed = self._average / (1 - self.beta ** (count + 1))
        finder.raw_losses.append(loss)
        finder.results["lr"].append(finder.lr_at(trainer.global_step - 1))  # the rate of the step just taken
        finder.results["loss"].append(smoothed)
        if self.threshold is not None and count > 1 and not (smoothed <= self.threshold * self._best):
            finder.stopped_early = trainer.should_stop = True  # diverged (or no longer a number)
        if smoothed < self._best:
            self._best = smoothed


def check_lr_arguments(min_lr: object, max_lr: object, num_training: object, mode: object,
                       early_stop_threshold: object) -> None:
    """Refuse values the sweep cannot use, naming each."""
    problems = []
    if mode not in MODES:
        problems.append(f"mode={mode!r}: use 'exponential' (the learning rate grows geometrically) or 'linear'")
    for name, value in (("min_lr", min_lr), ("max_lr", max_lr)):
        if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            problems.append(f"{name}={value!r}: give a finite learning rate >= 0")
    if not problems and isinstance(min_lr, numbers.Real) and isinstance(max_lr, numbers.Real):  # both are, by now
        if not min_lr < max_lr:
            problems.append(f"min_lr={min_lr!r} must be smaller than max_lr={max_lr!r}")
        elif mode == "exponential" and min_lr <= 0:
            problems.append(f"min_lr={min_lr!r}: mode='exponential' multiplies the learning rate, so it must start "
                            "above 0 (the default is 1e-8)")
    if not isinstance(num_training, int) or isinstance(num_training, bool) or num_training < 1:
        problems.append(f"num_training={num_training!r}: give the number of steps (learning rates) to try, >= 1")
    if early_stop_threshold is not None and (not isinstance(early_stop_threshold, numbers.Real) or
                                             isinstance(early_stop_threshold, bool) or early_stop_threshold <= 0):
        problems.append(f"early_stop_threshold={early_stop_threshold!r}: give a number > 0 (the sweep stops once "
                        "the loss exceeds it times the best loss so far) or None to run every step")
    if problems:
        raise ConfigurationError([f"Tuner.lr_find(): {p}" for p in problems])


def lr_attribute(model: object, attr_name: str) -> tuple[str, Holders]:
    """The learning rate's name and where it is kept (``attr_name``, else ``lr`` or ``learning_rate``)."""
    names = [attr_name] if attr_name else list(LR_ATTRIBUTES)
    for name in names:
        holders = attribute_holders(name, model)
        if holders:
            return name, holders
    where = f"{type(model).__name__} or its hparams"
    if attr_name:
        raise AttributeError(f"Tuner.lr_find(attr_name={attr_name!r}): {where} has no {attr_name!r} to set the "
                             "suggested learning rate in; name an attribute it has, or pass update_attr=False")
    raise AttributeError(f"Tuner.lr_find(update_attr=True) sets the suggested learning rate in self.lr or "
                         f"self.learning_rate (or hparams.lr / hparams.learning_rate), and {where} has none of "
                         "them; pass attr_name='<your attribute>', or update_attr=False and read "
                         "lr_finder.suggestion() yourself")


def lr_find(trainer: Trainer, model: Module, train_dataloaders: Iterable[object] | DataModule | None = None,
            val_dataloaders: Iterable[object] | None = None, datamodule: DataModule | None = None,
            min_lr: float = 1e-8, max_lr: float = 1.0, num_training: int = 100,
            mode: str = "exponential", early_stop_threshold: float | None = 4.0, update_attr: bool = True,
            attr_name: str = "") -> LRFinder | None:
    """Run the range test on ``trainer`` (see :meth:`accelkit.tuner.Tuner.lr_find`)."""
    check_tunable(trainer, "lr_find")
    check_lr_arguments(min_lr, max_lr, num_training, mode, early_stop_threshold)
    if trainer.fast_dev_run:
        warnings.warn(f"Tuner.lr_find() skipped: fast_dev_run={trainer.fast_dev_run!r} runs every loop for a batch "
                      "or a few only, too few for a learning-rate sweep; returns None", UserWarning, stacklevel=3)
        return None
    name, holders = lr_attribute(model, attr_name) if update_attr else ("", [])
    if val_dataloaders is not None:
        warnings.warn("Tuner.lr_find(val_dataloaders=...): the sweep follows the training loss only and does not "
                      "validate; the validation loaders are not used", UserWarning, stacklevel=3)
    finder = LRFinder(mode, float(min_lr), float(max_lr), num_training)
    sweep = _LRSweep(finder, early_stop_threshold)
    with TuningSession(trainer, model, sweep) as session:
        session.configure(max_steps=num_training, max_epochs=-1, num_sanity_val_steps=0, limits={"validate": 0})
        try:
            trainer.fit(model, train_dataloaders, datamodule=datamodule)
        finally:
            for optimizer, state in zip(sweep.optimizers, sweep.optimizer_states, strict=True):
                optimizer.load_state_dict(state)
    taken = len(finder.results["lr"])
    if taken == 0:
        raise RuntimeError(f"Tuner.lr_find(): the sweep recorded no loss: {type(model).__name__}.training_step "
                           "must return the loss (a tensor, or a dict with 'loss') for the steps it takes")
    ended = "stopped early: the loss diverged" if finder.stopped_early else "done"
    print(f"accelkit: lr_find: {taken} of {num_training} steps from lr={finder.results['lr'][0]:.3g} to "
          f"{finder.results['lr'][-1]:.3g} ({ended}); weights, optimizer and Trainer restored.")
    if update_attr:
        lr = finder.suggestion()
        if lr is None:
            warnings.warn(f"Tuner.lr_find(update_attr=True): no suggestion, so {name} keeps its value",
                          UserWarning, stacklevel=3)
        else:
            set_attribute(holders, name, lr)
            print(f"accelkit: lr_find: learning rate set to {lr:.6g} ({', '.join(label for label, _ in holders)}).")
    return finder
