"""The fit loop: epochs of training batches, validation when it is due, and the stopping rules."""

from __future__ import annotations

import contextlib
import itertools
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from accelkit.callbacks import EarlyStopping, Timer
from accelkit.loops import resume as resume_mod
from accelkit.loops.evaluation import EvaluationLoop
from accelkit.loops.state import RunningStage
from accelkit.module.module import Module
from accelkit.module.optimizers import step_scheduler
from accelkit.strategies.launchers import interrupt, watchdog
from accelkit.strategies.launchers.watchdog import mark, mark_step
from accelkit.strategies.sampler import set_epoch
from accelkit.utilities.model_helpers import is_overridden
from accelkit.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from accelkit.loops.hooks import HookCaller
    from accelkit.loops.optimization import BatchRunner, Optimization
    from accelkit.strategies.launchers.interrupt import StopControl
    from accelkit.trainer.trainer import Trainer
    from accelkit.utilities.types import LRSchedulerConfig


class FitLoop:
    """Drives ``fit`` inside one worker, calling the hooks in Lightning's order (see ``docs/hooks.rst``)."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.val_loaders: list[Iterable[object]] | None = None
        self.val_limits: list[int | None] = []
        self._started = time.monotonic()
        self.batches_since_val = 0
        self._val_requested = False
        #: set when a SIGINT/SIGTERM stop was reached (see :mod:`accelkit.strategies.launchers.interrupt`)
        self.interrupted = False
        # Exact resume (accelkit.loops.resume): read only when a checkpoint is written.
        self.active = False  # a checkpoint written now records the loop's position
        self.in_epoch = False  # inside an epoch's batches
        self.consumed = 0  # batches of the current epoch trained on
        self.started = 0  # batches of the current epoch started (one more than consumed while a batch runs)
        self.epoch_state: dict[str, Any] | None = None  # what decided the current epoch's order
        self.epoch_order: resume_mod.EpochOrder | None = None  # what the current epoch iterates
        self._resume: resume_mod.Position | None = None  # the position to continue from (a resumed fit's first epoch)
        self._plan: _EpochPlan | None = None  # the last epoch's, kept while it holds

    # ----------------------------------------------------------------- set-up
    def _load_val(self) -> None:
        """Whether this fit validates; its loaders are (re)built when a validation next needs them
        (:meth:`_built_val`), as Lightning's: ``val_dataloader()`` runs for the sanity check, when training starts
        if the first epoch validates, else right before the first validation (a reload's, before the next
        validation)."""
        self._val_requested = True
        trainer = self.trainer
        module = trainer.lightning_module
        if trainer.limits["validate"] == 0 or not is_overridden("validation_step", module, Module):
            self.val_loaders = None
            trainer.run_state.progress.record_batches("validate", [])
            return
        self.val_loaders = _UNBUILT

    def _built_val(self) -> list[Iterable[object]] | None:
        """The validation loaders, built now if :meth:`_load_val` left them to the first validation."""
        if self.val_loaders is _UNBUILT:
            trainer = self.trainer
            data = trainer.run_state.active_data
            self.val_loaders = data.loaders("val")
            self.val_limits = data.agreed_num_batches(self.val_loaders or [], "val", "validation")
            trainer.run_state.progress.record_batches("validate", self.val_limits)
        return self.val_loaders

    def run(self) -> None:
        """The whole fit, from ``on_fit_start`` to ``on_fit_end``."""
        trainer = self.trainer
        hooks = trainer.run_state.active_hooks
        self._resume = trainer.run_state.resume_position
        trainer.run_state.resume_position = None
        if self._resume is not None:
            self.batches_since_val = self._resume.batches_since_val
        trainer.run_state.fit_loop = self  # what a checkpoint's exact-resume position is read from
        self.active = True  # on_fit_start ran before the checkpoint's training state was restored (loops.run)
        sanity = -1 if trainer.num_sanity_val_steps == float("inf") else int(trainer.num_sanity_val_steps)  # all: -1
        if sanity != 0 and trainer.limits["validate"] != 0 and \
                is_overridden("validation_step", trainer.lightning_module, Module):
            self._sanity_check(sanity)
        self._load_train()
        if not self._val_requested:
            self._load_val()
        # as Lightning: no training batch to run (limits reached, none in the loader) skips the training hooks
        skip = trainer.num_training_batches == 0 or self._done()
        if skip and self._resume is not None and trainer.num_training_batches != 0:
            self._warn_resumed_finished_run()
        if not skip and self.val_loaders and self._validates_this_epoch():
            self._built_val()  # as Lightning: at the start when this epoch validates (its bar shows the batches)
        interval, total = trainer.val_check_interval, trainer.num_training_batches
        if self.val_loaders and isinstance(interval, int) and trainer.check_val_every_n_epoch is not None and \
                total is not None and interval > total:
            raise ValueError(f"val_check_interval={interval} must be <= the number of training batches per epoch "
                             f"({total}), or validation would never run; to count batches across epochs set "
                             "check_val_every_n_epoch=None (as in Lightning)")
        trainer.run_state.state.stage = RunningStage.TRAINING
        trainer.model.train()  # once: modes the hooks set from here on (a frozen sub-module) are kept
        if trainer.num_training_batches == 0:
            warnings.warn("limit_train_batches=0 (or an empty training loader): no training is done.",
                          UserWarning, stacklevel=2)
        if not skip:
            metrics = trainer.run_state.metrics
            metrics.reset(training=True, ahead=True)  # what it logs is the first epoch's (as Lightning's)
            with metrics.epoch_level():
                hooks.call("on_train_start")
            while not self._done():
                if trainer.reload_dataloaders_every_n_epochs and trainer.current_epoch > 0 and \
                        trainer.current_epoch % trainer.reload_dataloaders_every_n_epochs == 0:
                    self._load_train()
                    self._load_val()
                trained = self._epoch()
                if trained == 0:
                    warnings.warn(f"epoch {trainer.current_epoch - 1} produced no training batches; stopping.",
                                  UserWarning, stacklevel=2)
                    break
        if self.interrupted:
            return  # stopped by a signal mid-epoch: no end-of-training hooks (the caller saves and raises)
        trainer.run_state.stop_reason = self.stop_reason()
        if not skip:
            hooks.call("on_train_end")
        hooks.call("on_fit_end")
        self.active = False

    def _warn_resumed_finished_run(self) -> None:
        """Say that the checkpoint this fit resumed had already reached the fit's end, so it trains nothing
        (Lightning only logs its stop line): a resumed fit that silently trains nothing looks like a success."""
        trainer = self.trainer
        rank_zero_warn(f"fit(ckpt_path={str(trainer.ckpt_path)!r}) resumed a run that had already stopped "
                       f"({self.stop_reason()} at the checkpoint's epoch {trainer.current_epoch}, step "
                       f"{trainer.global_step}): this fit trains nothing. To train further, give a max_epochs or "
                       "max_steps beyond the checkpoint's.", category=UserWarning)

    def _sanity_check(self, steps: int) -> None:
        trainer = self.trainer
        trainer.sanity_checking = True
        trainer.run_state.state.stage = RunningStage.SANITY_CHECKING
        for fn in trainer.run_state.active_hooks.callback_plan("on_sanity_check_start"):
            fn()
        try:
            with isolated_rng():  # turning the sanity check on or off does not change training (Lightning too)
                self._load_val()
                if self._built_val():
                    limits = [n if steps < 0 else (steps if n is None else min(steps, n)) for n in self.val_limits]
                    EvaluationLoop(trainer, "sanity_check").run(self._built_val() or [], limits, inside_fit=True)
        finally:
            trainer.sanity_checking = False
        for fn in trainer.run_state.active_hooks.callback_plan("on_sanity_check_end"):
            fn()
        for values in (trainer.callback_metrics, trainer.logged_metrics, trainer.progress_bar_metrics):
            values.clear()  # what the sanity check logged is gone before training (Lightning resets them here too)

    def _load_train(self) -> None:
        """The training loader (again, when it is reloaded) and its batches per epoch, agreed by every process
        (``trainer.num_training_batches``)."""
        trainer = self.trainer
        if trainer.limits["fit"] == 0:  # as Lightning: no batch will be asked for; train_dataloader() is not called
            self.train_loader = None
            trainer.run_state.progress.record_batches("train", 0)
            return
        data = trainer.run_state.active_data
        train_loaders = data.loaders("train")
        if train_loaders is None:
            raise ValueError(f"no training data: pass train_dataloaders to fit(), a datamodule, or define "
                             f"{type(trainer.lightning_module).__name__}.train_dataloader()")
        self.train_loader = train_loaders[0]
        counts = data.agreed_num_batches([self.train_loader], "train", "training")
        trainer.run_state.progress.record_batches("train", counts[0])
        if trainer.loggers and counts[0] is not None and counts[0] < trainer.log_every_n_steps:
            # as Lightning: a step value is logged at every log_every_n_steps-th step, counted over the whole fit
            rank_zero_warn(f"The training epoch has {counts[0]} batches, fewer than Trainer(log_every_n_steps="
                           f"{trainer.log_every_n_steps}): the loggers record a training step's values only every "
                           f"{trainer.log_every_n_steps} steps of the fit. Give a smaller log_every_n_steps to see "
                           "them every epoch.", category=UserWarning)

    # ----------------------------------------------------------------- stopping
    def _done(self) -> bool:
        trainer = self.trainer
        if self.interrupted:
            return True
        if trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps:
            return True
        if trainer.max_epochs is not None and trainer.max_epochs != -1 and trainer.current_epoch >= trainer.max_epochs:
            return True
        if self._out_of_time():
            return True
        if trainer.should_stop:
            if self._minimums_met():
                return True
            # the stop stays requested and happens once min_epochs/min_steps are reached
            if not getattr(self, "_deferred_note", False):
                self._deferred_note = True
                print(f"accelkit: a stop was requested but min_epochs={trainer.min_epochs}/min_steps="
                      f"{trainer.min_steps} are not reached yet; training continues.")
        return False

    def _minimums_met(self) -> bool:
        """Whether a requested stop may happen now. As Lightning's: ``min_steps`` without ``min_epochs`` also
        waits for the end of the first epoch (its ``min_epochs`` becomes 1)."""
        trainer = self.trainer
        min_epochs = trainer.min_epochs if trainer.min_epochs is not None else int(trainer.min_steps is not None)
        return trainer.current_epoch >= min_epochs and (
            trainer.min_steps is None or trainer.global_step >= trainer.min_steps)

    def stop_reason(self) -> str:
        """Why training ended, in a few words for the end-of-fit summary (the rule of :meth:`_done` that held)."""
        trainer = self.trainer
        if not trainer.num_training_batches:
            return "no training batches (limit_train_batches=0 or an empty loader)"
        if trainer.fast_dev_run:
            return f"fast_dev_run={trainer.fast_dev_run} done"
        if trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps:
            return f"max_steps={trainer.max_steps} reached"
        if self._out_of_time() and trainer.max_time is not None:
            return f"max_time={timedelta(seconds=round(trainer.max_time))} reached"
        if trainer.should_stop and self._minimums_met():
            return _requested_stop(trainer)
        if trainer.max_epochs is not None and trainer.max_epochs != -1 and trainer.current_epoch >= trainer.max_epochs:
            return f"max_epochs={trainer.max_epochs} reached"
        return "an epoch produced no training batches"

    def _out_of_time(self) -> bool:
        limit = self.trainer.max_time
        return limit is not None and time.monotonic() - self._started >= limit

    def _stop_within_epoch(self) -> bool:
        trainer = self.trainer
        if trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps:
            return True
        if trainer.should_stop and self._minimums_met():
            return True
        return self._out_of_time()

    # ----------------------------------------------------------------- one epoch
    def _val_due(self, batch_idx: int, is_last: bool) -> bool:
        trainer = self.trainer
        if not self.val_loaders:
            return False
        every = trainer.check_val_every_n_epoch
        interval = trainer.val_check_interval
        if isinstance(interval, float):
            if interval >= 1.0:
                due = is_last
            else:
                total = trainer.run_state.progress.num_training_batches  # None: no length
                stride = max(1, int(total * interval)) if total else None
                if stride is None:
                    raise ValueError(f"val_check_interval={interval} is a fraction but the training loader has no "
                                     "length; give an int number of batches")
                due = (batch_idx + 1) % stride == 0
        else:
            if every is None:
                self.batches_since_val += 1
                return self.batches_since_val % interval == 0
            due = (batch_idx + 1) % interval == 0
        return due and self._validates_this_epoch()

    def _validates_this_epoch(self) -> bool:
        """Whether the current epoch validates (``check_val_every_n_epoch``; ``None``: validation counts batches
        across epochs)."""
        every = self.trainer.check_val_every_n_epoch
        return every is None or (self.trainer.current_epoch + 1) % every == 0

    def _stop_val(self) -> bool:
        """A stop was requested and may happen now: validate before it, as Lightning does, in an epoch that
        validates."""
        return self.trainer.should_stop and self._validates_this_epoch() and self._minimums_met()

    def _epoch(self) -> int:
        trainer = self.trainer
        run = trainer.run_state
        hooks, optim, data = run.active_hooks, run.active_optimization, run.active_data
        loader = cast("Iterable[object]", self.train_loader)  # (set: an epoch runs with training data only)
        source, start, restore_rng = self._begin_epoch(loader)
        limit = trainer.run_state.progress.num_training_batches  # (the loader's, loaded: the property's value)
        read_ahead = limit is None or not resume_mod.is_stateful(loader)  # a stateful loader's state: no read-ahead
        # a callback may change accumulate_grad_batches per epoch (GradientAccumulationScheduler)
        optim.accumulate = trainer.accumulate_grad_batches
        plan = self._plan
        if plan is None or plan.hooks is not hooks or plan.optim is not optim or plan.accumulate != optim.accumulate:
            plan = self._plan = _EpochPlan(hooks, optim)  # (kept while these stay: the batch hooks do for a run)
        step_scheds, epoch_scheds = plan.step_scheds, plan.epoch_scheds = self._scheduler_plan(optim.automatic)
        self.consumed = self.started = start
        self.in_epoch = True
        batches, prepare = data.epoch_batches(source, "fit", limit, start=start, read_ahead=read_ahead)
        batch_idx, skipped_rest = self._steps(batches, prepare, start, plan, restore_rng)
        ran = batch_idx + 1 - start
        if self.interrupted:
            return ran  # still inside the epoch: the checkpoint the caller saves resumes it
        self.in_epoch = False
        resumed_empty = ran == 0 and start > 0  # every batch was trained before the checkpoint (on other data)
        if skipped_rest or resumed_empty:
            self._step_epoch_schedulers(epoch_scheds)
        if resumed_empty:
            self._finish_resumed_epoch(start)
        self._end_epoch(optim.automatic)
        return start + ran  # the epoch's batches trained, before the checkpoint of a resumed epoch included

    def _steps(self, batches: Iterator[tuple[int, object, bool]], prepare: Callable[[object], object], start: int,
               plan: _EpochPlan, restore_rng: dict[str, Any] | None) -> tuple[int, bool]:
        """The loop over an epoch's batches, in Lightning's order: the batch put on the device, the watchdog's note,
        ``on_train_batch_start``, the batch counted, the step (:meth:`~accelkit.loops.optimization.Optimization.
        batch_runner`'s), the step-interval schedulers, the epoch's end at its last batch, ``on_train_batch_end``,
        then what may be due (:meth:`_after_batch`: the log, validation, a stop), asked by one test. ``batches`` and
        ``prepare``: :meth:`~accelkit.loops.data.DataConnector.epoch_batches`', read here in the loop's own frame.
        The batch hooks are lists planned at the epoch's start, skipped by one test where nothing overrides them.
        Returns the last batch index run and whether ``on_train_batch_start``
        skipped the rest of the epoch."""
        trainer = self.trainer
        progress, run_batch, log_every = trainer.run_state.progress, plan.run_batch, trainer.log_every_n_steps
        accumulate = plan.optim.accumulate if plan.automatic else 1  # (a manual batch always counts as stepping)
        every = accumulate == 1
        start_cbs, start_m, hooked = plan.start_cbs, plan.start_m, plan.hooked
        metrics, stop = trainer.run_state.metrics, interrupt.current()
        report: Callable[[int], object] | None = None  # (bound once)
        pending: Callable[[], object] = bool  # (asked only after a report)
        if stop is not None:
            report, pending = stop.report, stop.pending
        marks = watchdog.running()  # the watchdog's note, in a distributed run
        step_scheds, end_fns = plan.step_scheds, plan.end_fns
        # a step-interval scheduler or on_train_batch_end after any batch, as the epoch's end after its last
        ends = bool(step_scheds or end_fns)
        check = bool(self.val_loaders)  # validation may be due after any batch, as anything after the last one
        batch_idx = start - 1  # the batches run: batch_idx + 1 - start (no counter per batch)
        first = next(batches, None)  # (the loader starts, or has started and reads its second batch)
        if first is None:
            return batch_idx, False
        progress.begin_batch(first[2])  # the previous epoch's last-batch flag goes (or stays: one batch)
        if restore_rng is not None:  # the resumed epoch's order is drawn: continue the checkpoint's streams
            resume_mod.set_rng_states(restore_rng, trainer.accelerator)
        for batch_idx, batch, is_last in itertools.chain((first,), batches):
            batch = prepare(batch)
            if is_last:  # (the flag changes only here: no call per batch)
                ends = check = True
                progress.begin_batch(True)
            if marks:  # what this rank is doing (its backward: no note)
                mark_step(progress.global_step, batch_idx)
            metrics.current_batch = batch
            if hooked:
                for fn in start_cbs:
                    fn(batch, batch_idx)
                if start_m is not None and start_m(batch, batch_idx) == -1:
                    return batch_idx, True
            self.started = batch_idx + 1  # (a failure from here to `consumed` is inside this batch)
            boundary = every or progress.accumulation_boundary(batch_idx, accumulate)
            progress.count_batch(boundary)  # counted at once (a checkpoint from its hooks includes it)
            output, stepped = run_batch(batch, batch_idx, boundary)
            if ends:  # in Lightning's order
                if step_scheds and stepped:
                    self._step_step_schedulers(step_scheds)
                self.consumed = self.started
                if is_last:
                    progress.finish_epoch_training()  # a checkpoint written from here on resumes next epoch
                    self._step_epoch_schedulers(plan.epoch_scheds)
                for fn in end_fns:
                    fn(output, batch, batch_idx)
            else:
                self.consumed = self.started
            # one test tells a batch after which nothing but a signal's stop can be due (none of these has a side
            # effect); what can change within the epoch (a requested stop, max_steps, max_time) is read at every batch
            if check or progress.should_stop or not progress.batches_that_stepped % log_every or \
                    (settings := trainer.settings).max_time is not None or settings.max_steps >= 0 and \
                    settings.max_steps <= progress.global_step:
                if self._after_batch(batch_idx, is_last, boundary, stepped, stop):
                    return batch_idx, False
            elif report is not None:  # what _after_batch does when nothing else is due
                report(progress.global_step)
                if pending() and self._interrupt_due(cast("StopControl", stop)):  # (report: stop's)
                    return batch_idx, False
        return batch_idx, False

    def _after_batch(self, batch_idx: int, is_last: bool, boundary: bool, stepped: bool,
                     stop: StopControl | None) -> bool:
        """What may be due after a training batch and its ``on_train_batch_end``, in Lightning's order: the step's
        log (every ``log_every_n_steps`` batches that stepped, or at a requested stop), validation (``stepped``: the
        optimizer stepped), a signal's stop (``stop``: :func:`~accelkit.strategies.launchers.interrupt.current`),
        the limits; ``True``: the epoch ends here."""
        trainer = self.trainer
        progress = trainer.run_state.progress
        if boundary and (not progress.batches_that_stepped % trainer.log_every_n_steps or progress.should_stop):
            trainer.run_state.active_publisher.log_step()  # as Lightning: every log_every_n_steps batches that stepped
        if self.val_loaders and (self._val_due(batch_idx, is_last) or progress.should_stop and self._stop_val()):
            self._validate_in_epoch(stepped)
        if stop is not None:
            stop.report(progress.global_step)
            if stop.pending() and self._interrupt_due(stop):
                return True
        settings = trainer.settings
        return (progress.should_stop or settings.max_time is not None or
                0 <= settings.max_steps <= progress.global_step) and self._stop_within_epoch()

    def _step_step_schedulers(self, configs: list[LRSchedulerConfig]) -> None:
        """After an optimizer step: step the step-interval schedulers in ``configs`` whose ``frequency`` the
        global step reaches."""
        trainer = self.trainer
        for config in configs:
            if trainer.global_step % config.frequency == 0:
                # (callback_metrics is computed when read: only a plateau scheduler reads it)
                step_scheduler(trainer.lightning_module, config,
                               trainer.callback_metrics if config.reduce_on_plateau else {},
                               trainer.run_state.active_optimization.scheduler_hook)

    def _validate_in_epoch(self, stepped: bool) -> None:
        """A validation due after a training batch (its optimizer stepped: ``stepped``)."""
        mark("validation")
        self._validate(zero_grad=stepped)  # restores training mode (on_validation_model_train)

    def _interrupt_due(self, stop: StopControl) -> bool:
        """A SIGINT/SIGTERM stop is pending (``stop.pending()``): ``True`` (and :attr:`interrupted`) when it is due
        now (every process stops after this step)."""
        if stop.due(self.trainer.run_state.progress.global_step):
            self.interrupted = True
            return True
        return False

    def _finish_resumed_epoch(self, start: int) -> None:
        """A resumed epoch with no batch left (its samples were all trained before the checkpoint, which was
        written on other data) ends as its last batch would have: validation when it is due at the epoch's end."""
        trainer = self.trainer
        trainer.run_state.progress.finish_epoch_training()
        if self.val_loaders and isinstance(trainer.val_check_interval, float) and \
                self._val_due(start - 1, is_last=True):
            self._validate(zero_grad=False)

    def _begin_epoch(self, loader: Iterable[object]) -> tuple[Iterable[object], int, dict[str, Any] | None]:
        """The epoch's start: sampler epoch, fresh epoch metrics, the resume position of a resumed fit, the hook,
        and the record of what decides the epoch's order. Returns (batches to iterate, first index, RNG states to
        put back once the loader started)."""
        trainer = self.trainer
        set_epoch(loader, trainer.current_epoch)
        trainer.run_state.metrics.reset(training=True)
        source, start, restore_rng = loader, 0, None
        self.epoch_state = None
        self.epoch_order = resume_mod.EpochOrder(loader)
        if self._resume is not None:  # the first epoch of a resumed fit
            source, start, restore_rng = resume_mod.begin_epoch(self, loader, self._resume)
            self._resume = None
        if start == 0:  # as Lightning, not called again when the fit resumes inside the epoch
            with trainer.run_state.metrics.epoch_level():
                trainer.run_state.active_hooks.call("on_train_epoch_start")
        if self.epoch_state is None:  # once per epoch, right before the loader starts
            self.epoch_state = resume_mod.epoch_start(loader, trainer.accelerator)
        return source, start, restore_rng

    def _scheduler_plan(self, automatic: bool) -> tuple[list[LRSchedulerConfig], list[LRSchedulerConfig]]:
        """The schedulers stepped per optimizer step, and those stepped at the epoch's end (not on plateau)."""
        if not automatic:
            return [], []
        configs = self.trainer.lr_scheduler_configs
        return ([c for c in configs if c.interval == "step"],
                [c for c in configs if c.interval == "epoch" and not c.reduce_on_plateau])

    def _end_epoch(self, automatic: bool) -> None:
        trainer = self.trainer
        trainer.run_state.progress.finish_epoch_training()
        run = trainer.run_state
        # the epoch's rows are at the step of its last batch's (Lightning steps back one for them, whatever it was)
        run.active_publisher.end_epoch(run.active_hooks, "on_train_epoch_end", monitoring_last=True,
                                       step=run.progress.batches_that_stepped - 1)
        if automatic:  # plateau schedulers step once the epoch's metrics (validation's too) are published
            self._step_epoch_schedulers([c for c in trainer.lr_scheduler_configs
                                         if c.interval == "epoch" and c.reduce_on_plateau])
        trainer.run_state.progress.advance_epoch()

    def _step_epoch_schedulers(self, configs: list[LRSchedulerConfig]) -> None:
        """Step the epoch-interval schedulers in ``configs`` whose ``frequency`` this epoch reaches."""
        trainer = self.trainer
        for config in configs:
            if (trainer.current_epoch + 1) % config.frequency == 0:
                step_scheduler(trainer.lightning_module, config, trainer.callback_metrics,
                               trainer.run_state.active_optimization.scheduler_hook)

    def _validate(self, zero_grad: bool) -> None:
        trainer = self.trainer
        loaders = self._built_val()
        if not loaders:
            return
        trainer.run_state.state.stage = RunningStage.VALIDATING
        try:
            EvaluationLoop(trainer, "validate").run(loaders, self.val_limits, inside_fit=True, zero_grad=zero_grad)
        finally:
            trainer.run_state.state.stage = RunningStage.TRAINING


class _EpochPlan:
    """What runs around an epoch's steps, decided at its start: the batch hooks (lists, empty where nothing
    overrides them), the schedulers (set each epoch) and the batch runner
    (:meth:`~accelkit.loops.optimization.Optimization.batch_runner`, asked again when ``accumulate`` changes)."""

    def __init__(self, hooks: HookCaller, optim: Optimization) -> None:
        self.hooks, self.optim, self.automatic, self.accumulate = hooks, optim, optim.automatic, optim.accumulate
        self.run_batch: BatchRunner = optim.batch_runner()
        self.step_scheds: list[LRSchedulerConfig] = []
        self.epoch_scheds: list[LRSchedulerConfig] = []
        self.start_cbs = hooks.callback_plan("on_train_batch_start")
        self.start_m = hooks.module_hook("on_train_batch_start")
        # on_train_batch_end: the callbacks', then the module's (one list: no test per batch for the module's)
        end_m = hooks.module_hook("on_train_batch_end")
        self.end_fns = [*hooks.callback_plan("on_train_batch_end"), *([] if end_m is None else [end_m])]
        #: whether any batch hook runs (the loop skips them by one test where none does)
        self.hooked = bool(self.start_cbs or self.start_m is not None or self.end_fns)


#: :attr:`FitLoop.val_loaders` of a fit that validates, before its loaders are built (truthy: validation is on)
_UNBUILT: list[Any] = [None]

@contextlib.contextmanager
def isolated_rng() -> Iterator[None]:
    """Restore the CPU torch, Python and NumPy random states on exit (what the block draws is forgotten)."""
    states = resume_mod.rng_states()
    try:
        yield
    finally:
        resume_mod.set_rng_states(states)


def _requested_stop(trainer: Trainer) -> str:
    """Who set ``trainer.should_stop``: an :class:`~accelkit.callbacks.EarlyStopping` that stopped (its monitor and
    reason), a :class:`~accelkit.callbacks.Timer` out of time, or else the Module or a callback of the user."""
    for callback in trainer.callbacks:
        if isinstance(callback, EarlyStopping) and callback.stopping_reason.value:
            return (f"early stopping on {callback.monitor} "
                    f"({callback.stopping_reason.name.lower().replace('_', ' ')})")
        if isinstance(callback, Timer) and callback.duration is not None and \
                (remaining := callback.time_remaining("train")) is not None and remaining <= 0:
            return f"Timer(duration={timedelta(seconds=round(callback.duration))}) reached"
    return "trainer.should_stop was set"
