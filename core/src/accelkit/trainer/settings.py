"""The run's settings: what ``Trainer(...)``'s arguments resolve to, once, as one frozen object (issue 40, item 2).

:class:`TrainerSettings` holds every setting of a run, as the Trainer's constructor resolved it from its checked
arguments (``fast_dev_run`` and ``overfit_batches`` already applied to the limits, the defaults filled in); the
live objects of the run (the composition, loggers, callbacks, profiler, run state) are not settings and stay on the
Trainer. The Trainer builds it once (``Trainer.settings``) and its public names that Lightning users read
(``trainer.max_epochs``, ``trainer.limit_val_batches``...) are properties over it. Nothing rewrites it in place:
a change mid-run (the tuner's trials, ``fit``'s default ``max_epochs``, an assignment Lightning allows such as
``trainer.limit_val_batches = 3``) goes through :meth:`accelkit.Trainer.replace_settings`, which puts a new object
in its place (:func:`dataclasses.replace`), and :meth:`accelkit.Trainer.restore` puts the old one back.
"""

from __future__ import annotations

import dataclasses
import operator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

__all__ = ["SettingsChanges", "SettingsProperties", "TrainerSettings"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TrainerSettings:
    """The settings of a Trainer's run, resolved from its arguments (see :class:`accelkit.Trainer` for each
    argument). Frozen: assigning a field raises :class:`dataclasses.FrozenInstanceError`; a new object comes from
    :meth:`accelkit.Trainer.replace_settings`."""

    #: where logs and checkpoints go: ``default_root_dir``, else the working directory when the Trainer was built
    default_root_dir: Path
    #: ``fast_dev_run`` as given: ``True``/an int runs that many batches of every loop once (``False``/``0``: off)
    fast_dev_run: int | bool = False
    #: ``barebones=True``: logging, progress bar, checkpoints and summary off
    barebones: bool = False
    #: stop after this many epochs (``-1``: no limit; ``None``: the fit decides, by Lightning's rule; 1 with
    #: ``fast_dev_run``)
    max_epochs: int | None = None
    #: a stop requested earlier waits for this many epochs (``None``: not given; a fit sets its default)
    min_epochs: int | None = None
    #: stop after this many optimizer steps (``-1``: no limit; the ``fast_dev_run`` batches with it)
    max_steps: int = -1
    #: a stop requested earlier waits for this many optimizer steps (``None``: not given)
    min_steps: int | None = None
    #: stop after this many seconds (``max_time`` parsed; ``None``: no time limit)
    max_time: float | None = None
    #: batches per training epoch: an int, a fraction, or ``None`` (all); ``overfit_batches``/``fast_dev_run``
    #: applied
    limit_train_batches: int | float | None = None
    #: batches per validation run (``0``: no validation), as ``limit_train_batches``
    limit_val_batches: int | float | None = None
    #: batches per test run, as ``limit_train_batches``
    limit_test_batches: int | float | None = None
    #: batches per prediction run, as ``limit_train_batches``
    limit_predict_batches: int | float | None = None
    #: train and validate on this many batches (or fraction) of the training data, unshuffled (``0.0``: off)
    overfit_batches: int | float = 0.0
    #: validate every N training batches (int) or every fraction of an epoch (float; ``1.0`` by default)
    val_check_interval: int | float = 1.0
    #: validate after every N-th training epoch (``None``: count batches across epochs)
    check_val_every_n_epoch: int | None = 1
    #: validation batches of the sanity check before training (``inf`` for ``-1``: all, as Lightning reads it; ``0``
    #: with ``fast_dev_run`` or ``barebones``)
    num_sanity_val_steps: int | float = 2
    #: how often per-step metrics are read and logged (50 by default)
    log_every_n_steps: int = 50
    #: sum gradients over this many batches per optimizer step
    accumulate_grad_batches: int = 1
    #: clip gradients to this norm (or value); ``None``: no clipping
    gradient_clip_val: int | float | None = None
    #: ``"norm"``, ``"value"``, or ``None`` (norm)
    gradient_clip_algorithm: str | None = None
    #: ``torch.compile``'s keyword arguments for a captured training step (``compile_step``), or ``None``: not
    #: captured (their types are ``torch.compile``'s, one per keyword)
    compile_step: dict[str, Any] | None = None
    #: ``True``/``False``/``"warn"``: torch's deterministic algorithms; ``None``: unchanged
    deterministic: bool | str | None = None
    #: the value of ``torch.backends.cudnn.benchmark`` during the run (``None``: unchanged)
    benchmark: bool | None = None
    #: evaluate under ``torch.inference_mode()`` (``False``: ``torch.no_grad()``)
    inference_mode: bool = True
    #: run with ``torch.autograd.detect_anomaly()``
    detect_anomaly: bool = False
    #: turn batch-norm layers into ``SyncBatchNorm`` in distributed runs
    sync_batchnorm: bool = False
    #: request the loaders again every N epochs (``0``: never)
    reload_dataloaders_every_n_epochs: int = 0
    #: a progress bar is among the callbacks (off with ``barebones``)
    enable_progress_bar: bool = True
    #: the model summary is printed at fit start (off with ``barebones``)
    enable_model_summary: bool = True
    #: Lightning's default checkpoint callback is added (off with ``fast_dev_run`` and ``barebones``)
    enable_checkpointing: bool = True
    #: each rank of a distributed run gets its shard of the data
    use_distributed_sampler: bool = True
    #: base seed of the distributed sampler's shuffling (``seed``, else ``ACCELKIT_SEED``, else 0)
    seed: int = 0

    @property
    def limits(self) -> dict[str, int | float | None]:
        """Each stage's batch limit (``"fit"``, ``"validate"``, ``"test"``, ``"predict"`` -> its ``limit_*_batches``
        field; ``None``: every batch), a new dict at each read."""
        return {"fit": self.limit_train_batches, "validate": self.limit_val_batches, "test": self.limit_test_batches,
                "predict": self.limit_predict_batches}


class SettingsChanges(TypedDict, total=False):
    """The keyword arguments of :meth:`SettingsProperties.replace_settings`: any field of :class:`TrainerSettings`,
    with its type."""

    default_root_dir: Path
    fast_dev_run: int | bool
    barebones: bool
    max_epochs: int | None
    min_epochs: int | None
    max_steps: int
    min_steps: int | None
    max_time: float | None
    limit_train_batches: int | float | None
    limit_val_batches: int | float | None
    limit_test_batches: int | float | None
    limit_predict_batches: int | float | None
    overfit_batches: int | float
    val_check_interval: int | float
    check_val_every_n_epoch: int | None
    num_sanity_val_steps: int | float
    log_every_n_steps: int
    accumulate_grad_batches: int
    gradient_clip_val: int | float | None
    gradient_clip_algorithm: str | None
    compile_step: dict[str, Any] | None
    deterministic: bool | str | None
    benchmark: bool | None
    inference_mode: bool
    detect_anomaly: bool
    sync_batchnorm: bool
    reload_dataloaders_every_n_epochs: int
    enable_progress_bar: bool
    enable_model_summary: bool
    enable_checkpointing: bool
    use_distributed_sampler: bool
    seed: int


class SettingsProperties:
    """The Trainer's names for its settings: :attr:`settings`, :meth:`replace_settings`, and one property per field
    of :class:`TrainerSettings` (``trainer.max_epochs``, ``trainer.limit_val_batches``...). The fields Lightning's
    Trainer keeps as plain attributes (the limits, ``val_check_interval``, ``accumulate_grad_batches``, gradient
    clipping...) can be assigned, through :meth:`replace_settings`; the others are read-only, as in Lightning."""

    _settings: TrainerSettings

    if TYPE_CHECKING:
        @property
        def settings(self) -> TrainerSettings:
            """The run's :class:`TrainerSettings` (see below)."""
    else:
        # read by the loops at every batch (``trainer.settings.max_steps``): its getter runs in C, no Python frame
        settings = property(operator.attrgetter("_settings"), doc="""The run's :class:`TrainerSettings`: built once
        by the constructor, replaced (never changed in place) by :meth:`replace_settings`, put back by
        :meth:`~accelkit.Trainer.restore`. Read-only: assigning it raises ``AttributeError``.""")

    def replace_settings(self, **changes: Unpack[SettingsChanges]) -> TrainerSettings:
        """The one way to change a setting after the Trainer is built: a new :class:`TrainerSettings` with
        ``changes`` (field name -> value) takes the old one's place, and is returned. The tuner's trials, a fit's
        defaults (``max_epochs``, ``min_epochs``) and the assignments Lightning allows (``trainer.limit_val_batches
        = 3``) go through it; :meth:`~accelkit.Trainer.snapshot`/:meth:`~accelkit.Trainer.restore` put an earlier
        object back.

        :raises TypeError: naming a name that is not a field of :class:`TrainerSettings`.
        """
        self._settings = dataclasses.replace(self._settings, **changes)
        return self._settings

    @property
    def limits(self) -> dict[str, int | float | None]:
        """Each stage's batch limit as given (:attr:`TrainerSettings.limits`: ``None`` for every batch)."""
        return self._settings.limits

    @property
    def default_root_dir(self) -> Path:
        """:attr:`TrainerSettings.default_root_dir`. Read-only, as in Lightning: an assignment raises ``AttributeError``
        naming it."""
        return self._settings.default_root_dir

    @property
    def fast_dev_run(self) -> int | bool:
        """:attr:`TrainerSettings.fast_dev_run`. Assignable, as in Lightning: ``trainer.fast_dev_run = value`` is
        ``trainer.replace_settings(fast_dev_run=value)``."""
        return self._settings.fast_dev_run

    @fast_dev_run.setter
    def fast_dev_run(self, value: int | bool) -> None:
        self.replace_settings(fast_dev_run=value)

    @property
    def barebones(self) -> bool:
        """:attr:`TrainerSettings.barebones`. Assignable, as in Lightning: ``trainer.barebones = value`` is
        ``trainer.replace_settings(barebones=value)``."""
        return self._settings.barebones

    @barebones.setter
    def barebones(self, value: bool) -> None:
        self.replace_settings(barebones=value)

    @property
    def max_epochs(self) -> int | None:
        """:attr:`TrainerSettings.max_epochs`. Assignable (Lightning's is read-only; accelkit has always taken it, and
        the loops read the new limit after the batch): ``trainer.max_epochs = value`` is
        ``trainer.replace_settings(max_epochs=value)``."""
        return self._settings.max_epochs

    @max_epochs.setter
    def max_epochs(self, value: int | None) -> None:
        self.replace_settings(max_epochs=value)

    @property
    def min_epochs(self) -> int | None:
        """:attr:`TrainerSettings.min_epochs`. Read-only, as in Lightning: an assignment raises ``AttributeError``
        naming it."""
        return self._settings.min_epochs

    @property
    def max_steps(self) -> int:
        """:attr:`TrainerSettings.max_steps`. Assignable (Lightning's is read-only; accelkit has always taken it, and
        the loops read the new limit after the batch): ``trainer.max_steps = value`` is
        ``trainer.replace_settings(max_steps=value)``."""
        return self._settings.max_steps

    @max_steps.setter
    def max_steps(self, value: int) -> None:
        self.replace_settings(max_steps=value)

    @property
    def min_steps(self) -> int | None:
        """:attr:`TrainerSettings.min_steps`. Read-only, as in Lightning: an assignment raises ``AttributeError`` naming
        it."""
        return self._settings.min_steps

    @property
    def max_time(self) -> float | None:
        """:attr:`TrainerSettings.max_time`. Read-only, as in Lightning: an assignment raises ``AttributeError`` naming
        it."""
        return self._settings.max_time

    @property
    def limit_train_batches(self) -> int | float:
        """:attr:`TrainerSettings.limit_train_batches` (``1.0``, every batch, when not given, as Lightning reads it).
        Assignable, as in Lightning: ``trainer.limit_train_batches = value`` is
        ``trainer.replace_settings(limit_train_batches=value)``."""
        return _limit(self._settings.limit_train_batches)

    @limit_train_batches.setter
    def limit_train_batches(self, value: int | float | None) -> None:
        self.replace_settings(limit_train_batches=value)

    @property
    def limit_val_batches(self) -> int | float:
        """:attr:`TrainerSettings.limit_val_batches` (``1.0``, every batch, when not given, as Lightning reads it).
        Assignable, as in Lightning: ``trainer.limit_val_batches = value`` is
        ``trainer.replace_settings(limit_val_batches=value)``."""
        return _limit(self._settings.limit_val_batches)

    @limit_val_batches.setter
    def limit_val_batches(self, value: int | float | None) -> None:
        self.replace_settings(limit_val_batches=value)

    @property
    def limit_test_batches(self) -> int | float:
        """:attr:`TrainerSettings.limit_test_batches` (``1.0``, every batch, when not given, as Lightning reads it).
        Assignable, as in Lightning: ``trainer.limit_test_batches = value`` is
        ``trainer.replace_settings(limit_test_batches=value)``."""
        return _limit(self._settings.limit_test_batches)

    @limit_test_batches.setter
    def limit_test_batches(self, value: int | float | None) -> None:
        self.replace_settings(limit_test_batches=value)

    @property
    def limit_predict_batches(self) -> int | float:
        """:attr:`TrainerSettings.limit_predict_batches` (``1.0``, every batch, when not given, as Lightning reads it).
        Assignable, as in Lightning: ``trainer.limit_predict_batches = value`` is
        ``trainer.replace_settings(limit_predict_batches=value)``."""
        return _limit(self._settings.limit_predict_batches)

    @limit_predict_batches.setter
    def limit_predict_batches(self, value: int | float | None) -> None:
        self.replace_settings(limit_predict_batches=value)

    @property
    def overfit_batches(self) -> int | float:
        """:attr:`TrainerSettings.overfit_batches`. Assignable, as in Lightning: ``trainer.overfit_batches = value`` is
        ``trainer.replace_settings(overfit_batches=value)``."""
        return self._settings.overfit_batches

    @overfit_batches.setter
    def overfit_batches(self, value: int | float) -> None:
        self.replace_settings(overfit_batches=value)

    @property
    def val_check_interval(self) -> int | float:
        """:attr:`TrainerSettings.val_check_interval`. Assignable, as in Lightning: ``trainer.val_check_interval =
        value`` is ``trainer.replace_settings(val_check_interval=value)``."""
        return self._settings.val_check_interval

    @val_check_interval.setter
    def val_check_interval(self, value: int | float) -> None:
        self.replace_settings(val_check_interval=value)

    @property
    def check_val_every_n_epoch(self) -> int | None:
        """:attr:`TrainerSettings.check_val_every_n_epoch`. Assignable, as in Lightning:
        ``trainer.check_val_every_n_epoch = value`` is ``trainer.replace_settings(check_val_every_n_epoch=value)``."""
        return self._settings.check_val_every_n_epoch

    @check_val_every_n_epoch.setter
    def check_val_every_n_epoch(self, value: int | None) -> None:
        self.replace_settings(check_val_every_n_epoch=value)

    @property
    def num_sanity_val_steps(self) -> int | float:
        """:attr:`TrainerSettings.num_sanity_val_steps`. Assignable, as in Lightning: ``trainer.num_sanity_val_steps =
        value`` is ``trainer.replace_settings(num_sanity_val_steps=value)``."""
        return self._settings.num_sanity_val_steps

    @num_sanity_val_steps.setter
    def num_sanity_val_steps(self, value: int | float) -> None:
        self.replace_settings(num_sanity_val_steps=value)

    @property
    def log_every_n_steps(self) -> int:
        """:attr:`TrainerSettings.log_every_n_steps`. Assignable, as in Lightning: ``trainer.log_every_n_steps = value``
        is ``trainer.replace_settings(log_every_n_steps=value)``."""
        return self._settings.log_every_n_steps

    @log_every_n_steps.setter
    def log_every_n_steps(self, value: int) -> None:
        self.replace_settings(log_every_n_steps=value)

    @property
    def accumulate_grad_batches(self) -> int:
        """:attr:`TrainerSettings.accumulate_grad_batches`. Assignable, as in Lightning:
        ``trainer.accumulate_grad_batches = value`` is ``trainer.replace_settings(accumulate_grad_batches=value)``."""
        return self._settings.accumulate_grad_batches

    @accumulate_grad_batches.setter
    def accumulate_grad_batches(self, value: int) -> None:
        self.replace_settings(accumulate_grad_batches=value)

    @property
    def gradient_clip_val(self) -> int | float | None:
        """:attr:`TrainerSettings.gradient_clip_val`. Assignable, as in Lightning: ``trainer.gradient_clip_val = value``
        is ``trainer.replace_settings(gradient_clip_val=value)``."""
        return self._settings.gradient_clip_val

    @gradient_clip_val.setter
    def gradient_clip_val(self, value: int | float | None) -> None:
        self.replace_settings(gradient_clip_val=value)

    @property
    def gradient_clip_algorithm(self) -> str | None:
        """:attr:`TrainerSettings.gradient_clip_algorithm`. Assignable, as in Lightning:
        ``trainer.gradient_clip_algorithm = value`` is ``trainer.replace_settings(gradient_clip_algorithm=value)``."""
        return self._settings.gradient_clip_algorithm

    @gradient_clip_algorithm.setter
    def gradient_clip_algorithm(self, value: str | None) -> None:
        self.replace_settings(gradient_clip_algorithm=value)

    @property
    def compile_step(self) -> dict[str, Any] | None:
        """:attr:`TrainerSettings.compile_step`. Read-only, as in Lightning: an assignment raises ``AttributeError``
        naming it."""
        return self._settings.compile_step

    @property
    def deterministic(self) -> bool | str | None:
        """:attr:`TrainerSettings.deterministic`. Read-only, as in Lightning: an assignment raises ``AttributeError``
        naming it."""
        return self._settings.deterministic

    @property
    def benchmark(self) -> bool | None:
        """:attr:`TrainerSettings.benchmark`. Read-only, as in Lightning: an assignment raises ``AttributeError`` naming
        it."""
        return self._settings.benchmark

    @property
    def inference_mode(self) -> bool:
        """:attr:`TrainerSettings.inference_mode`. Read-only, as in Lightning: an assignment raises ``AttributeError``
        naming it."""
        return self._settings.inference_mode

    @property
    def detect_anomaly(self) -> bool:
        """:attr:`TrainerSettings.detect_anomaly`. Read-only, as in Lightning: an assignment raises ``AttributeError``
        naming it."""
        return self._settings.detect_anomaly

    @property
    def sync_batchnorm(self) -> bool:
        """:attr:`TrainerSettings.sync_batchnorm`. Read-only, as in Lightning: an assignment raises ``AttributeError``
        naming it."""
        return self._settings.sync_batchnorm

    @property
    def reload_dataloaders_every_n_epochs(self) -> int:
        """:attr:`TrainerSettings.reload_dataloaders_every_n_epochs`. Assignable, as in Lightning:
        ``trainer.reload_dataloaders_every_n_epochs = value`` is
        ``trainer.replace_settings(reload_dataloaders_every_n_epochs=value)``."""
        return self._settings.reload_dataloaders_every_n_epochs

    @reload_dataloaders_every_n_epochs.setter
    def reload_dataloaders_every_n_epochs(self, value: int) -> None:
        self.replace_settings(reload_dataloaders_every_n_epochs=value)

    @property
    def enable_progress_bar(self) -> bool:
        """:attr:`TrainerSettings.enable_progress_bar`. Read-only, as in Lightning: an assignment raises
        ``AttributeError`` naming it."""
        return self._settings.enable_progress_bar

    @property
    def enable_model_summary(self) -> bool:
        """:attr:`TrainerSettings.enable_model_summary`. Read-only, as in Lightning: an assignment raises
        ``AttributeError`` naming it."""
        return self._settings.enable_model_summary

    @property
    def enable_checkpointing(self) -> bool:
        """:attr:`TrainerSettings.enable_checkpointing`. Read-only, as in Lightning: an assignment raises
        ``AttributeError`` naming it."""
        return self._settings.enable_checkpointing

    @property
    def use_distributed_sampler(self) -> bool:
        """:attr:`TrainerSettings.use_distributed_sampler`. Read-only, as in Lightning: an assignment raises
        ``AttributeError`` naming it."""
        return self._settings.use_distributed_sampler

    @property
    def seed(self) -> int:
        """:attr:`TrainerSettings.seed`. Read-only, as in Lightning: an assignment raises ``AttributeError`` naming
        it."""
        return self._settings.seed


def _limit(given: int | float | None) -> int | float:
    """A ``limit_*_batches`` as Lightning reads it: ``1.0`` (every batch) when not given."""
    return 1.0 if given is None else given
