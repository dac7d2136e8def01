"""Experiment loggers: the :class:`Logger` base, :class:`CSVLogger` and :class:`TensorBoardLogger`.

``Trainer(logger=True)`` uses a :class:`CSVLogger`; pass a logger, a list of them, or ``False`` instead.
:class:`TensorBoardLogger`'s module is loaded on first use, so ``import accelkit`` stays free of TensorBoard.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelkit.loggers.base import Logger, VersionedLogger, next_version
from accelkit.loggers.csv_logs import CSVLogger

if TYPE_CHECKING:
    from accelkit.loggers.tensorboard import TensorBoardLogger

__all__ = ["Logger", "CSVLogger", "TensorBoardLogger", "VersionedLogger", "next_version"]


def __getattr__(name: str) -> Any:
    if name == "TensorBoardLogger":
        from accelkit.loggers.tensorboard import TensorBoardLogger

        return TensorBoardLogger
    raise AttributeError(f"module 'accelkit.loggers' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
