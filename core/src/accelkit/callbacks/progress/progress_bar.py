"""``ProgressBar``: the base of progress-bar callbacks."""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

from accelkit.callbacks.base import Callback

if TYPE_CHECKING:
    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer


class ProgressBar(Callback):
    """Base class of progress bars (Lightning's ``ProgressBar``): a :class:`~accelkit.Callback` that follows the
    loops through the usual hooks and shows what :meth:`~accelkit.callbacks.ProgressBar.get_metrics` returns.

    Subclass it for a bar of your own: implement :meth:`disable` and :meth:`enable`, and draw from the batch hooks
    (``on_train_batch_end`` and the others). The counts of the running loops are :attr:`total_train_batches`,
    :attr:`total_val_batches_current_dataloader` and the like; ``None`` means the loader has no length. Give
    the Trainer one bar (``Trainer(callbacks=[MyBar()])``); without one it adds a
    :class:`~accelkit.callbacks.TQDMProgressBar`.

    The values a bar shows are ``trainer.progress_bar_metrics``: floats read from the device when asked (as in
    Lightning), so ask :meth:`get_metrics` only when a redraw is due.
    """

    _warned_clash = False  # warned once that a logged value replaces a standard item

    def __init__(self) -> None:
        self._trainer: Trainer | None = None
        self._current_eval_dataloader_idx: int | None = None

    # ----------------------------------------------------------------- context
    @property
    def trainer(self) -> Trainer:
        """The Trainer this bar was set up with (``setup``); an error before that."""
        if self._trainer is None:
            raise TypeError(f"The `{type(self).__name__}.trainer` reference has not been set yet: the Trainer sets "
                            "it when a run starts (ProgressBar.setup)")
        return self._trainer

    @property
    def train_description(self) -> str:
        """The training bar's label (the bar shows ``Epoch N`` while an epoch runs)."""
        return "Training"

    @property
    def validation_description(self) -> str:
        """The validation bar's label."""
        return "Validation"

    @property
    def test_description(self) -> str:
        """The test bar's label."""
        return "Testing"

    @property
    def predict_description(self) -> str:
        """The prediction bar's label."""
        return "Predicting"

    @property
    def sanity_check_description(self) -> str:
        """The sanity check's bar label."""
        return "Sanity Checking"

    # ----------------------------------------------------------------- counts
    @property
    def total_train_batches(self) -> int | None:
        """Training batches per epoch (``None``: the loader has no length, or no fit has loaded one yet)."""
        return _bar_total(self.trainer.num_training_batches)

    @property
    def total_val_batches_current_dataloader(self) -> int | None:
        """Batches of the validation loader running now (the sanity check's count during the sanity check)."""
        trainer = self.trainer
        counts = trainer.num_sanity_val_batches if trainer.sanity_checking else trainer.num_val_batches
        return _count(counts, self._current_eval_dataloader_idx)

    @property
    def total_test_batches_current_dataloader(self) -> int | None:
        """Batches of the test loader running now."""
        return _count(self.trainer.num_test_batches, self._current_eval_dataloader_idx)

    @property
    def total_predict_batches_current_dataloader(self) -> int | None:
        """Batches of the prediction loader running now."""
        return _count(self.trainer.num_predict_batches, self._current_eval_dataloader_idx)

    @property
    def total_val_batches(self) -> int | None:
        """Validation batches over every validation loader (``None`` if one has no length; 0 when validation
        does not run in this fit)."""
        trainer = self.trainer
        if trainer.state.fn == "fit" and not trainer.num_val_batches:
            return 0
        return _total(trainer.num_val_batches)

    def has_dataloader_changed(self, dataloader_idx: int) -> bool:
        """Whether ``dataloader_idx`` is another loader than the one of the previous batch (then remembered)."""
        old, self._current_eval_dataloader_idx = self._current_eval_dataloader_idx, dataloader_idx
        return old != dataloader_idx

    def reset_dataloader_idx_tracker(self) -> None:
        """Forget the loader of the previous batch (at the end of an evaluation loop)."""
        self._current_eval_dataloader_idx = None

    # ----------------------------------------------------------------- what a bar implements
    def disable(self) -> None:
        """Stop drawing (the Trainer calls it on every process but global rank zero)."""
        raise NotImplementedError(f"{type(self).__name__} must implement disable()")

    def enable(self) -> None:
        """Draw again after :meth:`disable`."""
        raise NotImplementedError(f"{type(self).__name__} must implement enable()")

    def print(self, *args: Any, **kwargs: Any) -> None:
        """Print a message without breaking the bars (here: a plain ``print``)."""
        print(*args, **kwargs)

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """Remember the Trainer; on every process but global rank zero the bar is disabled (call ``super()`` when
        you override it)."""
        self._trainer = trainer
        if not trainer.is_global_zero:
            self.disable()

    def get_metrics(self, trainer: Trainer, pl_module: Module) -> dict[str, int | str | float | dict[str, float]]:
        """What the bar shows: the standard items (``v_num``, the logger's version) and
        ``trainer.progress_bar_metrics`` (what ``self.log(..., prog_bar=True)`` recorded). Override it to change
        the items::

            def get_metrics(self, trainer, pl_module):
                items = super().get_metrics(trainer, pl_module)
                items.pop("v_num", None)
                return items
        """
        standard = get_standard_metrics(trainer)
        shown = trainer.progress_bar_metrics
        clash = sorted(standard.keys() & shown.keys())
        if clash and not self._warned_clash:
            self._warned_clash = True
            warnings.warn(f"the progress bar shows {', '.join(clash)} itself; the value logged with prog_bar=True "
                          f"under that name replaces it (log it under another name to keep both)", UserWarning,
                          stacklevel=2)
        return {**standard, **shown}

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_trainer"] = None  # sent to spawned workers with the Trainer, which sets it again there
        return state



