"""``GradientAccumulationScheduler``: change how many batches are accumulated per optimizer step, by epoch."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from accelkit.callbacks.base import Callback
from accelkit.errors import ConfigurationError

if TYPE_CHECKING:
    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer


class GradientAccumulationScheduler(Callback):
    """Set ``trainer.accumulate_grad_batches`` at the start of every training epoch from a schedule.

    :param scheduling: ``{epoch: factor}``: from ``epoch`` (0-based) on, sum the gradients of ``factor`` batches
        per optimizer step. Epochs before the first key accumulate 1 batch.

    Example: ``GradientAccumulationScheduler(scheduling={4: 2, 8: 4})`` steps every batch in epochs 0-3, every
    2 batches in epochs 4-7 and every 4 batches from epoch 8 on. As in Lightning, it needs automatic
    optimization and cannot be combined with ``Trainer(accumulate_grad_batches=N)`` for ``N != 1``; the last
    batch of an epoch always ends its accumulation window.
    """

    def __init__(self, scheduling: dict[int, int]) -> None:
        if not isinstance(scheduling, dict):
            raise TypeError(f"GradientAccumulationScheduler(scheduling={scheduling!r}): expected a dict "
                            "{epoch: factor}, e.g. {0: 1, 4: 2}")
        if not scheduling:
            raise TypeError("GradientAccumulationScheduler(scheduling={}): the schedule is empty; give at least one "
                            "{epoch: factor} entry, e.g. {0: 2}")
        bad_epochs = [k for k in scheduling if not _is_int(k) or k < 0]
        bad_factors = [v for v in scheduling.values() if not _is_int(v) or v < 1]
        problems = []
        if bad_epochs:
            problems.append(f"GradientAccumulationScheduler: the epochs {bad_epochs!r} are not ints >= 0 (the keys "
                            f"of scheduling={scheduling!r} are 0-based epoch numbers)")
        if bad_factors:
            problems.append(f"GradientAccumulationScheduler: the factors {bad_factors!r} are not ints >= 1 (the "
                            f"values of scheduling={scheduling!r} count the batches per optimizer step)")
        if problems:
            raise ConfigurationError(problems)
        schedule = dict(scheduling)
        schedule.setdefault(0, 1)
        self.scheduling: dict[int, int] = dict(sorted(schedule.items()))
        self.epochs: list[int] = sorted(self.scheduling)
        self._applied: int | None = None  # the factor this callback last set on a trainer

    def going_to_accumulate_grad_batches(self) -> bool:
        """Whether any epoch accumulates more than one batch."""
        return any(factor > 1 for factor in self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        """The factor for ``epoch`` (0-based)."""
        factor = 1
        for start in self.epochs:
            if epoch < start:
                break
            factor = self.scheduling[start]
        return factor

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """Refuse a Trainer that also sets ``accumulate_grad_batches``."""
        if stage != "fit":
            return
        current = trainer.accumulate_grad_batches
        if current != 1 and current != self._applied:
            raise ConfigurationError(
                f"Trainer(accumulate_grad_batches={current}) and a GradientAccumulationScheduler both set the "
                "accumulation; remove accumulate_grad_batches from the Trainer (or put it in the schedule, "
                f"e.g. GradientAccumulationScheduler({{0: {current}}})), or remove the callback")

    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Refuse manual optimization; warn when the module's optimizer hooks will not run every batch."""
        if not pl_module.automatic_optimization:
            raise RuntimeError(
                f"GradientAccumulationScheduler needs automatic optimization, but {type(pl_module).__name__} sets "
                "automatic_optimization=False; accumulate in training_step (step every N batches) and remove the "
                "callback, or switch to automatic optimization")
        from accelkit.module import Module

        overridden = [name for name in ("optimizer_step", "optimizer_zero_grad")
                      if getattr(type(pl_module), name, None) is not getattr(Module, name)]
        if overridden and self.going_to_accumulate_grad_batches():
            warnings.warn(
                f"{type(pl_module).__name__} overrides {' and '.join(overridden)}, and the "
                f"GradientAccumulationScheduler accumulates batches ({self.scheduling}): those hooks run once per "
                "optimizer step, not every batch.", UserWarning, stacklevel=2)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Set this epoch's factor on the trainer."""
        factor = self.get_accumulate_grad_batches(trainer.current_epoch)
        trainer.accumulate_grad_batches = factor
        self._applied = factor


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
