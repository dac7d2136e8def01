"""Experiment loggers: the :class:`Logger` base, :class:`CSVLogger` and :class:`TensorBoardLogger`.

``Trainer(logger=True)`` (the default) uses Lightning's rule, :func:`default_logger`: a :class:`TensorBoardLogger`
when ``tensorboard`` or ``tensorboardX`` can be imported, else a :class:`CSVLogger`, both writing
``<default_root_dir>/lightning_logs/version_<n>``; pass a logger, a list of them, or ``False`` instead.
:class:`TensorBoardLogger`'s module is loaded on first use, so ``import accelkit`` stays free of TensorBoard.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from accelkit.loggers.base import DEFAULT_NAME, Logger, RunFolder, VersionedLogger, claim_version, next_version
from accelkit.loggers.csv_logs import CSVLogger

if TYPE_CHECKING:
    from accelkit.loggers.tensorboard import TensorBoardLogger

__all__ = ["Logger", "CSVLogger", "TensorBoardLogger", "VersionedLogger", "RunFolder", "DEFAULT_NAME",
           "claim_version", "default_logger", "next_version"]


def default_logger(save_dir: str | os.PathLike) -> Logger:
    """The logger of ``Trainer(logger=True)``, by Lightning's rule: a :class:`TensorBoardLogger` when
    ``tensorboard`` or ``tensorboardX`` can be imported, else a :class:`CSVLogger`; both write
    ``<save_dir>/lightning_logs/version_<n>``."""
    from accelkit.loggers.tensorboard import TensorBoardLogger, tensorboard_available

    return TensorBoardLogger(save_dir) if tensorboard_available() else CSVLogger(save_dir)


def __getattr__(name: str) -> type[TensorBoardLogger]:
    if name == "TensorBoardLogger":
        from accelkit.loggers.tensorboard import TensorBoardLogger

        return TensorBoardLogger
    raise AttributeError(f"module 'accelkit.loggers' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
