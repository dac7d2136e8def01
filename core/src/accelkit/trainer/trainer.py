"""``accelkit.Trainer``: resolves the run from strings, launches it, and reports its state.

The loops themselves live in :mod:`accelkit.loops`; optimizers and schedulers in :mod:`accelkit.module.optimizers`.
"""

from __future__ import annotations

import datetime
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from accelkit.callbacks.base import Callback
from accelkit.callbacks.progress.default import configure_progress_bar
from accelkit.errors import ConfigurationError
from accelkit.loops.captured import compile_options
from accelkit.loops.state import RunState, TrainerState
from accelkit.plugins.compose import Composition, named_callbacks, named_profiler
from accelkit.plugins.manager import PluginManager, portable_plugins, resolve_plugins
from accelkit.profilers import resolve_profiler
from accelkit.trainer.argument_types import MetricLogger, refuse_wrong_types
from accelkit.trainer.arguments import (
    CLOUD_ONLY,
    callback_list,
    check_barebones,
    check_loaders,
    check_root_dir,
    check_run_arguments,
    compose_arguments,
    logger_list,
    parse_collective_timeout,
    parse_max_time,
    plugin_arguments,
    split_datamodule,
)
from accelkit.trainer.properties import TrainerProperties
from accelkit.trainer.settings import TrainerSettings
from accelkit.trainer.summary import print_fit_summary
from accelkit.utilities.seed import seed_from_environment

if TYPE_CHECKING:
    from accelkit.accelerator import Accelerator
    from accelkit.module.datamodule import DataModule
    from accelkit.module.module import Module
    from accelkit.precision import Precision
    from accelkit.profilers import Profiler
    from accelkit.strategies.base import Strategy

__all__ = ["Trainer", "TrainerSnapshot", "TrainerState"]  # TrainerState's home is accelkit.loops.state


@dataclass(frozen=True, eq=False)
class TrainerSnapshot:
    """What :meth:`accelkit.Trainer.snapshot` remembered, for :meth:`accelkit.Trainer.restore`: the Trainer's
    settings (the object itself: it is immutable), its callback and logger lists (the lists themselves), the
    checkpoint requested with ``trainer.ckpt_path = path``, and a copy of its run state (progress, stage, metrics)."""

    #: the :class:`~accelkit.trainer.settings.TrainerSettings` in use
    settings: TrainerSettings
    #: ``trainer.callbacks``
    callbacks: list[Callback]
    #: ``trainer.loggers``
    loggers: list[Any]
    #: ``trainer.requested_ckpt_path``
    requested_ckpt_path: str | os.PathLike[str] | None
    #: ``trainer.warned_unknown_hooks``
    warned_unknown_hooks: bool
    #: a copy of ``trainer.run_state`` (:meth:`~accelkit.loops.state.RunState.snapshot`)
    run: RunState