class RefreshingProgressBar(ProgressBar):
    """What :class:`~accelkit.callbacks.TQDMProgressBar` and :class:`~accelkit.callbacks.RichProgressBar` share:
    a :attr:`refresh_rate` and the switch :meth:`disable`/:meth:`enable` turn. Subclass it for a bar that moves
    every ``refresh_rate`` batches.

    :param refresh_rate: move the bars every this many batches; ``0`` hides them.
    """

    def __init__(self, refresh_rate: int = 1) -> None:
        super().__init__()
        check_count(self, "refresh_rate", refresh_rate)
        self._refresh_rate = refresh_rate
        self._enabled = True

    @property
    def refresh_rate(self) -> int:
        """Batches between two moves of a bar (``0``: no bar)."""
        return self._refresh_rate

    @property
    def is_enabled(self) -> bool:
        """Whether the bars are drawn (enabled, and ``refresh_rate`` > 0)."""
        return self._enabled and self._refresh_rate > 0

    @property
    def is_disabled(self) -> bool:
        """Whether the bars are hidden."""
        return not self.is_enabled

    def disable(self) -> None:
        """Hide the bars (every process but global rank zero does)."""
        self._enabled = False

    def enable(self) -> None:
        """Draw the bars again."""
        self._enabled = True


def check_count(bar: object, name: str, value: object) -> None:
    """Refuse a bar's argument ``name`` unless ``value`` is an int >= 0 (``ValueError`` naming the bar)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{type(bar).__name__}({name}={value!r}): must be an int >= 0")

def get_standard_metrics(trainer: Trainer) -> dict[str, int | str]:
    """The items every bar shows: ``v_num``, the loggers' version (the last four characters of a string
    version; several loggers' distinct versions joined with ``_``), when the run has a logger."""
    loggers = trainer.loggers
    if not loggers:
        return {}
    versions = list(dict.fromkeys(logger.version for logger in loggers))
    version: int | str | None = versions[0] if len(versions) == 1 else "_".join(str(v) for v in versions)
    if version is None or version == "":
        return {}
    return {"v_num": version[-4:] if isinstance(version, str) else version}


def _count(counts: float | list[float], index: int | None) -> int | None:
    if isinstance(counts, (list, tuple)):
        if not counts:
            return 0
        return _bar_total(counts[index or 0]) if (index or 0) < len(counts) else None
    return _bar_total(counts)


def _total(counts: float | list[float]) -> int | None:
    if isinstance(counts, (list, tuple)):
        return _bar_total(sum(counts)) if all(_bar_total(n) is not None for n in counts) else None
    return _bar_total(counts)


def _bar_total(count: float | None) -> int | None:
    """A bar's total for a Trainer's batch count: ``None`` (an open-ended bar) for ``inf``, a loader without a
    length."""
    return None if count is None or count == math.inf else int(count)
