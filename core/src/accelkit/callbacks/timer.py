"""``Timer``: time the training, validation, test and prediction loops, and stop training after a duration."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from accelkit.callbacks.base import Callback
from accelkit.errors import ConfigurationError

if TYPE_CHECKING:
    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer

#: the stages a Timer times (the values of Lightning's ``RunningStage`` it times)
STAGES = ("train", "validate", "test", "predict")
_INTERVALS = ("step", "epoch")
_DHMS = re.compile(r"\s*(\d+):(\d+):(\d+):(\d+)\s*")


def parse_duration(duration: object) -> float | None:
    """``duration`` in seconds: ``None``, a ``"DD:HH:MM:SS"`` string, a ``datetime.timedelta`` or a dict of
    ``timedelta`` keyword arguments (``{"hours": 2}``). Anything else raises :class:`~accelkit.ConfigurationError`."""
    if duration is None:
        return None
    if isinstance(duration, str):
        match = _DHMS.fullmatch(duration)
        if match is None:
            raise ConfigurationError(f"Timer(duration={duration!r}): a string duration must be 'DD:HH:MM:SS' "
                                     "(days, hours, minutes, seconds), e.g. '00:12:00:00' for 12 hours")
        days, hours, minutes, seconds = (int(part) for part in match.groups())
        duration = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    elif isinstance(duration, dict):
        try:
            duration = timedelta(**duration)
        except TypeError as exc:
            raise ConfigurationError(f"Timer(duration={duration!r}): the dict must hold datetime.timedelta "
                                     f"arguments (weeks, days, hours, minutes, seconds ...): {exc}") from None
    if not isinstance(duration, timedelta):
        raise ConfigurationError(f"Timer(duration={duration!r}): give a 'DD:HH:MM:SS' string, a "
                                 "datetime.timedelta or a dict of timedelta arguments (or None for no limit)")
    total = duration.total_seconds()
    if total < 0:
        raise ConfigurationError(f"Timer(duration={duration!r}): the duration must not be negative")
    return total


def _stage_name(stage: object) -> str:
    name = getattr(stage, "value", stage)  # an enum whose values are the stage names (Lightning's RunningStage)
    if name not in STAGES:
        raise ValueError(f"Timer: unknown stage {stage!r}; the stages timed are {', '.join(map(repr, STAGES))}")
    return name


class Timer(Callback):
    """Measure the time spent in the training, validation, test and prediction loops, and stop ``fit`` once
    training has lasted ``duration`` (Lightning's ``Timer``).

    The elapsed training time is checked after every training batch (``interval="step"``) or at the end of
    every training epoch (``interval="epoch"``), and once at the start of ``fit`` (a resumed run whose time is
    already spent trains no further). When it reaches ``duration`` the Timer sets ``trainer.should_stop``: the
    run ends after that batch (or epoch), as an early stop does (``min_epochs``/``min_steps`` still apply). In a
    distributed run the global-zero process decides and every process stops at the same step.

    Times are read from ``time.monotonic()``. The elapsed training time is saved in checkpoints, so a resumed
    fit continues counting from where the checkpoint was written.

    :param duration: how long to train: ``"DD:HH:MM:SS"``, a ``datetime.timedelta``, a dict of ``timedelta``
        arguments (``dict(weeks=4, days=2)``), or ``None`` to only measure.
    :param interval: ``"step"`` or ``"epoch"``: when the duration is checked.
    :param verbose: print a line when the time limit stops training.
    """

    def __init__(self, duration: str | timedelta | dict[str, int] | None = None, interval: str = "step",
                 verbose: bool = True) -> None:
        interval = getattr(interval, "value", interval)
        if interval not in _INTERVALS:
            raise ConfigurationError(f"Timer(interval={interval!r}): must be 'step' (check after every training "
                                     "batch) or 'epoch' (check at the end of every training epoch)")
        self._duration = parse_duration(duration)
        self._interval = interval
        self._verbose = verbose
        self._start: dict[str, float | None] = dict.fromkeys(STAGES)
        self._end: dict[str, float | None] = dict.fromkeys(STAGES)
        self._offset = 0.0  # training time of earlier runs, from a checkpoint

    @staticmethod
    def _now() -> float:
        """The clock (``time.monotonic``)."""
        return time.monotonic()

    @property
    def duration(self) -> float | None:
        """The training time allowed, in seconds (``None``: no limit)."""
        return self._duration

    @property
    def interval(self) -> str:
        """``"step"`` or ``"epoch"``: when the duration is checked."""
        return self._interval

    # ----------------------------------------------------------------- queries
    def start_time(self, stage: str = "train") -> float | None:
        """When ``stage`` (``"train"``, ``"validate"``, ``"test"``, ``"predict"``) last started, as a
        ``time.monotonic()`` reading; ``None`` if it has not run."""
        return self._start[_stage_name(stage)]

    def end_time(self, stage: str = "train") -> float | None:
        """When ``stage`` last ended (``time.monotonic()``); ``None`` while it runs or before it ran."""
        return self._end[_stage_name(stage)]

    def time_elapsed(self, stage: str = "train") -> float:
        """Seconds ``stage`` has run (so far, while it runs); for ``"train"`` this includes the training time
        restored from a checkpoint."""
        name = _stage_name(stage)
        offset = self._offset if name == "train" else 0.0
        start, end = self._start[name], self._end[name]
        if start is None:
            return offset
        return (self._now() if end is None else end) - start + offset

    def time_remaining(self, stage: str = "train") -> float | None:
        """``duration`` minus :meth:`time_elapsed` of ``stage`` (negative once exceeded); ``None`` without a
        duration."""
        if self._duration is None:
            return None
        return self._duration - self.time_elapsed(stage)

    # ----------------------------------------------------------------- hooks
    def _begin(self, stage: str) -> None:
        self._start[stage] = self._now()
        self._end[stage] = None

    def _finish(self, stage: str) -> None:
        self._end[stage] = self._now()

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._begin("train")

    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._finish("train")

    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._begin("validate")

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._finish("validate")

    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._begin("test")

    def on_test_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._finish("test")

    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._begin("predict")

    def on_predict_end(self, trainer: Trainer, pl_module: Module) -> None:
        self._finish("predict")

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        # a resumed run whose restored training time already exceeds the duration stops before training
        if self._duration is not None:
            self._check_time_remaining(trainer)

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._interval == "step" and self._duration is not None:
            self._check_time_remaining(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self._interval == "epoch" and self._duration is not None:
            self._check_time_remaining(trainer)

    def _check_time_remaining(self, trainer: Trainer) -> None:
        assert self._duration is not None
        elapsed = self.time_elapsed("train")
        should_stop = bool(trainer.strategy.broadcast(elapsed >= self._duration))  # global zero decides
        trainer.should_stop = bool(trainer.should_stop) or should_stop
        if should_stop and self._verbose and trainer.is_global_zero:
            print(f"accelkit: Timer: time limit reached after {timedelta(seconds=int(elapsed))} of training "
                  f"(duration {timedelta(seconds=self._duration)}); stopping the run.")

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, object]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in STAGES}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        elapsed = state_dict.get("time_elapsed", {})
        self._offset = float(elapsed.get("train", 0.0))
