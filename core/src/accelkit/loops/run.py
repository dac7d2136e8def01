"""The work of one stage inside a worker: set up, run the loop, tear down, report."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

import torch

from accelkit.callbacks.base import monitors_metrics
from accelkit.checkpoint import files as ckpt
from accelkit.checkpoint import layout
from accelkit.environments.base import restart_attempt_of
from accelkit.loops import checkpointing, resume, survivor
from accelkit.loops.checkpointing import training_state
from accelkit.loops.data import DataConnector
from accelkit.loops.evaluation import EvaluationLoop
from accelkit.loops.fit import FitLoop
from accelkit.loops.hooks import HookCaller, check_removed_hooks, merge_callbacks, warn_unknown_hooks
from accelkit.loops.metrics import MetricStore
from accelkit.loops.optimization import Optimization
from accelkit.loops.publishing import Publisher
from accelkit.loops.state import RunningStage, TrainerFn, TrainerStatus
from accelkit.module.module import Module
from accelkit.module.optimizers import configure_optimizers
from accelkit.strategies.launchers.result import WorkerResult
from accelkit.utilities.model_helpers import is_overridden
from accelkit.utilities.rank_zero import set_global_rank

if TYPE_CHECKING:
    from accelkit.module.datamodule import DataModule
    from accelkit.strategies.base import Strategy
    from accelkit.trainer.trainer import Trainer


def prepare_data(trainer: Trainer, module: Module, datamodule: DataModule | None) -> None:
    """``prepare_data`` of the DataModule, then of the Module (each only if overridden)."""
    if datamodule is not None:
        datamodule.prepare_data()
    if is_overridden("prepare_data", module, Module):
        module.prepare_data()


def attempt_words(attempt: int | None) -> str:
    """``"attempt N of this run (restarted by its launcher): "``, for a launcher that restarts a run by itself
    (``"first attempt of this run: "`` for 0), else ``""``."""
    if attempt is None:
        return ""
    if attempt == 0:
        return "first attempt of this run: "
    return f"attempt {attempt} of this run (restarted by its launcher): "


def run_stage(trainer: Trainer, stage: str, module: Module, datamodule: DataModule | None, loaders: dict[str, object],
              ckpt_path: str | os.PathLike[str] | None, weights_only: bool, prepared: bool,
              options: dict[str, bool]) -> WorkerResult:
    """Everything one worker does for ``stage`` (``fit``, ``validate``, ``test``, ``predict``): set up, run the
    stage's loop, tear down, and report what the caller needs (:class:`WorkerResult`)."""
    strategy = trainer.strategy
    _begin(trainer, stage, module, datamodule)
    anomaly = torch.autograd.detect_anomaly() if trainer.detect_anomaly else contextlib.nullcontext()
    previous_deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        _setup_worker(trainer, stage, module, datamodule, prepared)
        module, checkpoint = _setup_model(trainer, module, ckpt_path, weights_only)
        attempt = restart_attempt_of(getattr(strategy, "cluster_environment", None)) if stage == "fit" else None
        if strategy.is_global_zero and (checkpoint is not None or attempt is not None):  # as "Restoring states"
            print(f"accelkit: {stage}() {attempt_words(attempt)}" + (
                # (a checkpoint was read: from ckpt_path)
                f"loaded checkpoint {os.path.abspath(os.fspath(cast('str | os.PathLike[str]', ckpt_path)))}"
                if checkpoint is not None else
                "starts from the beginning (no checkpoint)"), flush=True)
        trainer.run_state.data = DataConnector(trainer, module, datamodule, loaders)
        trainer.run_state.publisher = Publisher(trainer)
        if strategy.is_global_zero:  # every stage, as Lightning: a test-only run's folder has its hparams.yaml too
            _log_hyperparams(trainer, module, datamodule)
        with anomaly:
            result, interrupted = _run_loop(trainer, stage, module, checkpoint, ckpt_path, options)
        _teardown(trainer, stage, module)
        trainer.run_state.active_publisher.to_host()  # the metric dicts hold CPU tensors after a run (Lightning's too)
        return _worker_result(trainer, stage, result, interrupted)
    except BaseException as exc:
        if stage == "fit":  # a lost peer: the survivors keep the last completed step where they can
            survivor.on_failure(trainer, module, exc)
        _on_exception(trainer, datamodule, exc)
        raise
    finally:
        torch.use_deterministic_algorithms(previous_deterministic)
        strategy.teardown()