class Trainer(TrainerProperties):
    """Compose a run from names and drive it: Lightning's ``Trainer`` arguments, resolved through plugins.

    Every argument is checked when the Trainer is built: a wrong type or value is a
    :class:`~accelkit.errors.ConfigurationError` naming the argument and what it accepts. Wrong types are reported
    first, all in one error (:mod:`accelkit.trainer.argument_types`), then wrong values, all in one error. Flags take
    a Python ``bool`` only (not ``1``, ``"yes"``, ``numpy.True_`` or a tensor).

    :param accelerator: an accelerator name (``"cpu"``, or any a plugin provides, with aliases), an
        :class:`~accelkit.Accelerator` instance, or ``"auto"``: the available accelerator of highest priority.
    :param strategy: a strategy name (``"ddp_spawn"``...), a :class:`~accelkit.Strategy`, or ``"auto"``.
    :param devices: how many devices, which ones (``[1]``, ``"0,1"``), or ``"auto"``.
    :param num_nodes: number of machines (processes on each are started by ``torchrun``/``srun``); not given
        (``None``): the launcher's (torchrun's ``GROUP_WORLD_SIZE``, srun's ``SLURM_NNODES``; an elastic torchrun
        run's changes between attempts), else 1.
    :param precision: ``"32-true"`` (default; ``None`` says the same, as in Lightning), ``"64-true"``,
        ``"bf16-mixed"``, ``"16-mixed"`` ..., as the accelerator's plugins provide; ints such as ``16`` are aliases.
    :param logger: ``True``/``None`` (default) for Lightning's default logger under ``default_root_dir``
        (:func:`~accelkit.loggers.default_logger`: TensorBoard when installed, else CSV, in
        ``lightning_logs/version_<n>``), ``False`` for none, a logger, or a list of loggers.
    :param callbacks: :class:`~accelkit.Callback` instances (one or a list), or names a plugin registered
        (``"ema"``, through ``accelkit_register_callbacks``).
    :param fast_dev_run: run 1 (``True``) or N batches of every loop once, without loggers or checkpoints.
    :param max_epochs: stop after this many epochs (``-1``: no limit). Not given, a fit sets it, as Lightning's: 1000
        without ``max_steps``, ``max_time`` or a ``Timer`` callback (with a warning), else ``-1`` (they decide).
    :param min_epochs: a stop requested earlier (early stopping) waits for this many epochs.
    :param max_steps: stop after this many optimizer steps (``-1``: no limit).
    :param min_steps: a stop requested earlier waits for this many steps (and, without ``min_epochs``, for the end
        of the first epoch, as in Lightning). A stop that may happen validates first, as in Lightning.
    :param max_time: stop after this long: ``"DD:HH:MM:SS"``, a ``timedelta`` or a dict of its arguments.
    :param limit_train_batches: batches per training epoch: an int, or a float fraction (``None``: all).
    :param limit_val_batches: likewise for validation (``0`` turns validation off).
    :param limit_test_batches: likewise for testing.
    :param limit_predict_batches: likewise for prediction.
    :param overfit_batches: train (and validate) on this many batches (or fraction) of the training data, unshuffled.
    :param val_check_interval: validate every N training batches (int) or every fraction of an epoch (float).
    :param check_val_every_n_epoch: validate after every N-th training epoch (``None``: count batches across
        epochs with an int ``val_check_interval``).
    :param num_sanity_val_steps: validation batches run before training to catch bugs early (``-1``: all).
    :param log_every_n_steps: how often per-step metrics are read from the device and logged.
    :param enable_checkpointing: add Lightning's default :class:`~accelkit.callbacks.ModelCheckpoint`, keeping the
        latest ``epoch=E-step=S.ckpt`` (and no ``last.ckpt``) in the run's folder, ``<log_dir>/checkpoints``
        (``<default_root_dir>/checkpoints`` without a logger), unless one is given; ``ckpt_path="last"`` finds the
        newest of its files.
    :param enable_progress_bar: show the progress bar: the :class:`~accelkit.callbacks.ProgressBar` among the
        callbacks, else a :class:`~accelkit.callbacks.TQDMProgressBar` (drawn by the global-zero process only).
    :param enable_model_summary: print a table of the module's layers and parameter counts at fit start.
    :param accumulate_grad_batches: sum gradients over this many batches per optimizer step.
    :param gradient_clip_val: clip gradients to this norm (or value); ``None``: no clipping.
    :param gradient_clip_algorithm: ``"norm"`` (default) or ``"value"``.
    :param deterministic: ``True`` makes torch use deterministic algorithms (``"warn"``: warn where impossible).
    :param benchmark: the value of ``torch.backends.cudnn.benchmark`` during the run (``None``: unchanged).
    :param inference_mode: evaluate under ``torch.inference_mode()`` (``False``: ``torch.no_grad()``).
    :param use_distributed_sampler: in a distributed run, give each rank its shard of the data (a sampler
        that already knows its rank is left as it is).
    :param profiler: ``"simple"``, ``"pytorch"``, a name a plugin registered (``"nvtx"``, through
        ``accelkit_register_profilers``), a :class:`~accelkit.profilers.Profiler`, or ``None``.
    :param detect_anomaly: run with ``torch.autograd.detect_anomaly()``.
    :param barebones: turn off everything that costs time per step (logging, bar, checkpoints, summary).
    :param plugins: plugin objects to register, strategy or precision names/instances (``"tpu_spawn_debug"``),
        and ``"no:NAME"`` to block an installed plugin.
    :param sync_batchnorm: turn batch-norm layers into ``SyncBatchNorm`` in distributed runs.
    :param reload_dataloaders_every_n_epochs: request the loaders again every N epochs.
    :param default_root_dir: where logs and checkpoints go (default: the working directory).
    :param seed: base seed for the distributed sampler's shuffling (default ``ACCELKIT_SEED`` or 0).
    :param collective_timeout: how long a distributed collective (gradient exchange, barrier, metric reduction,
        joining the process group) may wait for the other processes before the run fails: seconds or a
        ``timedelta``; default 10 minutes (``torch.distributed``'s own default is 30). A watchdog names the rank
        that is behind after a tenth of it (see ``docs/topology.rst``).
    :param compile_step: accelkit only: run each automatic training step as a captured step, its forward, loss,
        backward and optimizer step compiled with ``torch.compile`` (``True``: its defaults; a dict: its keyword
        arguments, e.g. ``{"mode": "reduce-overhead"}``). What it accepts and refuses: ``docs/captured-step.rst``.
    :param legacy_arguments: other keyword arguments (old spellings such as a ``*_cores=`` argument); a plugin
        translates them or the Trainer raises ``TypeError``.
    """

    def __init__(
        self, *,
        accelerator: str | Accelerator | type[Accelerator] = "auto", strategy: str | Strategy = "auto",
        devices: int | str | Sequence[int] = "auto", num_nodes: int | None = None,
        precision: str | int | Precision | None = "32-true",
        logger: bool | str | MetricLogger | Iterable[str | MetricLogger] | None = None,
        callbacks: Iterable[Callback | str] | Callback | str | None = None,
        fast_dev_run: int | bool = False, max_epochs: int | None = None, min_epochs: int | None = None,
        max_steps: int = -1, min_steps: int | None = None,
        max_time: str | datetime.timedelta | dict[str, float] | None = None,
        limit_train_batches: int | float | None = None, limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None, limit_predict_batches: int | float | None = None,
        overfit_batches: int | float = 0.0, val_check_interval: int | float | None = None,
        check_val_every_n_epoch: int | None = 1, num_sanity_val_steps: int | None = None,
        log_every_n_steps: int | None = None, enable_checkpointing: bool | None = None,
        enable_progress_bar: bool | None = None, enable_model_summary: bool | None = None,
        accumulate_grad_batches: int = 1, gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None, deterministic: bool | Literal["warn"] | None = None,
        benchmark: bool | None = None,
        inference_mode: bool = True, use_distributed_sampler: bool = True, profiler: str | Profiler | None = None,
        detect_anomaly: bool = False, barebones: bool = False, plugins: object = None, sync_batchnorm: bool = False,
        reload_dataloaders_every_n_epochs: int = 0, default_root_dir: str | os.PathLike | None = None,
        seed: int | None = None, collective_timeout: float | datetime.timedelta | None = None,
        compile_step: bool | dict[str, Any] | None = False, **legacy_arguments: object,
    ) -> None:
        # the types first, before any value is read (a tensor asked for its truth, a float turned into a path)
        refuse_wrong_types({name: value for name, value in locals().items() if name != "self"})
        for name, reason in CLOUD_ONLY.items():
            if legacy_arguments.pop(name, None) is not None:
                raise ConfigurationError(reason)
        run_args: dict[str, object] = dict(
            max_epochs=max_epochs, max_steps=max_steps, min_epochs=min_epochs, min_steps=min_steps,
            accumulate_grad_batches=accumulate_grad_batches, gradient_clip_val=gradient_clip_val,
            gradient_clip_algorithm=gradient_clip_algorithm,
            log_every_n_steps=50 if log_every_n_steps is None else log_every_n_steps,
            check_val_every_n_epoch=check_val_every_n_epoch,
            val_check_interval=1.0 if val_check_interval is None else val_check_interval,
            num_sanity_val_steps=2 if num_sanity_val_steps is None else num_sanity_val_steps,
            fast_dev_run=fast_dev_run, reload_dataloaders_every_n_epochs=reload_dataloaders_every_n_epochs,
            deterministic=deterministic, limit_train_batches=limit_train_batches,
            limit_val_batches=limit_val_batches, limit_test_batches=limit_test_batches,
            limit_predict_batches=limit_predict_batches, overfit_batches=overfit_batches, compile_step=compile_step)
        barebones_args: dict[str, object] | None = dict(
            enable_checkpointing=enable_checkpointing, enable_progress_bar=enable_progress_bar,
            enable_model_summary=enable_model_summary, logger=logger, profiler=profiler, detect_anomaly=detect_anomaly,
            log_every_n_steps=log_every_n_steps) if barebones else None
        arguments: dict[str, Any] = {  # what accelkit_translate_arguments rewrites (plugins' own values)
            "accelerator": accelerator, "devices": devices, "strategy": strategy, "num_nodes": num_nodes,
            "precision": "32-true" if precision is None else precision, "extra": dict(legacy_arguments)}
        self._composition, max_seconds = self._compose(plugins, arguments, run_args, barebones_args, max_time,
                                                       sync_batchnorm, collective_timeout)
        fast = int(fast_dev_run)
        root = Path(default_root_dir or os.getcwd())
        writes = not (fast or barebones) and (enable_checkpointing is not False or logger in (None, True))
        unwritable = check_root_dir(root) if writes else None
        if unwritable:
            raise ConfigurationError(unwritable)
        limits: list[int | float | None] = [limit_train_batches, limit_val_batches, limit_test_batches,
                                            limit_predict_batches] if not fast else [fast] * 4
        if overfit_batches and not fast:
            limits[0] = limits[1] = overfit_batches
        sanity = 0 if fast or barebones else 2 if num_sanity_val_steps is None else num_sanity_val_steps
        #: the run's settings, built once here; changed only by :meth:`replace_settings` (see :attr:`settings`)
        self._settings = TrainerSettings(
            default_root_dir=root, fast_dev_run=fast_dev_run, barebones=barebones,
            max_epochs=1 if fast else max_epochs,  # None: fit decides (trainer/dispatch.py), as Lightning's
            min_epochs=min_epochs, max_steps=fast if fast else max_steps, min_steps=min_steps, max_time=max_seconds,
            limit_train_batches=limits[0], limit_val_batches=limits[1], limit_test_batches=limits[2],
            limit_predict_batches=limits[3], overfit_batches=overfit_batches,
            val_check_interval=1.0 if val_check_interval is None else val_check_interval,
            check_val_every_n_epoch=check_val_every_n_epoch,
            num_sanity_val_steps=math.inf if sanity == -1 else sanity,  # -1 reads inf, as Lightning's
            log_every_n_steps=50 if log_every_n_steps is None else log_every_n_steps,
            accumulate_grad_batches=accumulate_grad_batches, gradient_clip_val=gradient_clip_val,
            gradient_clip_algorithm=gradient_clip_algorithm,
            compile_step=compile_options(compile_step),  # torch.compile's keyword arguments, or None
            deterministic=deterministic, benchmark=benchmark, inference_mode=inference_mode,
            detect_anomaly=detect_anomaly, sync_batchnorm=sync_batchnorm,
            reload_dataloaders_every_n_epochs=reload_dataloaders_every_n_epochs,
            enable_progress_bar=not barebones and enable_progress_bar is not False,
            enable_model_summary=not barebones and enable_model_summary is not False,
            enable_checkpointing=not (fast or barebones) and enable_checkpointing is not False,
            use_distributed_sampler=use_distributed_sampler,
            seed=seed if seed is not None else seed_from_environment(0))
        self.loggers = [] if fast or barebones else logger_list(logger, self.default_root_dir, self.plugin_manager)
        self.profiler = resolve_profiler(named_profiler(profiler, self.plugin_manager))
        self.callbacks = callback_list(named_callbacks(callbacks, self.plugin_manager))
        self._configure_callbacks(enable_checkpointing)
        if fast:
            print(f"accelkit: fast_dev_run={fast_dev_run}: every loop runs {fast} batch(es); logging and "
                  "checkpointing are off.")
        self._reset_run_state()

    def _configure_callbacks(self, enable_checkpointing: bool | None) -> None:
        """The progress bar, the model summary and Lightning's default checkpoint callback among ``self.callbacks``;
        ``enable_checkpointing=False`` next to a checkpoint callback of the user's is refused."""
        from accelkit.callbacks import ModelCheckpoint
        from accelkit.callbacks.model_checkpoint import is_checkpoint
        from accelkit.callbacks.model_summary import configure_model_summary
        configure_progress_bar(self.callbacks, self.enable_progress_bar)
        configure_model_summary(self.callbacks, self.enable_model_summary)
        if self.enable_checkpointing and not any(map(is_checkpoint, self.callbacks)):
            # Lightning's default: one file, the latest epoch=E-step=S.ckpt (best_model_path), in <log_dir>/checkpoints
            # and no last.ckpt; ckpt_path="last" finds the newest of those files (ModelCheckpoint.find_last_checkpoints)
            self.callbacks.append(ModelCheckpoint())
        elif enable_checkpointing is False and any(map(is_checkpoint, self.callbacks)):
            given = next(type(c).__name__ for c in self.callbacks if is_checkpoint(c))
            raise ConfigurationError(f"enable_checkpointing=False but a checkpoint callback ({given}) is among the "
                                     "callbacks; remove one of them")

    def _compose(self, plugins: object, arguments: dict[str, Any], run_args: Mapping[str, object],
                 barebones_args: Mapping[str, object] | None, max_time: object, sync_batchnorm: bool,
                 collective_timeout: object) -> tuple[Composition, float | None]:
        """Load the plugins, let them translate the arguments, check the run-control arguments and compose the
        run from the strings: every problem found is reported together in one :class:`ConfigurationError`.
        Returns the composition and ``max_time`` in seconds."""
        self._blocked, names, self._plugin_objects = plugin_arguments(plugins)
        self._manager: PluginManager | None = None

        manager = self.plugin_manager
        self._register_plugin_objects()
        problems = check_run_arguments(run_args)
        if barebones_args is not None:
            check_barebones(barebones_args, problems)
        max_seconds: float | None = None
        try:
            max_seconds = parse_max_time(max_time)
        except ValueError as exc:
            problems.append(str(exc))
        composition: Composition = compose_arguments(manager, arguments, names, self._plugin_objects, problems,
                                                     Trainer.__init__)
        accel = composition.accelerator
        if sync_batchnorm and composition.strategy.world_size > 1 and not accel.supports_sync_batchnorm:
            raise ConfigurationError(f"sync_batchnorm=True: torch.nn.SyncBatchNorm does not run on accelerator "
                                     f"{accel.name!r} (its plugin says so); use sync_batchnorm=False, or an "
                                     "accelerator whose plugin supports it")
        if collective_timeout is not None:
            composition.strategy.collective_timeout_s = parse_collective_timeout(collective_timeout)
        return composition, max_seconds

    def _reset_run_state(self) -> None:
        #: what the latest run holds (module, metrics, progress, loop objects): :class:`~accelkit.loops.state.RunState`;
        #: the Trainer's ``current_epoch``, ``global_step``, ``callback_metrics``... are properties over it
        self.run_state = RunState()
        #: the misspelled-hook warning was given once for this Trainer (not again at its next fit)
        self.warned_unknown_hooks = False
        #: the checkpoint set with ``trainer.ckpt_path = path``, which the next stages load when they are given no
        #: ``ckpt_path`` (as in Lightning), until a stage is given one; ``None`` when none was set
        self.requested_ckpt_path: str | os.PathLike[str] | None = None

    def snapshot(self) -> TrainerSnapshot:
        """Remember this Trainer's settings and run state, to put back with :meth:`restore` (the tuner runs its trials
        on the user's Trainer, with settings of its own, and leaves it as it found it)."""
        return TrainerSnapshot(settings=self._settings, callbacks=self.callbacks, loggers=self.loggers,
                               requested_ckpt_path=self.requested_ckpt_path,
                               warned_unknown_hooks=self.warned_unknown_hooks, run=self.run_state.snapshot())

    def restore(self, snapshot: TrainerSnapshot) -> None:
        """Put back what :meth:`snapshot` remembered: the settings object (whatever
        :meth:`~accelkit.trainer.settings.SettingsProperties.replace_settings` made since), the callback and logger
        lists, the requested checkpoint, and the run state's progress, stage, metrics and objects."""
        self._settings = snapshot.settings
        self.callbacks, self.loggers = snapshot.callbacks, snapshot.loggers
        self.requested_ckpt_path = snapshot.requested_ckpt_path
        self.warned_unknown_hooks = snapshot.warned_unknown_hooks
        self.run_state.restore(snapshot.run)

    # ----------------------------------------------------------------- composition
    @property
    def plugin_manager(self) -> PluginManager:
        """The plugin manager (rebuilt inside each spawned worker)."""
        if self._manager is None:
            self._manager = PluginManager(blocked=self._blocked)
        return self._manager

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_manager"] = None  # pluggy managers hold modules; workers rebuild theirs
        state["_plugin_objects"] = portable_plugins(self._plugin_objects)  # plugin modules travel by name
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._plugin_objects = resolve_plugins(self._plugin_objects)
        self._register_plugin_objects()

    def _register_plugin_objects(self) -> None:
        """Register the ``plugins=[...]`` objects that carry hooks; strategy, precision and cluster-environment
        instances are parts of the run, resolved by ``compose``, not plugins."""
        from accelkit.environments.base import ClusterEnvironment
        from accelkit.precision import Precision
        from accelkit.strategies.base import Strategy

        for obj in self._plugin_objects:
            if not isinstance(obj, (Strategy, Precision, ClusterEnvironment)):
                self.plugin_manager.add_plugin(obj)

    # ----------------------------------------------------------------- public entry points
    def fit(self, model: Module, train_dataloaders: Iterable[object] | DataModule | None = None,
            val_dataloaders: Iterable[object] | None = None, datamodule: DataModule | None = None,
            ckpt_path: str | os.PathLike[str] | None = None, weights_only: bool = True) -> None:
        """Train ``model`` on loaders, a DataModule (``fit(model, dm)`` or ``datamodule=dm``) or its own
        ``*_dataloader`` methods.

        :param ckpt_path: resume from this checkpoint (``"last"``, ``"best"`` or a path).
        :param weights_only: load the checkpoint with ``torch.load(weights_only=True)`` (refuses arbitrary
            pickled objects); set ``False`` only for checkpoints you trust.
        """
        from accelkit.trainer.dispatch import launch

        train_dataloaders, datamodule = split_datamodule(train_dataloaders, datamodule, "train_dataloaders")
        check_loaders("fit", {"train": train_dataloaders, "val": val_dataloaders})
        started = time.perf_counter()
        launch(self, "fit", model, datamodule, {"train": train_dataloaders, "val": val_dataloaders}, ckpt_path,
               weights_only, {})
        if self.progress_bar_callback is not None:  # quiet with enable_progress_bar=False, barebones, tuner trials
            print_fit_summary(self, time.perf_counter() - started)

    def validate(self, model: Module | None = None, dataloaders: Iterable[object] | DataModule | None = None,
                 ckpt_path: str | os.PathLike[str] | None = None, verbose: bool = True,
                 datamodule: DataModule | None = None, weights_only: bool = True) -> list[dict[str, float]]:
        """Run the validation loop once; returns one metrics dict per loader. Without ``model``, the module of
        the last ``fit`` (with the best checkpoint's weights when a ModelCheckpoint recorded one)."""
        from accelkit.trainer.dispatch import launch

        dataloaders, datamodule = split_datamodule(dataloaders, datamodule, "dataloaders")
        check_loaders("validate", {"val": dataloaders})
        results = launch(self, "validate", model, datamodule, {"val": dataloaders}, ckpt_path, weights_only,
                         {"verbose": verbose})
        return cast("list[dict[str, float]]", results)  # the evaluation loop's result: a metrics dict per loader

    def test(self, model: Module | None = None, dataloaders: Iterable[object] | DataModule | None = None,
             ckpt_path: str | os.PathLike[str] | None = None, verbose: bool = True,
             datamodule: DataModule | None = None, weights_only: bool = True) -> list[dict[str, float]]:
        """Run the test loop once; returns one metrics dict per loader (see :meth:`validate` for ``model``)."""
        from accelkit.trainer.dispatch import launch

        dataloaders, datamodule = split_datamodule(dataloaders, datamodule, "dataloaders")
        check_loaders("test", {"test": dataloaders})
        results = launch(self, "test", model, datamodule, {"test": dataloaders}, ckpt_path, weights_only,
                         {"verbose": verbose})
        return cast("list[dict[str, float]]", results)  # the evaluation loop's result: a metrics dict per loader

    def predict(self, model: Module | None = None, dataloaders: Iterable[object] | DataModule | None = None,
                datamodule: DataModule | None = None, return_predictions: bool | None = None,
                ckpt_path: str | os.PathLike[str] | None = None, weights_only: bool = True) -> list[Any] | None:
        """Return the predictions of every batch (on the CPU; those of the global-zero rank when distributed);
        ``None`` with ``return_predictions=False``."""
        from accelkit.trainer.dispatch import launch

        dataloaders, datamodule = split_datamodule(dataloaders, datamodule, "dataloaders")
        check_loaders("predict", {"predict": dataloaders})
        predictions = launch(self, "predict", model, datamodule, {"predict": dataloaders}, ckpt_path, weights_only,
                             {"return_predictions": True if return_predictions is None else return_predictions})
        # the prediction loop's result: what predict_step returned for each batch (a list per loader with several
        # loaders), or None; predict_step returns whatever the user returns (untyped, as in Lightning)
        return cast("list[Any] | None", predictions)

    def save_checkpoint(self, filepath: str | os.PathLike[str], weights_only: bool = False,
                        model: Module | None = None, storage_options: object = None) -> None:
        """Write a checkpoint of the current state atomically (inside a run, every process calls it; after a
        run, or with ``model``, in the caller)."""
        from accelkit.loops.checkpointing import dump

        if storage_options is not None:
            raise ValueError("save_checkpoint(storage_options=...) is not supported: checkpoints go to a local path")
        model = model if model is not None else self.run_state.module
        if model is None:
            raise ValueError("Trainer.save_checkpoint(path) outside a run needs the module: "
                             "trainer.save_checkpoint(path, model=my_module)")
        self.strategy.save_checkpoint(dump(self, model, weights_only), filepath)
        if self.strategy.is_global_zero:
            for logger in self.loggers:
                after = getattr(logger, "after_save_checkpoint", None)
                if callable(after) and getattr(self, "checkpoint_callback", None) is not None:
                    after(self.checkpoint_callback)
