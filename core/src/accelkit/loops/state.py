"""What one run holds: :class:`RunState` (the run's objects, metrics and stage) and its :class:`Progress` (counters and
flags), owned by the Trainer (``trainer.run_state``) and written by the loops; the Trainer's Lightning names
(``current_epoch``, ``global_step``, ``callback_metrics``, ``num_training_batches``...) are properties over them.
Nothing else keeps a run's state: a new ``fit``/``validate``/``test``/``predict`` starts from a fresh one
(:meth:`RunState.begin`), which continues only the step and epoch counters and a fit's optimizers."""

from __future__ import annotations

import copy
import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack, overload

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

    def __setattr__(self, name: str, value: object) -> None:
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


@dataclass(frozen=True)
class Lifecycle:
    """How a field of :class:`RunState` or :class:`Progress` lives beyond the run that wrote it, declared with the
    field (its ``metadata["lifecycle"]``, see :func:`run_field`) and read by every method that copies fields:
    :meth:`RunState.begin` (and :meth:`Progress.continued`), pickling to spawned workers, :meth:`RunState.snapshot`
    and :meth:`RunState.restore`, and the :class:`~accelkit.strategies.launchers.result.WorkerResult` a worker sends
    back (:meth:`RunState.outcome`, :meth:`RunState.apply_worker_result`).

    :ivar carried: why the next run of the same Trainer continues the value (``None``: the next run starts it anew).
    :ivar to_workers: pickled with the Trainer to spawned workers (``False``: the caller's object stays behind and
        the worker gets ``None``).
    :ivar snapshot: how :meth:`RunState.snapshot` keeps the value: ``"shared"`` (the same object), ``"copied"``
        (a shallow copy: a dict, a list, the stage) or ``"deep"`` (a deep copy, put back into the live object by
        :meth:`RunState.restore`, so that a loop holding it sees the restored values).
    :ivar returned: a spawned worker sends the value back in its ``WorkerResult`` (a field of the same name).
    """

    carried: str | None = None
    to_workers: bool = True
    snapshot: str = "shared"
    returned: bool = False

    def __post_init__(self) -> None:
        if self.snapshot not in ("shared", "copied", "deep"):
            raise ValueError(f"Lifecycle(snapshot={self.snapshot!r}): use 'shared', 'copied' or 'deep'")


class _LifecycleArguments(TypedDict, total=False):
    """The keyword arguments of :class:`Lifecycle`, as :func:`run_field` takes them."""

    carried: str | None
    to_workers: bool
    snapshot: str
    returned: bool


_F = TypeVar("_F")


@overload
def run_field(default: _F, **lifecycle: Unpack[_LifecycleArguments]) -> _F: ...


@overload
def run_field(*, factory: Callable[[], _F], **lifecycle: Unpack[_LifecycleArguments]) -> _F: ...


def run_field(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING,
              **lifecycle: Unpack[_LifecycleArguments]) -> Any:  # (Any: what dataclasses.field's overloads take)
    """A dataclass field of the run's state with its :class:`Lifecycle` (``carried=``, ``to_workers=``,
    ``snapshot=``, ``returned=``), and ``default`` or a default ``factory``."""
    return field(default=default, default_factory=factory, metadata={"lifecycle": Lifecycle(**lifecycle)})


def lifecycle(item: dataclasses.Field) -> Lifecycle:
    """The :class:`Lifecycle` a field was declared with (a field declared without one: nothing of it outlives its
    run)."""
    return item.metadata.get("lifecycle", _UNDECLARED)


_UNDECLARED = Lifecycle()


def fields_where(cls: type, **wanted: object) -> list[str]:
    """The names of ``cls``'s fields whose :class:`Lifecycle` has the ``wanted`` values (``carried`` is matched as
    set or not: ``carried=True``)."""
    def matches(item: dataclasses.Field) -> bool:
        life = lifecycle(item)
        return all((getattr(life, key) is not None) == value if key == "carried" else getattr(life, key) == value
                   for key, value in wanted.items())

    return [item.name for item in dataclasses.fields(cls) if matches(item)]


#: the :class:`Progress` field that holds the batch counts of each loop (:meth:`Progress.record_batches`)
BATCH_COUNTS = {"train": "num_training_batches", "validate": "num_val_batches",
                "sanity_check": "num_sanity_val_batches", "test": "num_test_batches", "predict": "num_predict_batches"}