def _begin(trainer: Trainer, stage: str, module: Module, datamodule: DataModule | None) -> HookCaller:
    """Reset what an earlier run left (Lightning resets its results at every run) and build the hook caller."""
    run = trainer.run_state
    run.begin(module, datamodule, trainer.ckpt_path)
    if stage == "predict":  # Lightning records nothing while predicting: every self.log is refused, from any function
        run.metrics = MetricStore(refuses="predict")
    run.state.fn = TrainerFn(stage)  # the hooks get the members, as Lightning's
    run.state.stage = RunningStage.TRAINING if stage == "fit" else RunningStage(stage)
    run.state.status = TrainerStatus.RUNNING
    module.trainer = trainer
    if datamodule is not None:
        datamodule.trainer = trainer
    callbacks = merge_callbacks(trainer, module)
    hooks = trainer.run_state.hooks = HookCaller(trainer, module, callbacks, trainer.profiler, datamodule)
    return hooks


def _setup_worker(trainer: Trainer, stage: str, module: Module, datamodule: DataModule | None, prepared: bool) -> None:
    """The process and the user's objects, up to ``setup(stage)`` and ``configure_model``."""
    strategy, hooks = trainer.strategy, trainer.run_state.active_hooks
    strategy.setup_runtime()  # before anything reads root_device
    strategy.setup_environment()
    resume.seed_spawned_worker(strategy)  # a spawned process starts from ACCELKIT_SEED (Lightning's reset_seed)
    trainer.run_state.metrics.reduce, trainer.run_state.metrics.device = strategy.reduce, strategy.root_device
    set_global_rank(strategy.global_rank)
    _agree_on_run_folders(trainer)
    apply_determinism(trainer)
    if trainer.profiler is not None:
        trainer.profiler.setup(stage=TrainerFn(stage), local_rank=strategy.local_rank, log_dir=trainer.log_dir)
    if not prepared:
        rank = strategy.local_rank if getattr(module, "prepare_data_per_node", True) else strategy.global_rank
        if rank == 0:
            prepare_data(trainer, module, datamodule)
        strategy.barrier("prepare_data")
    check_removed_hooks(module, trainer.callbacks, warn=strategy.is_global_zero)  # one warning, not one per rank
    if stage == "fit" and not trainer.warned_unknown_hooks and strategy.is_global_zero:
        warn_unknown_hooks(module, trainer.callbacks)
    fn_stage = cast(TrainerFn, trainer.run_state.state.fn)  # the TrainerFn member, as Lightning passes it (_begin's)
    hooks.call_datamodule("setup", fn_stage)
    for fn in hooks.callback_plan("setup"):
        fn(fn_stage)
    module.setup(fn_stage)
    _configure_model(module)


def _agree_on_run_folders(trainer: Trainer) -> None:
    """Processes started from outside (torchrun, srun) each built their own Trainer: they take global rank zero's
    version folders (spawned workers got them with the Trainer, chosen before the start)."""
    strategy = trainer.strategy
    if strategy.world_size < 2 or strategy.launches_workers:
        return
    folders = trainer.versioned_loggers()
    mine = [folder.version for folder in folders] if strategy.is_global_zero else None
    chosen = strategy.broadcast(mine)
    if chosen is None:  # (global rank zero sends a list)
        raise RuntimeError("global rank 0 broadcast no version folders")
    for folder, version in zip(folders, chosen, strict=True):
        folder.version = version


