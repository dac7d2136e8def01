"""What one run holds: :class:`RunState` (the run's objects, metrics and stage) and its :class:`Progress` (counters and
flags), owned by the Trainer (``trainer.run_state``) and written by the loops; the Trainer's Lightning names
(``current_epoch``, ``global_step``, ``callback_metrics``, ``num_training_batches``...) are properties over them.
Nothing else keeps a run's state: a new ``fit``/``validate``/``test``/``predict`` starts from a fresh one
(:meth:`RunState.begin`), which continues only the step and epoch counters and a fit's optimizers."""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from accelkit.loops.metrics import MetricStore
from accelkit.utilities.enums import LightningEnum

if TYPE_CHECKING:
    from accelkit.loops.data import DataConnector
    from accelkit.loops.evaluation import PredictionLoop
    from accelkit.loops.fit import FitLoop
    from accelkit.loops.hooks import HookCaller
    from accelkit.loops.optimization import Optimization
    from accelkit.loops.publishing import Publisher
    from accelkit.loops.resume import Position
    from accelkit.module.datamodule import DataModule
    from accelkit.module.module import Module
    from accelkit.strategies.launchers.result import WorkerResult
    from accelkit.utilities.types import LRSchedulerConfig


class TrainerStatus(LightningEnum):
    """Whether the Trainer is running (``trainer.state.status``), as Lightning's: ``INITIALIZING`` until its first
    run, ``RUNNING`` during one, then ``FINISHED``, or ``INTERRUPTED`` once a run raised."""

    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"

    @property
    def stopped(self) -> bool:
        """``FINISHED`` or ``INTERRUPTED``."""
        return self in (TrainerStatus.FINISHED, TrainerStatus.INTERRUPTED)


class TrainerFn(LightningEnum):
    """The Trainer's entry point running (``trainer.state.fn``, and the ``stage`` of ``setup``/``teardown``), as
    Lightning's: equal to ``"fit"``, ``"validate"``, ``"test"``, ``"predict"``."""

    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(LightningEnum):
    """The loop running (``trainer.state.stage``), as Lightning's: equal to ``"train"``, ``"sanity_check"``,
    ``"validate"``, ``"test"``, ``"predict"``."""

    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def evaluating(self) -> bool:
        """A validation (the sanity check's too) or test loop."""
        return self in (RunningStage.VALIDATING, RunningStage.TESTING, RunningStage.SANITY_CHECKING)

    @property
    def dataloader_prefix(self) -> str | None:
        """The prefix of the loop's ``*_dataloader`` hook: ``"val"`` for validation and the sanity check."""
        return "val" if self in (RunningStage.VALIDATING, RunningStage.SANITY_CHECKING) else self.value


#: each field of :class:`TrainerState` and the enum its values are members of
_STATE_ENUMS: dict[str, type[LightningEnum]] = {"status": TrainerStatus, "fn": TrainerFn, "stage": RunningStage}


@dataclass
class TrainerState:
    """What the Trainer is doing (``trainer.state``), as Lightning's: ``status`` (:class:`TrainerStatus`), ``fn`` the
    entry point running or last run (:class:`TrainerFn`), ``stage`` the loop running now (:class:`RunningStage`;
    ``None`` between runs). A plain string given (``state.stage = "train"``) is stored as its member."""

    status: TrainerStatus = TrainerStatus.INITIALIZING
    fn: TrainerFn | None = None
    stage: RunningStage | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        kind = _STATE_ENUMS.get(name)
        if kind is not None and value is not None and not isinstance(value, kind):
            value = kind(value)
        super().__setattr__(name, value)

    @property
    def finished(self) -> bool:
        """The last run finished."""
        return self.status == TrainerStatus.FINISHED

    @property
    def stopped(self) -> bool:
        """The last run finished or was interrupted."""
        return self.status.stopped


