"""``OnExceptionCheckpoint``: save a checkpoint when a run fails."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from accelkit.callbacks.model_checkpoint import Checkpoint
from accelkit.checkpoint import paths as checkpoint_paths
from accelkit.checkpoint import sharded

if TYPE_CHECKING:
    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer


class OnExceptionCheckpoint(Checkpoint):
    """Write a checkpoint of the state at the moment a run raises (Lightning's ``OnExceptionCheckpoint``).

    When ``fit`` (or ``validate``/``test``/``predict``) raises, including ``KeyboardInterrupt``, this writes
    ``<dirpath>/<filename>.ckpt`` through ``trainer.save_checkpoint`` (replacing an older one) before the
    exception reaches you; resume with ``trainer.fit(model, ckpt_path=callback.ckpt_path)``, or with
    ``ckpt_path="last"``, which considers this file along with the ``last.ckpt`` files of ModelCheckpoints and
    takes the newest. If the checkpoint cannot be written, a warning says why and the run's own exception is
    the one raised.

    After a ``fit`` that completes, the file is removed: it described a failed run that a completed fit has
    superseded (Lightning removes it at the end of every stage; here only ``fit`` does, so evaluating after a
    failure keeps it).

    It is a checkpoint callback (``trainer.checkpoint_callbacks`` lists it): as in Lightning, passing it means
    the Trainer adds no default ModelCheckpoint, and ``enable_checkpointing=False`` refuses it.
    In a distributed run every process must reach the exception: the save waits for all of them.

    :param dirpath: the folder of the checkpoint.
    :param filename: its name without the extension (not empty).
    """

    FILE_EXTENSION = ".ckpt"

    def __init__(self, dirpath: str | os.PathLike, filename: str = "on_exception") -> None:
        if not filename:
            raise ValueError(f"OnExceptionCheckpoint(filename={filename!r}): the file name must not be empty")
        if filename.endswith(self.FILE_EXTENSION):
            raise ValueError(f"OnExceptionCheckpoint(filename={filename!r}): give the name without the "
                             f"{self.FILE_EXTENSION} extension (it is added)")
        if Path(filename).is_absolute() or ".." in Path(filename).parts:
            raise ValueError(f"OnExceptionCheckpoint(filename={filename!r}): the name leaves dirpath (an absolute "
                             "path or a '..' part), where the checkpoint is written and removed; choose the folder "
                             f"with dirpath= and give a name inside it, such as {Path(filename).name!r}")
        self.dirpath = Path(dirpath).expanduser().resolve()
        self.filename = filename

    @property
    def ckpt_path(self) -> str:
        """Where the checkpoint is written: ``<dirpath>/<filename>.ckpt``."""
        return str(self.dirpath / f"{self.filename}{self.FILE_EXTENSION}")

    def on_exception(self, trainer: Trainer, pl_module: Module, exception: BaseException) -> None:
        try:
            trainer.save_checkpoint(self.ckpt_path)
        except Exception as exc:  # the run's own exception matters more than this one
            warnings.warn(f"OnExceptionCheckpoint could not write {self.ckpt_path} after the run raised "
                          f"{type(exception).__name__}: {type(exc).__name__}: {exc}", UserWarning, stacklevel=2)

    def teardown(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """After a completed ``fit``, remove the checkpoint: only a checkpoint (by its format) inside ``dirpath``;
        anything else at its path (a folder or file of yours) is kept, with a warning naming it."""
        if stage == "fit" and trainer.is_global_zero:
            path = self.ckpt_path
            refusal = checkpoint_paths.removal_refusal(path, self.dirpath)
            if refusal:
                warnings.warn(f"OnExceptionCheckpoint did not remove {path!r} after the completed fit: {refusal}.",
                              UserWarning, stacklevel=2)
            elif refusal is None:
                sharded.remove(path)

    def find_last_checkpoints(self, trainer: Trainer) -> set[str]:
        """For ``ckpt_path="last"`` (see :class:`~accelkit.callbacks.ModelCheckpoint`): this callback's file."""
        return {self.ckpt_path}