def _setup_model(trainer: Trainer, module: Module, ckpt_path: str | os.PathLike[str] | None,
                 weights_only: bool) -> tuple[Module, dict[str, Any] | None]:
    """The strategy's model, with the checkpoint's weights and callback states; returns (module, checkpoint).

    A sharding strategy reads its checkpoint after setup, into the module it sharded (restore after setup)."""
    strategy = trainer.strategy
    if trainer.sync_batchnorm and trainer.world_size > 1:
        module = _sync_batchnorm(trainer, module)
    late = bool(strategy.restore_checkpoint_after_setup)
    checkpoint = None
    if ckpt_path is not None and not late:
        checkpoint = _read_checkpoint(strategy, ckpt_path, weights_only)
        with _naming(ckpt_path):
            checkpointing.restore_module_and_callbacks(trainer, module, checkpoint)
    trainer.run_state.model = strategy.setup_module(module)
    if ckpt_path is not None and late:
        checkpoint = _read_checkpoint(strategy, ckpt_path, weights_only)
        with _naming(ckpt_path):
            checkpointing.restore_module_and_callbacks(trainer, module, checkpoint, model=trainer.run_state.model)
    return module, checkpoint


def _read_checkpoint(strategy: Strategy, ckpt_path: str | os.PathLike[str], weights_only: bool) -> dict[str, Any]:
    """The strategy's reading of ``ckpt_path``, refused with a sentence when a newer accelkit wrote it or its
    entries have another shape."""
    checkpoint = strategy.load_checkpoint(ckpt_path, weights_only)
    layout.check_version(checkpoint, repr(str(ckpt_path)))
    layout.check_entries(checkpoint, repr(str(ckpt_path)))
    return checkpoint


def _log_hyperparams(trainer: Trainer, module: Module, datamodule: DataModule | None) -> None:
    from accelkit.module.saving import hparams_to_log

    logged = hparams_to_log(module, datamodule)
    for logger in trainer.loggers:
        if logged is not None:  # as Lightning, an empty set too: save_hyperparameters() with no argument to save
            logger.log_hyperparams(logged)
        logger.log_graph(module)


def _run_loop(trainer: Trainer, stage: str, module: Module, checkpoint: dict[str, Any] | None,
              ckpt_path: str | os.PathLike[str] | None, options: dict[str, bool]) -> tuple[object, str | None]:
    """The stage's loop; returns (its result, the interrupted-run record or ``None``)."""
    strategy, hooks, data = trainer.strategy, trainer.run_state.active_hooks, trainer.run_state.active_data
    if stage == "fit":
        optimizers, schedulers = configure_optimizers(module)
        trainer.run_state.optimizers = [strategy.setup_optimizer(o) for o in optimizers]
        trainer.run_state.schedulers = schedulers
        trainer.run_state.optimization = Optimization(trainer, module, hooks, trainer.optimizers)
        _check_optimization(trainer, module)
        # Lightning's order: on_fit_start before the optimizer, scheduler and loop states are restored (a
        # finetuning callback rebuilds the optimizer's parameter groups there, SWA drops the scheduler)
        hooks.call("on_fit_start")
        if checkpoint is not None:
            layout.check_training_layout(checkpoint, repr(str(ckpt_path)))
            with _naming(ckpt_path):
                checkpointing.restore_training_state(trainer, checkpoint)
        loop = FitLoop(trainer)
        loop.run()
        return None, _save_interrupted(trainer, module) if loop.interrupted else None
    if stage == "predict":
        loaders = _require(data.loaders("predict"), "predict", module)
        limits = [data.num_batches(loader, "predict") for loader in loaders]
        return trainer.predict_loop.run(loaders, limits, options.get("return_predictions", True)), None
    kind = "val" if stage == "validate" else "test"
    loaders = _require(data.loaders(kind), stage, module)
    limits = data.agreed_num_batches(loaders, kind, stage)
    result = EvaluationLoop(trainer, stage).run(loaders, limits)
    if options.get("verbose", True) and strategy.is_global_zero:
        _print_results(stage, result)
    return result, None


