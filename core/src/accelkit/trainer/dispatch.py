"""From ``Trainer.fit/validate/test/predict`` in the caller's process to the workers and back."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from accelkit.checkpoint.files import check_file
from accelkit.checkpoint.sharded import METADATA_FILE, check_complete, is_sharded_checkpoint
from accelkit.environments.base import restart_attempt_of
from accelkit.loops import survivor
from accelkit.loops.state import TrainerFn, TrainerStatus
from accelkit.strategies.base import RunContext
from accelkit.strategies.launchers.result import WorkerResult
from accelkit.utilities.model_helpers import is_overridden
from accelkit.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from accelkit.callbacks.base import Callback
    from accelkit.module.datamodule import DataModule
    from accelkit.module.module import Module
    from accelkit.trainer.settings import SettingsChanges
    from accelkit.trainer.trainer import Trainer


#: a checkpoint to load, as given (a path, ``"last"``, ``"best"``) or resolved (a path), or ``None``
CkptPath = str | os.PathLike[str] | None


def _best_path(trainer: Trainer) -> str:
    """The best checkpoint of the first checkpoint callback; without a monitor, Lightning's "best" is the latest
    checkpoint (``best_model_path`` of the default callback), else ``last.ckpt`` when only that one is kept."""
    callback = trainer.checkpoint_callback
    if callback is None:
        return ""
    best = getattr(callback, "best_model_path", "")
    if not best and getattr(callback, "monitor", None) is None:
        best = getattr(callback, "last_model_path", "")
    return best


def _no_best_checkpoint(trainer: Trainer, stage: str) -> str:
    """Why ``stage()`` without a model, after a run, has no best checkpoint to load (Lightning refuses it too)."""
    if trainer.fast_dev_run:
        why = "fast_dev_run saves no checkpoint"
    elif trainer.checkpoint_callback is None:
        why = "the Trainer has no ModelCheckpoint (enable_checkpointing=False and none in callbacks)"
    else:
        why = "its ModelCheckpoint has saved no best checkpoint"
    return (f"{stage}() was given no model, so it would load the best checkpoint of the last run (as in "
            f"Lightning), but {why}. Pass the model ({stage}(model)) to use its current weights, or "
            f"ckpt_path='last' or a checkpoint's path.")


def last_checkpoints(trainer: Trainer, callback: Callback) -> list[Path]:
    """The ``last`` checkpoints ``callback`` may have written: its own ``find_last_checkpoints`` (accelkit's
    ``ModelCheckpoint``), else for a library's checkpoint callback (Lightning's own ``ModelCheckpoint``) the
    ``last*.ckpt`` files in its ``dirpath``, named by its ``CHECKPOINT_NAME_LAST`` and ``FILE_EXTENSION``."""
    if hasattr(callback, "find_last_checkpoints"):
        return [Path(p) for p in callback.find_last_checkpoints(trainer)]
    folder = getattr(callback, "dirpath", None)
    if not folder or not Path(folder).is_dir():
        return []
    name, extension = getattr(callback, "CHECKPOINT_NAME_LAST", "last"), getattr(callback, "FILE_EXTENSION", ".ckpt")
    return sorted(Path(folder).glob(f"{name}*{extension}"))


def _nothing_to_resume(trainer: Trainer) -> str:
    """The first attempt of a run with ``ckpt_path="last"``: where its checkpoint callbacks write the checkpoint the
    next attempt resumes from (the folder of the user's ``ModelCheckpoint``, not a default one)."""
    places = []
    for callback in trainer.checkpoint_callbacks:
        if hasattr(callback, "last_checkpoint_names") and hasattr(callback, "last_checkpoint_path"):
            folder = Path(callback.last_checkpoint_path(trainer)).parent
            places.append(f"{folder} ({' or '.join(callback.last_checkpoint_names())})")
        elif hasattr(callback, "find_last_checkpoints"):
            places += sorted(str(p) for p in callback.find_last_checkpoints(trainer))
        elif dirpath := getattr(callback, "dirpath", None):  # a library's (Lightning's): see last_checkpoints
            places.append(f"{dirpath} (last*.ckpt)")
    if not places:
        return ("ckpt_path='last': this run has no checkpoint callback (enable_checkpointing=False and no "
                "ModelCheckpoint), so no attempt writes a checkpoint to resume from; starting from scratch.")
    return (f"ckpt_path='last': no checkpoint in {' or '.join(places)} yet; starting from scratch. A later attempt "
            "resumes from the newest one written there.")


def restart_attempt(trainer: Trainer) -> int | None:
    """Which attempt of its run this process belongs to, where the launcher restarts a failed run by itself
    (:attr:`~accelkit.environments.ClusterEnvironment.restart_attempt`: the attempt torchrun's processes agreed on,
    a requeued SLURM job's ``SLURM_RESTART_COUNT``; 0 the first), else ``None``."""
    return restart_attempt_of(getattr(trainer.strategy, "cluster_environment", None))


def newest_checkpoint(trainer: Trainer) -> Path | None:
    """The newest complete checkpoint the run's checkpoint callbacks wrote in their folders (any ``*.ckpt`` file that
    is not empty, or a sharded checkpoint directory), whatever its name, or ``None``."""
    found: list[Path] = []
    for folder, extension in survivor.checkpoint_folders(trainer):
        if folder.is_dir():
            found += [p for p in folder.iterdir() if p.name.endswith(extension) and (
                (p.is_file() and p.stat().st_size > 0) or is_sharded_checkpoint(p))]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _elastic_resume(trainer: Trainer, stage: str) -> str | None:
    """For a ``fit`` given no ``ckpt_path`` in a restarted attempt of an elastic launcher (torchrun's attempt > 0, a
    requeued SLURM job): the run's newest complete checkpoint (:func:`newest_checkpoint`); the first attempt, and any
    other run, start as asked."""
    attempt = restart_attempt(trainer) if stage == "fit" else None
    if not attempt:
        return None
    newest = newest_checkpoint(trainer)
    if newest is None:
        where = ("in the folders of its checkpoint callbacks" if trainer.checkpoint_callbacks else
                 "(it has no checkpoint callback: enable_checkpointing=False and none in callbacks)")
        rank_zero_warn(f"attempt {attempt} of this run (restarted by its launcher) finds no checkpoint {where}: it "
                       "trains from the start", stacklevel=6)
        return None
    return str(newest)


def claim_run_folders(trainer: Trainer) -> None:
    """Claim the version folders of the run's loggers (and of :attr:`~accelkit.Trainer.run_folder` when the first
    logger has none) before the run starts: on global rank zero, or in the caller of a strategy that starts
    workers (the other processes take rank zero's). Loggers of one run writing under the same root share one
    version folder (``logger=["csv", "tensorboard"]`` both write ``lightning_logs/version_<n>``). A restarted
    attempt of a run its launcher restarts by itself (``restart_attempt()`` > 0) takes, in every process, the
    newest version folder: the run's, which its first attempt claimed."""
    folders = trainer.versioned_loggers()
    if restart_attempt(trainer):  # a restarted attempt writes on in the run's folder: the newest version, which
        from accelkit.loggers.base import next_version  # every process reads alike (no process claims a new one)

        for folder in folders:
            if not folder.version_claimed and next_version(folder.root_dir) > 0:
                folder.version = next_version(folder.root_dir) - 1
    if not (trainer.strategy.launches_workers or trainer.is_global_zero):
        return
    shared = {folder.root_dir: folder.version for folder in folders if folder.version_claimed}
    for folder in folders:
        if folder.version_claimed:
            continue
        if folder.root_dir in shared:
            folder.version = shared[folder.root_dir]
        else:
            shared[folder.root_dir] = folder.version


def _requested_ckpt(trainer: Trainer, ckpt_path: CkptPath, stage: str) -> CkptPath:
    """``ckpt_path``, or the one set earlier with ``trainer.ckpt_path = path`` when none is given (as Lightning does);
    a given one wins, with a warning, and ends the request."""
    requested = trainer.requested_ckpt_path
    if requested is None:
        return ckpt_path
    if ckpt_path is None:
        return requested
    warnings.warn(f"trainer.ckpt_path was set to {str(requested)!r}, and {stage}(ckpt_path={str(ckpt_path)!r}) was "
                  f"given: {str(ckpt_path)!r} is loaded, and the stages after this one no longer load "
                  f"{str(requested)!r}", UserWarning, stacklevel=5)
    trainer.requested_ckpt_path = None
    return ckpt_path


def _default_max_epochs(trainer: Trainer) -> int:
    """``max_epochs`` for a fit that was not given one, by Lightning's rule: 1000 unless ``max_steps``, ``max_time``
    or a :class:`~accelkit.callbacks.Timer` callback bounds the fit, then ``-1`` (no epoch limit). The 1000 comes
    with a warning on rank 0 (Lightning's ``PossibleUserWarning``, a ``UserWarning``), located at the ``fit`` call."""
    from accelkit.callbacks.timer import Timer

    bounded = trainer.max_steps != -1 or trainer.max_time is not None
    if bounded or any(isinstance(callback, Timer) for callback in trainer.callbacks):
        return -1
    # frames from the warning up: _warn, rank_zero_warn, rank_zero_only's wrapper, here, _default_epoch_limits,
    # launch, Trainer.fit, user
    rank_zero_warn("Trainer(max_epochs=None) and nothing else bounds this fit (no max_steps, max_time or Timer "
                   "callback): it stops after 1000 epochs. Give max_epochs=-1 to train without an epoch limit, "
                   "or a max_epochs, max_steps or max_time of your own.", category=UserWarning, stacklevel=8)
    return 1000


def _default_epoch_limits(trainer: Trainer) -> None:
    """A fit's ``min_epochs`` and ``max_epochs`` when the Trainer was not given them, set through
    :meth:`~accelkit.Trainer.replace_settings` (the settings object is left alone when both were given)."""
    changes: SettingsChanges = {}
    if trainer.min_epochs is None:
        changes["min_epochs"] = int(trainer.min_steps is not None)
    if trainer.max_epochs is None:
        changes["max_epochs"] = _default_max_epochs(trainer)
    if changes:
        trainer.replace_settings(**changes)


def resolve_ckpt_path(trainer: Trainer, ckpt_path: CkptPath, stage: str, model_given: bool) -> CkptPath:
    """The checkpoint that ``stage``'s ``ckpt_path`` names (``"best"``, ``"last"``, a file or a sharded checkpoint
    directory; for an evaluation without a model, the last fit's best), or ``None``; refuses a path that is no
    checkpoint, naming it, before anything is started."""
    ckpt_path = _requested_ckpt(trainer, ckpt_path, stage)
    if ckpt_path is None:  # a restarted attempt of an elastic launcher resumes by itself; a given path wins
        ckpt_path = _elastic_resume(trainer, stage)
    if ckpt_path is None and not model_given and stage != "fit":
        best = _best_path(trainer)
        if best:
            print(f"accelkit: {stage}() without a model uses the best checkpoint of the last fit: {best}")
            return best
        if trainer.lightning_module is not None:
            raise ValueError(_no_best_checkpoint(trainer, stage))
        return None
    if ckpt_path == "best":
        best = _best_path(trainer)
        if not best:
            raise ValueError(f"{stage}(ckpt_path='best'): no best checkpoint is known; fit first with a "
                             "ModelCheckpoint (enable_checkpointing=True adds one), or pass a path")
        return best
    if ckpt_path == "last":
        # The newest last*.ckpt of the checkpoint callbacks: of every earlier run's version folder for the default
        # callback, else of its folder (where a second run writes last-v1.ckpt). An empty file is a name another
        # run claimed and has not written yet (or never wrote: it was stopped).
        candidates = {p for c in trainer.checkpoint_callbacks for p in last_checkpoints(trainer, c)}
        found = [p for p in candidates if (p.is_file() and p.stat().st_size > 0) or is_sharded_checkpoint(p)]
        if found:
            return str(max(found, key=lambda p: p.stat().st_mtime))
        warnings.warn(_nothing_to_resume(trainer), UserWarning, stacklevel=4)
        return None
    if ckpt_path is not None:
        path = Path(ckpt_path)
        if path.is_dir() and not is_sharded_checkpoint(path):
            check_complete(path)  # part of a sharded checkpoint: the missing file is named
            raise IsADirectoryError(f"ckpt_path={str(ckpt_path)!r} is a directory but not a sharded checkpoint (no "
                                    f"{METADATA_FILE} and .metadata in it); give the .ckpt file or sharded "
                                    "checkpoint directory in it")
        if not path.is_file() and not path.is_dir():
            if path.exists():  # /dev/zero, a FIFO: refused before anything opens it
                check_file(path)
            raise FileNotFoundError(f"ckpt_path={str(ckpt_path)!r} does not exist")
    return ckpt_path


def _take_worker_result(trainer: Trainer, model: Module, output: WorkerResult) -> None:
    """The work ran in other processes/replicas: bring its outcome back to the caller's objects (the weights into
    the module, the run state's part in one :meth:`~accelkit.loops.state.RunState.apply_worker_result`, and the
    callbacks' states: best checkpoint paths...)."""
    if output.state_dict is not None:
        model.load_state_dict(output.state_dict)
    trainer.run_state.apply_worker_result(output)
    for callback in trainer.callbacks:
        state = output.callback_states.get(callback.state_key)
        if state:
            callback.load_state_dict(state)


def _warn_fit_again_in_workers(trainer: Trainer, stage: str) -> None:
    """Warn, naming the difference, when ``fit`` runs again on a Trainer whose strategy starts workers
    (``ddp_spawn``...) after a fit: Lightning refuses it (``NotImplementedError``); accelkit goes on from the counters
    the first fit left, as a second fit in one process does in both (optimizers made anew by
    ``configure_optimizers``), the same weights as one longer fit with a stateless optimizer."""
    fitted_before = trainer.global_step > 0 or trainer.current_epoch > 0
    if stage != "fit" or not trainer.strategy.launches_workers or not fitted_before:
        return
    rank_zero_warn(f"fit() again on this Trainer with strategy={trainer.config.strategy!r}, which starts worker "
                   "processes: Lightning refuses this (NotImplementedError, 'create a new Trainer and pass "
                   f"fit(ckpt_path=...)'); accelkit goes on from epoch {trainer.current_epoch}, step "
                   f"{trainer.global_step}, as a second fit in one process does (optimizers made anew by "
                   "configure_optimizers)", stacklevel=7)


def launch(trainer: Trainer, stage: str, model: object, datamodule: DataModule | None,
           loaders: Mapping[str, object], ckpt_path: CkptPath, weights_only: bool,
           options: Mapping[str, object]) -> object:
    """Run ``stage`` through the strategy and copy the workers' outcome back into the caller's objects; returns
    the stage's result (:attr:`~accelkit.strategies.launchers.result.WorkerResult.result`)."""
    from accelkit.loops.run import prepare_data, run_stage
    from accelkit.module.module import Module
    from accelkit.trainer.compiled import run_compiled_stage, unwrap_compiled

    model_given = model is not None
    if model is None:
        if stage == "fit" or trainer.run_state.module is None:
            raise TypeError(f"Trainer.{stage}() needs a model" + ("" if stage == "fit" else
                                                                  " (or a previous fit of this Trainer)"))
        model = trainer.run_state.module
        datamodule = datamodule if datamodule is not None else trainer.datamodule
    model, compiled = unwrap_compiled(model)  # torch.compile(module): run the module, its forward compiled
    if not isinstance(model, Module):
        raise TypeError(f"Trainer.{stage}() needs an accelkit.Module, got {type(model).__name__}"
                        + (": subclass accelkit.Module (a LightningModule's API) instead of torch.nn.Module"
                           if isinstance(model, torch.nn.Module) else ""))
    if stage in ("validate", "test"):
        method = "validation_step" if stage == "validate" else "test_step"
        if not is_overridden(method, model, Module):
            raise NotImplementedError(f"Trainer.{stage}() needs {type(model).__name__}.{method}(batch, "
                                      "batch_idx): define it and log the metrics to report with self.log")
    claim_run_folders(trainer)
    ckpt_path = resolve_ckpt_path(trainer, ckpt_path, stage, model_given)
    trainer.run_state.ckpt_path = ckpt_path  # the run's RunState.begin takes it from here (a spawned worker's too)
    strategy = trainer.strategy
    prepared = False
    if strategy.launches_workers:
        prepare_data(trainer, model, datamodule)  # once per node, before the workers start
        prepared = True
        for logger in trainer.loggers:
            _ = logger.version  # chosen here, so the workers and the caller agree on the run's folder
    strategy.run_context = RunContext(stage=stage, root_dir=Path(trainer.default_root_dir))
    _warn_fit_again_in_workers(trainer, stage)
    # what every worker runs: the stage, or the stage with the user's compiled forward (given first)
    function: Callable[..., WorkerResult] = run_stage if compiled is None else run_compiled_stage
    leading = () if compiled is None else (compiled,)
    if stage == "fit":  # as Lightning's fit: the epoch limits not given take their defaults (read in the hooks)
        _default_epoch_limits(trainer)
    state = trainer.run_state.state
    if strategy.launches_workers:  # the caller's state, as Lightning's caller: running, then finished or interrupted
        state.fn, state.stage, state.status = TrainerFn(stage), None, TrainerStatus.RUNNING
    try:
        output = strategy.launch(function, *leading, trainer, stage, model, datamodule, loaders, ckpt_path,
                                 weights_only, prepared, options)
    except BaseException:
        if strategy.launches_workers:
            state.status = TrainerStatus.INTERRUPTED
        raise
    if strategy.launches_workers:
        state.status = TrainerStatus.INTERRUPTED if output.interrupted else TrainerStatus.FINISHED
    if stage == "fit":  # what num_training_batches/num_val_batches read in the next runs, as Lightning's
        trainer.run_state.progress.end_fit()
    trainer.warned_unknown_hooks = True
    model.trainer = trainer  # as after a Lightning run: model.current_epoch/global_step read the trainer
    trainer.run_state.module = model
    trainer.datamodule = datamodule
    if strategy.launches_workers:
        _take_worker_result(trainer, model, output)
    if output.interrupted:
        import sys

        from accelkit.errors import TrainingInterrupted

        print(f"accelkit: {output.interrupted}", file=sys.stderr, flush=True)
        raise TrainingInterrupted(output.interrupted)
    return output.result