@dataclass(eq=False)
class Progress:
    """Where a run is: its counters and per-batch flags (``trainer.current_epoch``, ``trainer.global_step``,
    ``trainer.should_stop``... read them). Each counter has one writer: :meth:`advance_step` (the optimization
    step), the fit loop's training batch (``batches_that_stepped``, inline: it is per batch), :meth:`advance_epoch`
    (the fit loop's epoch end) and :meth:`load_state_dict` (a checkpoint's restore).

    :ivar current_epoch: epochs completed (the epoch running now, counted from 0).
    :ivar global_step: optimizer steps taken (not reset at an epoch's start).
    :ivar batches_that_stepped: training batches that end an optimization step (each batch of a manual
        optimization; with gradient accumulation, the last of each window), the running one included from its
        step on: Lightning's ``_batches_that_stepped``, from which the loggers' step comes (:meth:`logger_step`).
    :ivar stepping: the last training batch run in this epoch counts in ``batches_that_stepped``.
    :ivar should_stop: a stop was requested (a callback, the Module, the learning-rate finder).
    :ivar sanity_checking: the sanity check's validation is running.
    :ivar is_last_batch: the training batch running now is the epoch's last.
    :ivar epoch_training_done: the current epoch's training batches are all done (validation may still run): a
        checkpoint written from then on resumes at the next epoch.
    :ivar num_training_batches: batches per training epoch (``None``: the loader has no length).
    :ivar num_val_batches: validation batches per loader (``None`` for a loader without a length).
    :ivar num_sanity_val_batches: sanity-check batches per loader.
    :ivar num_test_batches: test batches per loader.
    :ivar num_predict_batches: prediction batches per loader.
    :ivar last_fit_batches: the latest fit's ``num_training_batches`` and ``num_val_batches`` (``inf`` and ``[]``
        before any fit), carried to the next runs: what the Trainer reads outside a fit, as Lightning's loops keep them.
    :ivar eval_logger_steps: per evaluation loader, the batches whose step values went to the loggers in this run
        (a ``fit``'s validations, or one ``validate``/``test`` call): the next one's logger step, as Lightning's.
    """

    current_epoch: int = 0
    global_step: int = 0
    batches_that_stepped: int = 0
    stepping: bool = False
    should_stop: bool = False
    sanity_checking: bool = False
    is_last_batch: bool = False
    epoch_training_done: bool = False
    num_training_batches: int | None = None
    num_val_batches: list[int | None] = field(default_factory=list)
    num_sanity_val_batches: list[int | None] = field(default_factory=list)
    num_test_batches: list[int | None] = field(default_factory=list)
    num_predict_batches: list[int | None] = field(default_factory=list)
    last_fit_batches: tuple[int | float | None, list[int | None]] = (math.inf, [])
    eval_logger_steps: dict[int, int] = field(default_factory=dict)

    def advance_step(self) -> None:
        """One optimizer step was taken (the one place ``global_step`` grows)."""
        self.global_step += 1

    def advance_epoch(self) -> None:
        """The current epoch ended (after its end hooks): the next one starts with none of its batches done."""
        self.current_epoch += 1
        self.epoch_training_done = self.stepping = False

    def logger_step(self) -> int:
        """The step the loggers get, as Lightning's: the training batches that stepped before the running one
        (the first batch's row is step 0, a validation inside a fit is at the step of the batch it follows);
        after a fit (``validate``/``test``), all of them."""
        return self.batches_that_stepped - self.stepping

    def accumulation_boundary(self, batch_idx: int, accumulate: int) -> bool:
        """Whether the optimizer steps after training batch ``batch_idx`` when gradients are summed over
        ``accumulate`` batches: at the end of each window, and at the epoch's last batch (``is_last_batch``)
        whatever the window's length, so no gradient is carried into the next epoch."""
        return accumulate == 1 or (batch_idx + 1) % accumulate == 0 or self.is_last_batch

    def continued(self) -> Progress:
        """A fresh record for the next run of the same Trainer: the step and epoch counters go on (as Lightning's
        loop progress does across ``fit``/``validate``), every flag and batch count starts anew."""
        return Progress(current_epoch=self.current_epoch, global_step=self.global_step,
                        batches_that_stepped=self.batches_that_stepped, last_fit_batches=self.last_fit_batches)

    def state_dict(self) -> dict[str, int]:
        """The progress as a checkpoint records it: ``epoch`` (the current epoch), ``global_step``,
        ``resume_epoch``, the epoch a resumed fit starts (the next one once this epoch's batches are done), and
        ``batches_that_stepped`` (the running batch included once it stepped: a resumed fit logs on from there)."""
        return {"epoch": self.current_epoch, "global_step": self.global_step,
                "resume_epoch": self.current_epoch + (1 if self.epoch_training_done else 0),
                "batches_that_stepped": self.batches_that_stepped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (:meth:`state_dict`'s keys; without ``resume_epoch``, ``epoch`` is where the fit
        resumes): the one place a checkpoint's counters come back."""
        missing = [key for key in ("epoch", "global_step") if key not in state]
        if missing:
            raise KeyError(f"a progress record needs {' and '.join(map(repr, missing))} (got the keys "
                           f"{sorted(state)}); give Progress.state_dict()'s")
        self.current_epoch = int(state.get("resume_epoch", state["epoch"]))
        self.global_step = int(state["global_step"])
        # a checkpoint without it (older, Lightning's): one batch per optimizer step
        self.batches_that_stepped = int(state.get("batches_that_stepped", self.global_step))
        self.stepping = self.epoch_training_done = False


_T = TypeVar("_T")


def _during_run(value: _T | None, name: str) -> _T:
    if value is None:
        raise RuntimeError(f"RunState.{name} exists only while a run is going on (inside fit/validate/test/predict, "
                           "after its setup); read it from a hook or callback of the run")
    return value


#: the fields of :class:`RunState` that :meth:`RunState.begin` continues from the previous run, with why
CARRIED_FIELDS = {
    "progress": "the step and epoch counters go on (its flags and batch counts start anew: Progress.continued)",
    "optimizers": "validate/test/save_checkpoint after a fit use the fit's optimizers (as in Lightning)",
    "schedulers": "they go with the optimizers",
    "worker_training_state": "the optimizer state a spawned fit sent back, for save_checkpoint after it",
}


@dataclass(eq=False)
class RunState:
    """The state of the latest run of a Trainer, in the process running it.

    :ivar module: the user's :class:`~accelkit.Module` (kept after the run: ``trainer.lightning_module``).
    :ivar datamodule: the run's :class:`~accelkit.DataModule`, if any (``trainer.datamodule``).
    :ivar ckpt_path: the checkpoint the run loaded (``trainer.ckpt_path``).
    :ivar model: what the strategy made of it (a DDP wrapper, say); ``None`` outside a worker's run.
    :ivar state: the entry point and the loop running now (``trainer.state``).
    :ivar progress: the counters and flags (:class:`Progress`).
    :ivar callback_metrics: the logged values published so far, for callbacks; ``trainer.callback_metrics`` is
        this dict updated with the running loop's current values when read (:meth:`current`).
    :ivar logged_metrics: the values for the loggers published so far (``trainer.logged_metrics``, the same way).
    :ivar progress_bar_metrics: the progress bar's values published so far, floats
        (``trainer.progress_bar_metrics``, the same way).
    :ivar metrics: what ``Module.log`` recorded, kept on the device until read (``MetricStore``).
    :ivar hooks: the ``HookCaller`` of the run.
    :ivar data: the ``DataConnector`` (the run's loaders and their sizes).
    :ivar publisher: the ``Publisher`` of logged values.
    :ivar optimization: the ``Optimization`` of a fit (``None`` otherwise).
    :ivar fit_loop: the running :class:`~accelkit.loops.fit.FitLoop` (what a checkpoint's exact-resume position
        is read from); ``None`` outside a fit.
    :ivar predict_loop: the :class:`~accelkit.loops.evaluation.PredictionLoop` (``trainer.predict_loop``).
    :ivar optimizers: the optimizers ``configure_optimizers`` returned, as the strategy set them up.
    :ivar schedulers: their :class:`~accelkit.module.optimizers.LRSchedulerConfig`.
    :ivar worker_training_state: optimizer/scheduler/precision state that spawned workers sent back (their
        optimizers stayed in the workers), for ``trainer.save_checkpoint`` in the caller.
    :ivar resume_position: where a resumed fit continues (:func:`accelkit.loops.resume.position`).
    :ivar stop_reason: why the latest fit stopped (``"max_epochs=20 reached"``, early stopping, a time limit...),
        as its fit loop saw it; ``None`` before a fit ended (see :mod:`accelkit.trainer.summary`).
    """

    module: Module | None = None
    datamodule: DataModule | None = None
    ckpt_path: Any = None  # a path (str or os.PathLike) or None
    model: torch.nn.Module | None = None
    state: TrainerState = field(default_factory=TrainerState)
    progress: Progress = field(default_factory=Progress)
    callback_metrics: dict[str, Any] = field(default_factory=dict)
    logged_metrics: dict[str, Any] = field(default_factory=dict)
    progress_bar_metrics: dict[str, float] = field(default_factory=dict)
    metrics: MetricStore = field(default_factory=MetricStore)
    hooks: HookCaller | None = None
    data: DataConnector | None = None
    publisher: Publisher | None = None
    optimization: Optimization | None = None
    fit_loop: FitLoop | None = None
    predict_loop: PredictionLoop | None = None
    optimizers: list[torch.optim.Optimizer] = field(default_factory=list)
    schedulers: list[LRSchedulerConfig] = field(default_factory=list)
    worker_training_state: dict[str, Any] | None = None
    resume_position: Position | None = None
    stop_reason: str | None = None

    def current(self, kind: str) -> dict[str, Any]:
        """The Trainer's dict ``kind`` (``"callback_metrics"``, ``"logged_metrics"`` or ``"progress_bar_metrics"``)
        as Lightning computes it when read: what was published, updated (in place) with the running loop's current
        values (``MetricStore.current``). A read may cost (the progress bar's values
        are read to the host); nothing is computed per step unless something reads."""
        values: dict[str, Any] = getattr(self, kind)
        store = self.metrics
        if isinstance(store, MetricStore):  # (not while a captured step's forward call records the logs)
            values.update(store.current(kind))
        return values

    # The run's loop objects, for the loops that run inside it: there, never ``None``.
    @property
    def active_hooks(self) -> HookCaller:
        """``hooks``, during a run (a ``RuntimeError`` outside one)."""
        return _during_run(self.hooks, "hooks")

    @property
    def active_data(self) -> DataConnector:
        """``data``, during a run."""
        return _during_run(self.data, "data")

    @property
    def active_publisher(self) -> Publisher:
        """``publisher``, during a run."""
        return _during_run(self.publisher, "publisher")

    @property
    def active_optimization(self) -> Optimization:
        """``optimization``, during a fit."""
        return _during_run(self.optimization, "optimization")

    def begin(self, module: Module, datamodule: DataModule | None = None, ckpt_path: Any = None) -> None:
        """Start a run of ``module``: every field fresh, except those of :data:`CARRIED_FIELDS` (the counters go
        on, the flags and batch counts of :class:`Progress` start anew)."""
        carried = {name: getattr(self, name) for name in CARRIED_FIELDS}
        carried["progress"] = self.progress.continued()
        fresh = RunState(module=module, datamodule=datamodule, ckpt_path=ckpt_path, **carried)
        for item in dataclasses.fields(self):
            setattr(self, item.name, getattr(fresh, item.name))

    def apply_worker_result(self, result: WorkerResult) -> None:
        """What spawned workers sent back (:class:`~accelkit.strategies.launchers.result.WorkerResult`), taken into
        the caller's run state in one call: metrics, counters, the stop request and its reason, and the training
        state of a fit (their optimizers stayed in the workers)."""
        if result.state_dict is not None:
            self.optimizers, self.schedulers = [], []
            self.worker_training_state = result.training_state
        self.callback_metrics = result.callback_metrics
        self.logged_metrics = result.logged_metrics
        self.progress_bar_metrics = result.progress_bar_metrics
        self.progress.load_state_dict({"epoch": result.current_epoch, "global_step": result.global_step,
                                       "batches_that_stepped": result.batches_that_stepped})
        self.progress.should_stop = result.should_stop
        self.stop_reason = result.stop_reason

    def snapshot(self) -> RunState:
        """A copy to put back later with :meth:`restore` (the tuner's trials run on the same Trainer): the
        progress, stage and metric dicts copied, the objects (module, optimizers, loops) shared."""
        saved = dataclasses.replace(self)  # (not copy.copy: __getstate__ leaves the loop objects out, for workers)
        saved.progress = copy.deepcopy(self.progress)
        saved.state = copy.copy(self.state)
        saved.callback_metrics = dict(self.callback_metrics)
        saved.logged_metrics = dict(self.logged_metrics)
        saved.progress_bar_metrics = dict(self.progress_bar_metrics)
        saved.optimizers, saved.schedulers = list(self.optimizers), list(self.schedulers)
        return saved

    def restore(self, saved: RunState) -> None:
        """Put back every field of ``saved`` (a :meth:`snapshot`); the progress record stays the same object (a
        loop holding it sees the restored values)."""
        for item in dataclasses.fields(self):
            if item.name != "progress":
                setattr(self, item.name, getattr(saved, item.name))
        for item in dataclasses.fields(Progress):
            setattr(self.progress, item.name, copy.copy(getattr(saved.progress, item.name)))

    def __getstate__(self) -> dict[str, Any]:
        # sent to spawned workers with the Trainer: the loop objects of the caller's last run stay behind
        state = self.__dict__.copy()
        state.update(hooks=None, data=None, publisher=None, optimization=None, fit_loop=None)
        return state