def _teardown(trainer: Trainer, stage: str, module: Module) -> None:
    hooks, state = trainer.run_state.active_hooks, trainer.run_state.state
    hooks.call_datamodule("teardown", state.fn)
    for fn in hooks.callback_plan("teardown"):
        fn(state.fn)
    module.teardown(cast(TrainerFn, state.fn))  # (set for the run by _begin)
    for logger in trainer.loggers if trainer.strategy.is_global_zero else []:
        logger.finalize("success")
    if trainer.profiler is not None:
        trainer.profiler.describe()  # writes or prints the summary, then tears the profiler down
    state.stage, state.status = None, TrainerStatus.FINISHED  # as Lightning's after a run


def _worker_result(trainer: Trainer, stage: str, result: object, interrupted: str | None) -> WorkerResult:
    strategy = trainer.strategy
    spawned = stage == "fit" and strategy.launches_workers
    # the metrics, counters, stop request and stop reason (a fit's only: each run starts without one), by the name
    # of WorkerResult's argument each one fills (its values of several types, as its fields declare them)
    outcome: dict[str, Any] = ckpt.to_cpu(trainer.run_state.outcome())
    return WorkerResult(
        result=ckpt.to_cpu(result),
        # full weights and optimizer states (gathered from every process by a sharding strategy)
        state_dict=ckpt.to_cpu(strategy.full_state_dict(trainer.model)) if spawned else None,
        training_state=ckpt.to_cpu(_full_training_state(trainer)) if spawned else None,
        # the caller's checkpoint/early-stopping callbacks learn the workers' outcome (best_model_path...)
        callback_states=ckpt.to_cpu({cb.state_key: cb.state_dict() for cb in trainer.callbacks
                                     if monitors_metrics(cb)})
        if strategy.launches_workers else {},
        interrupted=interrupted,
        **outcome,
    )


def _on_exception(trainer: Trainer, datamodule: DataModule | None, exc: BaseException) -> None:
    from accelkit.strategies.launchers import watchdog

    watchdog.explain(exc)  # a distributed run that stalled: which rank was behind, and what each was doing
    trainer.run_state.state.status = TrainerStatus.INTERRUPTED
    hooks = trainer.run_state.hooks
    if hooks is not None:
        for fn in hooks.callback_plan("on_exception"):
            fn(exc)
    on_exception = getattr(datamodule, "on_exception", None)
    if callable(on_exception):
        on_exception(exc)
    for logger in trainer.loggers if trainer.strategy.is_global_zero else []:
        with contextlib.suppress(Exception):
            logger.save()
            logger.finalize("failed")
    trainer.run_state.state.stage = None


def apply_determinism(trainer: Trainer) -> None:
    """``Trainer(deterministic=..., benchmark=...)`` in this worker: the accelerator's part, then torch's switch."""
    trainer.accelerator.configure_determinism(trainer.deterministic, trainer.benchmark)
    if trainer.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=trainer.deterministic == "warn")


def _full_training_state(trainer: Trainer) -> dict[str, Any]:
    """The training state sent back to the caller: the optimizers' complete states (``full_optimizer_state_dict``:
    every process takes part when they are sharded)."""
    state = dict(training_state(trainer))
    if trainer.run_state.optimizers:
        state["optimizer_states"] = [trainer.strategy.full_optimizer_state_dict(trainer.model, o)
                                     for o in trainer.run_state.optimizers]
    return state


def _configure_model(module: Module) -> None:
    if is_overridden("configure_sharded_model", module, Module):
        warnings.warn("configure_sharded_model is deprecated (as in Lightning 2.x); rename it configure_model.",
                      DeprecationWarning, stacklevel=3)
        module.configure_sharded_model()
    if is_overridden("configure_model", module, Module):
        module.configure_model()


def _sync_batchnorm(trainer: Trainer, module: Module) -> Module:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"sync_batchnorm=True needs a torch.distributed process group, which strategy "
                           f"{trainer.strategy.name!r} does not create; use a DDP strategy or sync_batchnorm=False")
    # (the module itself, its BatchNorm layers replaced: torch returns a new object only for a BatchNorm root)
    return cast(Module, torch.nn.SyncBatchNorm.convert_sync_batchnorm(module))


