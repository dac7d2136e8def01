"""``EarlyStopping``: stop ``fit`` when a monitored metric stops improving (Lightning 2.x behaviour)."""

from __future__ import annotations

import enum
import logging
import math
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from accelkit.callbacks.base import Callback, monitored_score
from accelkit.errors import ConfigurationError

if TYPE_CHECKING:
    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer

log = logging.getLogger(__name__)


class EarlyStoppingReason(enum.Enum):
    """Why :class:`EarlyStopping` stopped a run (``early_stopping.stopping_reason``), as in Lightning."""

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


class EarlyStopping(Callback):
    """Stop training when ``monitor`` has not improved for ``patience`` checks.

    :param monitor: the metric to watch (a name in ``trainer.callback_metrics``, logged with ``self.log``).
    :param min_delta: an improvement must exceed this much; a smaller change counts as none.
    :param patience: checks without improvement after which training stops. A check happens once per
        validation run (or per training epoch when checking there), so with ``check_val_every_n_epoch=10`` and
        ``patience=3`` at least 40 epochs run.
    :param verbose: log each improvement and the reason for stopping.
    :param mode: ``"min"`` (lower is better) or ``"max"``.
    :param strict: raise when ``monitor`` was not logged (``False``: skip the check, warning if ``verbose``).
    :param check_finite: stop as soon as the metric is NaN or infinite.
    :param stopping_threshold: stop as soon as the metric is better than this.
    :param divergence_threshold: stop as soon as the metric is worse than this.
    :param check_on_train_epoch_end: check at the end of the training epoch (``True``) or after validation
        (``False``). ``None``: at the end of the training epoch when validation runs once at the end of every
        epoch or not at all, otherwise after validation.
    :param log_rank_zero_only: log the messages from the global-zero process only.

    The decision is the same in every process: if any process decides to stop, all stop. Checks are skipped
    during the sanity check, with ``fast_dev_run`` and outside ``fit``. After the run, ``stopped_epoch``,
    ``stopping_reason`` and ``stopping_reason_message`` tell when and why it stopped.
    """

    monitors_metrics = True  # the loops run its epoch-end hooks after the Module's, to see what it logged
    mode_dict = {"min": torch.lt, "max": torch.gt}
    order_dict = {"min": "<", "max": ">"}

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        log_rank_zero_only: bool = False,
    ) -> None:
        problems = []
        if mode not in self.mode_dict:
            problems.append(f"EarlyStopping(mode={mode!r}): mode must be 'min' or 'max'.")
        if not isinstance(monitor, str) or not monitor:
            problems.append(f"EarlyStopping(monitor={monitor!r}): name the metric to watch.")
        if not isinstance(patience, int) or patience < 0:
            problems.append(f"EarlyStopping(patience={patience!r}): must be an int >= 0.")
        if problems:
            raise ConfigurationError(problems)
        self.monitor = monitor
        self.patience = patience
        self.verbose = verbose
        self.mode = mode
        self.strict = strict
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.log_rank_zero_only = log_rank_zero_only
        self._check_on_train_epoch_end = check_on_train_epoch_end
        # Signed so that "current - min_delta better than best" reads the same in both modes.
        self.min_delta = abs(min_delta) if mode == "max" else -abs(min_delta)
        self.wait_count = 0
        self.stopped_epoch = 0
        self.best_score = torch.tensor(math.inf if mode == "min" else -math.inf)
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None

    @property
    def state_key(self) -> str:
        """Key of this callback's state in a checkpoint: the class name with ``monitor`` and ``mode``."""
        return self._generate_state_key(monitor=self.monitor, mode=self.mode)

    @property
    def monitor_op(self) -> Callable[[torch.Tensor, torch.Tensor | float], torch.Tensor]:
        """``torch.lt`` in ``"min"`` mode, ``torch.gt`` in ``"max"`` mode: whether the first value is better."""
        return self.mode_dict[self.mode]

    # ----------------------------------------------------------------- hooks
    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """Decide where the check runs when ``check_on_train_epoch_end`` was not given."""
        if self._check_on_train_epoch_end is None:
            self._check_on_train_epoch_end = (getattr(trainer, "val_check_interval", 1.0) == 1.0
                                              and getattr(trainer, "check_val_every_n_epoch", 1) == 1)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Check here when checking at the end of the training epoch."""
        if self._check_here(trainer, at_train_epoch_end=True):
            self._run_early_stopping_check(trainer)

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        """Check here when checking after validation."""
        if self._check_here(trainer, at_train_epoch_end=False):
            self._run_early_stopping_check(trainer)

    def state_dict(self) -> dict[str, object]:
        """``wait_count``, ``stopped_epoch``, ``best_score``, ``patience`` and the stopping reason (plain data), as
        Lightning saves them: the reason as its ``EarlyStoppingReason`` number, so that either Trainer resumes
        from the other's checkpoint."""
        return {
            "wait_count": self.wait_count,
            "stopped_epoch": self.stopped_epoch,
            "best_score": self.best_score,
            "patience": self.patience,
            "stopping_reason": self.stopping_reason.value,
            "stopping_reason_message": self.stopping_reason_message,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (or Lightning's ``EarlyStopping``; a reason saved by name, as
        accelkit 0.1 did, is read too)."""
        self.wait_count = state_dict["wait_count"]
        self.stopped_epoch = state_dict["stopped_epoch"]
        self.best_score = torch.as_tensor(state_dict["best_score"])
        self.patience = state_dict["patience"]
        reason = state_dict.get("stopping_reason", EarlyStoppingReason.NOT_STOPPED.value)
        try:
            self.stopping_reason = EarlyStoppingReason[reason] if isinstance(reason, str) \
                else EarlyStoppingReason(reason)
        except (KeyError, ValueError):
            known = ", ".join(f"{r.value} ({r.name})" for r in EarlyStoppingReason)
            raise ValueError(f"EarlyStopping state: stopping_reason={reason!r} is not a stopping reason; expected one "
                             f"of {known}") from None
        self.stopping_reason_message = state_dict.get("stopping_reason_message")

    # ----------------------------------------------------------------- the check
    def _check_here(self, trainer: Trainer, at_train_epoch_end: bool) -> bool:
        fn = getattr(getattr(trainer, "state", None), "fn", None)
        if getattr(fn, "value", fn) != "fit" or getattr(trainer, "sanity_checking", False):
            return False
        configured = self._check_on_train_epoch_end
        if configured is None:  # setup() was not called: decide as it would
            configured = (getattr(trainer, "val_check_interval", 1.0) == 1.0
                          and getattr(trainer, "check_val_every_n_epoch", 1) == 1)
        return bool(configured) == at_train_epoch_end

    def _validate_condition_metric(self, logs: Mapping[str, object]) -> bool:
        if logs.get(self.monitor) is not None:
            return True
        message = (f"EarlyStopping(monitor={self.monitor!r}): the metric was not logged. Log it with "
                   f"self.log({self.monitor!r}, value) or monitor one of: {', '.join(sorted(logs)) or '(none)'}.")
        if self.strict:
            raise RuntimeError(message)
        if self.verbose:
            warnings.warn(message, RuntimeWarning, stacklevel=3)
        return False

    def _run_early_stopping_check(self, trainer: Trainer) -> None:
        """Compare the monitored metric with the best so far; stop every process if any one decides to stop."""
        logs = trainer.callback_metrics
        if getattr(trainer, "fast_dev_run", False) or not self._validate_condition_metric(logs):
            return
        current = monitored_score(logs[self.monitor])
        should_stop, reason, message = self._evaluate_stopping_criteria(current)
        if getattr(trainer, "world_size", 1) > 1:
            strategy = trainer.strategy
            flag = torch.tensor(float(should_stop), device=getattr(strategy, "root_device", None))
            anyone = bool(strategy.reduce(flag, "max").item() > 0)
            if anyone and not should_stop:  # this process saw no reason; another one did
                message = "Another process's EarlyStopping check decided to stop. Signaling Trainer to stop."
            should_stop = anyone
        trainer.should_stop = bool(trainer.should_stop) or should_stop
        if should_stop:
            self.stopped_epoch = trainer.current_epoch
            self.stopping_reason = reason
            self.stopping_reason_message = message
        if message and self.verbose:
            self._log_info(trainer, message)

    def _evaluate_stopping_criteria(self, current: torch.Tensor) -> tuple[bool, EarlyStoppingReason, str | None]:
        """``(should_stop, reason, message)`` for one new value, updating ``best_score``/``wait_count``."""
        op, sign = self.monitor_op, self.order_dict[self.mode]
        if self.check_finite and not torch.isfinite(current):
            return True, EarlyStoppingReason.NON_FINITE_METRIC, (
                f"Monitored metric {self.monitor} = {float(current)} is not finite. Previous best value was "
                f"{float(self.best_score):.3f}. Signaling Trainer to stop.")
        if self.stopping_threshold is not None and op(current, self.stopping_threshold):
            return True, EarlyStoppingReason.STOPPING_THRESHOLD, (
                f"Stopping threshold reached: {self.monitor} = {float(current)} {sign} {self.stopping_threshold}. "
                "Signaling Trainer to stop.")
        if self.divergence_threshold is not None and op(-current, -self.divergence_threshold):
            return True, EarlyStoppingReason.DIVERGENCE_THRESHOLD, (
                f"Divergence threshold reached: {self.monitor} = {float(current)} {sign} "
                f"{self.divergence_threshold}. Signaling Trainer to stop.")
        if op(current - self.min_delta, self.best_score):
            if torch.isfinite(self.best_score):
                message = (f"Metric {self.monitor} improved by {abs(float(self.best_score - current)):.3f} >= "
                           f"min_delta = {abs(self.min_delta)}. New best score: {float(current):.3f}")
            else:
                message = f"Metric {self.monitor} improved. New best score: {float(current):.3f}"
            self.best_score = current
            self.wait_count = 0
            return False, EarlyStoppingReason.NOT_STOPPED, message
        self.wait_count += 1
        if self.wait_count >= self.patience:
            return True, EarlyStoppingReason.PATIENCE_EXHAUSTED, (
                f"Monitored metric {self.monitor} did not improve in the last {self.wait_count} records. Best score: "
                f"{float(self.best_score):.3f}. Signaling Trainer to stop.")
        return False, EarlyStoppingReason.NOT_STOPPED, None

    def _log_info(self, trainer: Trainer, message: str) -> None:
        rank = getattr(trainer, "global_rank", 0)
        if getattr(trainer, "world_size", 1) > 1:
            if self.log_rank_zero_only and rank != 0:
                return
            message = f"[rank: {rank}] {message}"
        log.info(message)
