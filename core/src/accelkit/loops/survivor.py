"""Keeping the last completed step when a peer is lost, under a launcher that restarts the run by itself.

When a process of a data-parallel run dies, the others fail in their next collective (gloo's ``Connection closed
by peer``, the collective timeout), or the launcher's agent stops them with SIGTERM before it restarts them. Where
every process holds the whole model and optimizer state (:attr:`~accelkit.Strategy.replicates_state`: DDP), a
survivor can write that state alone, with no collective: the first process of each node (local rank 0) that
survives writes the last completed step, atomically, as :data:`SURVIVOR_FILE` in the folder of the run's first
checkpoint callback, and the launcher's next attempt resumes from it (the newest checkpoint of the run's folders).
The step running when the run failed is not in it: its weights, optimizer state, step counters and record of the
samples trained are those after the last optimizer step that completed. A sharding strategy (FSDP) writes nothing:
no process holds the whole state, and the next attempt resumes from the run's last periodic checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from accelkit.checkpoint import files as ckpt
from accelkit.environments.base import restart_attempt_of
from accelkit.loops import checkpointing, resume
from accelkit.strategies.launchers import watchdog

if TYPE_CHECKING:
    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer

#: the name of the checkpoint a survivor writes (replaced at each failure; never one a checkpoint callback names)
SURVIVOR_FILE = "survivor.ckpt"


def checkpoint_folders(trainer: Trainer) -> list[tuple[Path, str]]:
    """The folders the run's checkpoint callbacks write in, with the file extension of each (``.ckpt``), in the
    callbacks' order: where a restarted attempt looks for the run's newest checkpoint."""
    found: list[tuple[Path, str]] = []
    for callback in trainer.checkpoint_callbacks:
        if hasattr(callback, "last_checkpoint_path"):
            folder = Path(callback.last_checkpoint_path(trainer)).parent
        elif dirpath := getattr(callback, "dirpath", None):
            folder = Path(dirpath)
        else:
            continue
        found.append((folder, getattr(callback, "FILE_EXTENSION", ".ckpt")))
    return found


def keeps_last_step(trainer: Trainer) -> bool:
    """Whether a lost peer makes this process keep the last completed step: a ``fit`` running on several
    processes under a launcher that restarts the run by itself (an elastic torchrun, a requeued SLURM job)."""
    loop = trainer.run_state.fit_loop
    return trainer.world_size > 1 and loop is not None and loop.active and \
        restart_attempt_of(getattr(trainer.strategy, "cluster_environment", None)) is not None


def save_alone(trainer: Trainer, module: Module, why: str) -> Path | None:
    """On the first process of each node, write the last completed step to :data:`SURVIVOR_FILE` alone (no
    collective), atomically, and say so; returns the path (``None`` where this process writes nothing)."""
    strategy = trainer.strategy
    if strategy.local_rank != 0:
        return None
    folders = checkpoint_folders(trainer)
    if not folders:
        print(f"accelkit: {why}; the run has no checkpoint callback (enable_checkpointing=False), so the last "
              "completed step is not written", flush=True)
        return None
    path = folders[0][0] / SURVIVOR_FILE
    owner = _tracked_by(trainer, path)
    if owner is not None:
        print(f"accelkit: {why}; the last completed step is not written: {path} is a checkpoint {owner} keeps (its "
              f"filename is {SURVIVOR_FILE!r}); give that callback another filename", flush=True)
        return None
    checkpoint = checkpointing.dump(trainer, module, alone=True)
    progress = trainer.run_state.progress
    if resume.in_flight(trainer) and progress.stepping:  # the running batch was counted before its step
        checkpoint["loops"]["batches_that_stepped"] = progress.batches_that_stepped - 1
    ckpt.atomic_save(ckpt.to_cpu(checkpoint), path)
    position = checkpoint["loops"].get(resume.POSITION_KEY) or {}
    print(f"accelkit: {why}; process {strategy.global_rank} wrote the last completed step (epoch "
          f"{checkpoint['epoch']}, step {checkpoint['global_step']}, {position.get('batches', 0)} batch(es) of the "
          f"epoch) alone to {path}: the launcher's next attempt resumes from it", flush=True)
    return path


def _tracked_by(trainer: Trainer, path: Path) -> str | None:
    """The name of the checkpoint callback whose records (its top-k files, best and last checkpoint) hold ``path``,
    or ``None``: a survivor's file never replaces a checkpoint a callback keeps."""
    for callback in trainer.checkpoint_callbacks:
        kept = [*getattr(callback, "best_k_models", {}), getattr(callback, "best_model_path", ""),
                getattr(callback, "last_model_path", "")]
        if any(name and Path(name).resolve() == path.resolve() for name in kept):
            return type(callback).__name__
    return None


def on_failure(trainer: Trainer, module: Module, exc: BaseException) -> Path | None:
    """After ``fit`` raised ``exc``: when it came out of a collective (:func:`~accelkit.strategies.launchers.
    watchdog.failed_in_collective`) in a run that keeps its last step (:func:`keeps_last_step`), write that step
    (:func:`save_alone`) where the strategy replicates the state, else say on global rank zero what the next attempt
    resumes from. A failure to write is a warning: the run's own error is the one raised."""
    if not keeps_last_step(trainer) or not watchdog.failed_in_collective(exc):
        return None
    strategy = trainer.strategy
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    why = f"a collective failed ({type(exc).__name__}: {first})"
    if not strategy.replicates_state:
        if strategy.local_rank == 0:
            print(f"accelkit: {why}; the {type(strategy).__name__}'s state is sharded over the processes, so no "
                  "process can write it alone: the launcher's next attempt resumes from the run's last periodic "
                  "checkpoint", flush=True)
        return None
    try:
        return save_alone(trainer, module, why)
    except Exception as error:  # noqa: BLE001 - the run's own error matters more than this one
        import warnings

        warnings.warn(f"the last completed step could not be written after {why}: {type(error).__name__}: {error}",
                      UserWarning, stacklevel=2)
        return None
