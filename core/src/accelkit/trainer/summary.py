"""The lines that end a fit, from Python and from the ``accelkit`` command alike: why it stopped
(``max_epochs=20 reached``, early stopping, a time limit, ``max_steps``), what it measured, and where its
checkpoints and logs are. :meth:`accelkit.Trainer.fit` prints them on global rank zero when the run shows a
progress bar (not with ``enable_progress_bar=False`` or ``barebones=True``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.environments.base import restart_attempt_of

if TYPE_CHECKING:
    import torch

    from accelkit.trainer.trainer import Trainer


def _number(value: torch.Tensor) -> str:
    try:
        return f"{float(value):.4f}"
    except (TypeError, ValueError, RuntimeError):
        return str(value)


def fit_summary(trainer: Trainer, elapsed: float | None = None) -> list[str]:
    """The end-of-fit lines of ``trainer``'s latest fit (without the ``accelkit:`` prefix): why it stopped, its
    epochs, steps, time (``elapsed`` seconds, when given), which attempt of a run its launcher restarts by itself
    (torchrun, a requeued SLURM job) and what it resumed from, and ``callback_metrics``; the folder of each checkpoint
    callback with the files it wrote last and best; the logs' folder when the run has a logger."""
    reason = trainer.run_state.stop_reason or "finished"
    first = (f"fit stopped: {reason}; {trainer.current_epoch} epoch(s), {trainer.global_step} step(s)"
             + (f" in {elapsed:.1f} s" if elapsed is not None else ""))
    attempt = restart_attempt_of(getattr(trainer.strategy, "cluster_environment", None))
    if attempt is not None:  # a launcher that restarts the run by itself: which attempt, resumed from where
        loaded = trainer.run_state.ckpt_path
        first += (f"; {'first attempt' if attempt == 0 else f'attempt {attempt}'} of this run, "
                  + (f"resumed from {loaded}" if loaded else "from the beginning"))
    shown = ", ".join(f"{name}={_number(value)}" for name, value in sorted(trainer.callback_metrics.items()))
    lines = [first + (f"; {shown}" if shown else "")]
    for callback in trainer.checkpoint_callbacks:
        folder = getattr(callback, "dirpath", None)
        if not folder:
            continue
        last, best = getattr(callback, "last_model_path", ""), getattr(callback, "best_model_path", "")
        files = ([f"last {last}"] if last else []) + ([f"best {best}"] if best and best != last else [])
        lines.append(f"checkpoints in {folder}" + (f" ({', '.join(files)})" if files else ""))
    if trainer.loggers:
        lines.append(f"logs in {trainer.log_dir}")
    return lines


def print_fit_summary(trainer: Trainer, elapsed: float | None = None) -> None:
    """Print :func:`fit_summary` on standard output, each line after ``accelkit:``, on global rank zero only."""
    if trainer.is_global_zero:
        for line in fit_summary(trainer, elapsed):
            print(f"accelkit: {line}", flush=True)