def _check_optimization(trainer: Trainer, module: Module) -> None:
    if module.automatic_optimization:
        if len(trainer.optimizers) > 1:
            raise ValueError(f"{type(module).__name__}.configure_optimizers() returned {len(trainer.optimizers)} "
                             "optimizers; as in Lightning 2.x, several optimizers need manual optimization: set "
                             "`self.automatic_optimization = False` and step them in training_step "
                             "(self.optimizers(), self.manual_backward(loss), opt.step())")
        return
    if trainer.gradient_clip_val is not None:
        raise ValueError("gradient_clip_val is applied by automatic optimization only; with "
                         "automatic_optimization=False call self.clip_gradients(opt, gradient_clip_val=...) in "
                         "training_step and leave the Trainer's gradient_clip_val unset")
    if trainer.accumulate_grad_batches != 1:
        raise ValueError("accumulate_grad_batches is applied by automatic optimization only; with "
                         "automatic_optimization=False accumulate in training_step (step every N batches)")


def _require(loaders: list[Iterable[object]] | None, stage: str, module: Module) -> list[Iterable[object]]:
    if loaders is None:
        hook = {"validate": "val_dataloader", "test": "test_dataloader", "predict": "predict_dataloader"}[stage]
        raise ValueError(f"no {stage} data: pass dataloaders to {stage}(), a datamodule, or define "
                         f"{type(module).__name__}.{hook}()")
    return loaders


def _print_results(stage: str, results: list[dict[str, float]]) -> None:
    """The table ``verbose=True`` prints, with Lightning's rows and values: one row per metric name (the
    ``/dataloader_idx_N`` suffix dropped: the column says the loader), each value in full."""
    results = [{name.split("/dataloader_idx_")[0]: value for name, value in metrics.items()} for metrics in results]
    rows = sorted({name for metrics in results for name in metrics})
    if not rows:
        return
    title = "Validate metric" if stage == "validate" else "Test metric"
    headers = [title] + [f"DataLoader {i}" for i in range(len(results))]
    table = [[name] + [f"{metrics[name]}" if name in metrics else "" for metrics in results] for name in rows]
    widths = [max(len(str(r[i])) for r in [headers] + table) for i in range(len(headers))]
    line = "-" * (sum(widths) + 3 * (len(widths) - 1))
    print(line)
    print(" | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print(line)
    for row in table:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    print(line)


def _save_interrupted(trainer: Trainer, module: Module) -> str:
    """Every process stopped after the same step on SIGINT/SIGTERM: save that state; return the line that says
    where it stopped and how to resume."""
    from pathlib import Path

    from accelkit.strategies.launchers import interrupt

    control = interrupt.current()
    signal = control.signal_name if control else "a signal"
    if survivor.keeps_last_step(trainer) and trainer.strategy.replicates_state:  # each process stops on its own
        saved = survivor.save_alone(trainer, module, f"{signal} from the launcher")
        return (f"{signal} stopped training at epoch {trainer.current_epoch}, step {trainer.global_step}; " + (
            f"the state is saved in {saved}, which the launcher's next attempt resumes from." if saved else
            "the first process of this node saves the state (the launcher's next attempt resumes from it)."))
    folder = getattr(trainer.checkpoint_callback, "dirpath", None) or Path(trainer.default_root_dir) / "checkpoints"
    path = Path(folder) / "interrupted.ckpt"
    trainer.save_checkpoint(path)
    return (f"{signal} stopped training at epoch {trainer.current_epoch}, "
            f"step {trainer.global_step}; the state is saved in {path}. Resume with "
            f"trainer.fit(model, ckpt_path={str(path)!r}) ({resume.describe(trainer)}).")


@contextlib.contextmanager
def _naming(ckpt_path: str | os.PathLike[str] | None) -> Iterator[None]:
    """A checkpoint that does not fit the module or its optimizers: the error names the file it came from."""
    try:
        yield
    except (ValueError, RuntimeError, KeyError) as exc:
        if exc.args and isinstance(exc.args[0], str) and str(ckpt_path) not in exc.args[0]:
            exc.args = (f"checkpoint {str(ckpt_path)!r}: {exc.args[0]}", *exc.args[1:])
        raise
