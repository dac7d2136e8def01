"""What a checkpoint holds, and putting it back: weights, training state, callbacks, DataModule, loops."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from accelkit.__about__ import __version__
from accelkit.loops import resume
from accelkit.module.hparams import checkpoint_entries

if TYPE_CHECKING:
    import torch

    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer


def dump(trainer: Trainer, module: Module, weights_only: bool = False, alone: bool = False) -> dict[str, Any]:
    """The checkpoint of the current state. ``weights_only``: the weights, progress and hyperparameters only.
    ``alone``: this process writes it by itself, with no collective, after a peer was lost
    (:func:`~accelkit.loops.resume.capture`'s ``alone``).

    Callback states and ``on_save_checkpoint`` hooks come in Lightning's order: every callback's
    ``state_dict``, the DataModule's, the callbacks' ``on_save_checkpoint``, then the Module's.

    The weights and optimizer states come from the strategy's ``module_state_dict``/``optimizer_state_dict``
    (a sharding strategy gives this process's shards, which its ``save_checkpoint`` writes as a directory)."""
    progress = trainer.run_state.progress.state_dict()
    strategy = trainer.strategy
    model = _model(trainer, module)
    checkpoint: dict[str, Any] = {
        "accelkit_version": __version__,
        "epoch": progress["epoch"],
        "global_step": progress["global_step"],
        "state_dict": strategy.module_state_dict(model),
        "loops": {"resume_epoch": progress["resume_epoch"], "batches_that_stepped": progress["batches_that_stepped"]},
    }
    datamodule = getattr(trainer, "datamodule", None)
    if not weights_only:
        position = resume.capture(trainer, alone)  # where the running fit is, for an exact resume (None outside fit)
        if position is not None:
            checkpoint["loops"][resume.POSITION_KEY] = position
        checkpoint.update(training_state(trainer))
        if trainer.run_state.optimizers:  # live optimizers: in the form the strategy saves (shards, for FSDP)
            checkpoint["optimizer_states"] = [strategy.optimizer_state_dict(model, o)
                                              for o in trainer.run_state.optimizers]
        states = {}
        for callback in trainer.callbacks:
            state = callback.state_dict()
            if state:
                states[callback.state_key] = state
        checkpoint["callbacks"] = states
    # hyperparameters of the module and the DataModule, and the DataModule's state
    entries = checkpoint_entries(module, datamodule)
    if weights_only:
        if datamodule is not None:
            entries.pop(type(datamodule).__qualname__, None)
        checkpoint.update(entries)
        return checkpoint
    checkpoint.update(entries)
    for callback in trainer.callbacks:
        callback.on_save_checkpoint(trainer, module, checkpoint)
    module.on_save_checkpoint(checkpoint)
    return checkpoint


def _model(trainer: Trainer, module: Module) -> torch.nn.Module:
    """The object the strategy set up around ``module`` (its wrapper, or the sharded module), else ``module``."""
    model = trainer.run_state.model
    return model if model is not None and module is trainer.run_state.module else module


def restore_module_and_callbacks(trainer: Trainer, module: Module, checkpoint: dict[str, Any],
                                 model: torch.nn.Module | None = None) -> None:
    """The Module's ``on_load_checkpoint``, the callbacks' ``on_load_checkpoint`` and states, the DataModule's
    state, then the weights (Lightning's order), through the strategy's ``load_module_state_dict`` into ``model``
    (the set-up module when the strategy restores after setup; ``module`` by default)."""
    if "state_dict" not in checkpoint:
        raise KeyError(f"the checkpoint has no 'state_dict' (its keys: {sorted(checkpoint)[:12]}); a bare "
                       "state_dict is loaded with module.load_state_dict(torch.load(path)), not ckpt_path=")
    module.on_load_checkpoint(checkpoint)
    states = checkpoint.get("callbacks", {})
    for callback in trainer.callbacks:
        callback.on_load_checkpoint(trainer, module, checkpoint)
    for callback in trainer.callbacks:
        state = states.get(callback.state_key)
        if state is not None:
            callback.load_state_dict(state)
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None and type(datamodule).__qualname__ in checkpoint:
        datamodule.load_state_dict(checkpoint[type(datamodule).__qualname__])
    trainer.strategy.load_module_state_dict(model if model is not None else module, checkpoint["state_dict"],
                                            strict=module.strict_loading)


def restore_training_state(trainer: Trainer, checkpoint: dict[str, Any]) -> None:
    """Optimizers (through the strategy's ``load_optimizer_state_dict``), schedulers, precision and progress
    (``fit`` only)."""
    optimizers = trainer.optimizers
    saved = checkpoint.get("optimizer_states")
    if saved is None:
        warnings.warn("the checkpoint holds no optimizer state (saved with weights_only=True?): the optimizers "
                      "start fresh.", UserWarning, stacklevel=3)
        saved = []
    elif len(saved) != len(optimizers):
        raise ValueError(f"the checkpoint holds {len(saved)} optimizer state(s) but configure_optimizers() returned "
                         f"{len(optimizers)} optimizer(s)")
    for index, (optimizer, state) in enumerate(zip(optimizers, saved, strict=False)):
        try:
            trainer.strategy.load_optimizer_state_dict(trainer.model, optimizer, state)
        except (KeyError, ValueError) as exc:
            raise ValueError(f"optimizer {index} ({type(optimizer).__name__}) cannot take the checkpoint's state "
                             f"({type(exc).__name__}: {exc}); was it saved with another optimizer or model?") from None
    optimization = trainer.run_state.optimization
    if optimization is not None and optimization.captured is not None:
        optimization.captured.as_fresh()  # the optimizer as a fresh captured fit's, whatever the checkpoint's run had
    for config, state in zip(trainer.lr_scheduler_configs, checkpoint.get("lr_schedulers", []), strict=False):
        config.scheduler.load_state_dict(state)
    trainer.precision.load_state_dict(checkpoint.get("precision", {}))
    loops = checkpoint.get("loops", {})
    found = resume.position(trainer, checkpoint)  # the fit loop continues from there
    progress = {"epoch": checkpoint["epoch"], "global_step": checkpoint["global_step"]}
    if "batches_that_stepped" in loops:
        progress["batches_that_stepped"] = loops["batches_that_stepped"]
    if "resume_epoch" in loops:
        progress["resume_epoch"] = loops["resume_epoch"]
    elif found is not None:  # Lightning's checkpoint: where its loop states say, else the epoch it names
        progress["resume_epoch"] = found.epoch
    trainer.run_state.progress.load_state_dict(progress)
    trainer.run_state.resume_position = found


def training_state(trainer: Trainer) -> dict[str, Any]:
    """Optimizer, scheduler and precision state of ``trainer``'s run: live, or as the last spawned workers
    returned it."""
    run = trainer.run_state
    if not run.optimizers and run.worker_training_state is not None:
        return run.worker_training_state
    return {
        "optimizer_states": [o.state_dict() for o in run.optimizers],
        "lr_schedulers": [c.scheduler.state_dict() for c in run.schedulers],
        "precision": trainer.precision.state_dict(),
    }