@dataclass(eq=False)
class Progress:
    """Where a run is: its counters and per-batch flags (``trainer.current_epoch``, ``trainer.global_step``,
    ``trainer.should_stop``... read them). Every field is written by the methods below, nowhere else (the Trainer's
    Lightning setters ``should_stop`` and ``sanity_checking`` aside): :meth:`advance_step` (the optimization step),
    :meth:`begin_batch` and :meth:`count_batch` (a training batch), :meth:`finish_epoch_training` and
    :meth:`advance_epoch` (the epoch's batches done, its end), :meth:`record_batches` (the loaders' sizes),
    :meth:`end_fit` and :meth:`load_state_dict` (a checkpoint's restore, and the workers' result).

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

    current_epoch: int = run_field(0, carried="the epoch counter goes on", returned=True)
    global_step: int = run_field(0, carried="the step counter goes on", returned=True)
    batches_that_stepped: int = run_field(0, carried="the loggers' steps go on", returned=True)
    stepping: bool = False
    should_stop: bool = run_field(False, returned=True)
    sanity_checking: bool = False
    is_last_batch: bool = False
    epoch_training_done: bool = False
    num_training_batches: int | None = None
    num_val_batches: list[int | None] = field(default_factory=list)
    num_sanity_val_batches: list[int | None] = field(default_factory=list)
    num_test_batches: list[int | None] = field(default_factory=list)
    num_predict_batches: list[int | None] = field(default_factory=list)
    last_fit_batches: tuple[int | float | None, list[int | None]] = run_field(
        (math.inf, []), carried="what num_training_batches/num_val_batches read outside a fit, as Lightning's")
    eval_logger_steps: dict[int, int] = field(default_factory=dict)

    def advance_step(self) -> None:
        """One optimizer step was taken (the one place ``global_step`` grows)."""
        self.global_step = self.global_step + 1  # (one instruction fewer than ``+=``: it runs every step)

    def begin_batch(self, is_last: bool) -> None:
        """The training batch starting now is the epoch's last (``is_last``: ``trainer.is_last_batch``) or not. The
        flag holds until a batch changes it, so a loop calls this only when it changes (the epoch's last batch and
        the first one after it): a call per batch would cost the step."""
        self.is_last_batch = is_last

    def count_batch(self, steps: bool = True) -> None:
        """The running training batch ends an optimization step (``steps``: each batch of a manual optimization or
        of an epoch where every batch steps, the last of an accumulation window) or not. A stepping batch is counted
        in ``batches_that_stepped`` at once, before its step, so that a checkpoint written from its hooks includes it
        (the one place the count grows; called once per batch, after ``on_train_batch_start``)."""
        self.stepping = steps
        self.batches_that_stepped = self.batches_that_stepped + steps

    def finish_epoch_training(self) -> None:
        """The current epoch's training batches are all done (validation may still run): a checkpoint written from
        now on resumes at the next epoch."""
        self.epoch_training_done = True

    def record_batches(self, stage: str, counts: Any) -> None:
        """The batches the loop of ``stage`` runs, per loader (``"train"``: one number, ``None`` for a loader
        without a length): what ``trainer.num_training_batches`` and the others (the progress bar) read."""
        name = BATCH_COUNTS.get(stage)
        if name is None:
            raise ValueError(f"Progress.record_batches: unknown stage {stage!r}; use one of {sorted(BATCH_COUNTS)}")
        setattr(self, name, counts if stage == "train" else list(counts))

    def end_fit(self) -> None:
        """A fit ended: its batch counts are what ``num_training_batches``/``num_val_batches`` read in the next runs
        (``last_fit_batches``), as Lightning's loops keep them."""
        self.last_fit_batches = (self.num_training_batches, list(self.num_val_batches))

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
        """A fresh record for the next run of the same Trainer: the fields declared ``carried`` go on (the step and
        epoch counters, as Lightning's loop progress does across ``fit``/``validate``), every flag and batch count
        starts anew."""
        return Progress(**{name: getattr(self, name) for name in fields_where(Progress, carried=True)})

    def take_outcome(self, values: Mapping[str, object]) -> None:
        """Continue from what a spawned worker sent back (the fields declared ``returned``, by name): its counters and
        stop request; no batch of it is running here."""
        for name, value in values.items():
            setattr(self, name, value)
        self.stepping = self.epoch_training_done = False

    def state_dict(self) -> dict[str, int]:
        """The progress as a checkpoint records it: ``epoch`` (the current epoch), ``global_step``,
        ``resume_epoch``, the epoch a resumed fit starts (the next one once this epoch's batches are done), and
        ``batches_that_stepped`` (the running batch included once it stepped: a resumed fit logs on from there)."""
        return {"epoch": self.current_epoch, "global_step": self.global_step,
                "resume_epoch": self.current_epoch + (1 if self.epoch_training_done else 0),
                "batches_that_stepped": self.batches_that_stepped}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
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
    ckpt_path: str | os.PathLike[str] | None = None
    model: torch.nn.Module | None = None
    state: TrainerState = run_field(factory=TrainerState, snapshot="copied")
    progress: Progress = run_field(factory=Progress, snapshot="deep",
                                   carried="the step and epoch counters go on (Progress.continued: its own fields "
                                           "declared carried; its flags and batch counts start anew)")
    callback_metrics: dict[str, Any] = run_field(factory=dict, snapshot="copied", returned=True)
    logged_metrics: dict[str, Any] = run_field(factory=dict, snapshot="copied", returned=True)
    progress_bar_metrics: dict[str, float] = run_field(factory=dict, snapshot="copied", returned=True)
    metrics: MetricStore = field(default_factory=MetricStore)
    hooks: HookCaller | None = run_field(None, to_workers=False)
    data: DataConnector | None = run_field(None, to_workers=False)
    publisher: Publisher | None = run_field(None, to_workers=False)
    optimization: Optimization | None = run_field(None, to_workers=False)
    fit_loop: FitLoop | None = run_field(None, to_workers=False)
    predict_loop: PredictionLoop | None = None
    optimizers: list[torch.optim.Optimizer] = run_field(
        factory=list, snapshot="copied",
        carried="validate/test/save_checkpoint after a fit use the fit's optimizers (as in Lightning)")
    schedulers: list[LRSchedulerConfig] = run_field(factory=list, snapshot="copied",
                                                    carried="they go with the optimizers")
    worker_training_state: dict[str, Any] | None = run_field(
        None, carried="the optimizer state a spawned fit sent back, for save_checkpoint after it")
    resume_position: Position | None = None
    stop_reason: str | None = run_field(None, returned=True)

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

    def begin(self, module: Module, datamodule: DataModule | None = None,
              ckpt_path: str | os.PathLike[str] | None = None) -> None:
        """Start a run of ``module``: every field fresh, except those of :data:`CARRIED_FIELDS` (the counters go
        on, the flags and batch counts of :class:`Progress` start anew)."""
        carried = {name: getattr(self, name) for name in CARRIED_FIELDS}
        carried["progress"] = self.progress.continued()  # (the one field that carries part of itself)
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
        for name in fields_where(RunState, returned=True):
            setattr(self, name, getattr(result, name))
        self.progress.take_outcome({name: getattr(result, name) for name in fields_where(Progress, returned=True)})

    def outcome(self) -> dict[str, object]:
        """What a spawned worker sends back of its run, by field name (the fields of this state and of its progress
        declared ``returned``, the arguments of a :class:`~accelkit.strategies.launchers.result.WorkerResult`): the
        metric dicts as the Trainer reads them (:meth:`current`), the counters, the stop request and its reason."""
        values = {name: self.current(name) if name in PUBLISHED else getattr(self, name)
                  for name in fields_where(RunState, returned=True)}
        values.update({name: getattr(self.progress, name) for name in fields_where(Progress, returned=True)})
        return values

    def snapshot(self) -> RunState:
        """A copy to put back later with :meth:`restore` (the tuner's trials run on the same Trainer): each field as
        its :class:`Lifecycle` says (the progress, stage, metric dicts and optimizer lists copied, the objects:
        module, optimizers, loops, shared)."""
        saved = dataclasses.replace(self)  # (not copy.copy: __getstate__ leaves the loop objects out, for workers)
        for name in fields_where(RunState, snapshot="copied"):
            setattr(saved, name, copy.copy(getattr(self, name)))
        for name in fields_where(RunState, snapshot="deep"):
            setattr(saved, name, copy.deepcopy(getattr(self, name)))
        return saved

    def restore(self, saved: RunState) -> None:
        """Put back every field of ``saved`` (a :meth:`snapshot`); a deep-copied one (the progress record) stays the
        same object, its fields put back (a loop holding it sees the restored values)."""
        deep = fields_where(RunState, snapshot="deep")
        for item in dataclasses.fields(self):
            if item.name not in deep:
                setattr(self, item.name, getattr(saved, item.name))
        for name in deep:
            live, kept = getattr(self, name), getattr(saved, name)
            for item in dataclasses.fields(live):
                setattr(live, item.name, copy.copy(getattr(kept, item.name)))

    def __getstate__(self) -> dict[str, object]:
        # sent to spawned workers with the Trainer: the loop objects of the caller's last run stay behind
        state = self.__dict__.copy()
        state.update(dict.fromkeys(fields_where(RunState, to_workers=False)))
        return state


#: the fields of :class:`RunState` that :meth:`RunState.begin` continues from the previous run, with why (the fields
#: declared ``carried``)
CARRIED_FIELDS = {item.name: lifecycle(item).carried for item in dataclasses.fields(RunState)
                  if lifecycle(item).carried is not None}
#: the metric dicts the Trainer publishes, computed when read (:meth:`RunState.current`)
PUBLISHED = ("callback_metrics", "logged_metrics", "progress_bar_metrics")
