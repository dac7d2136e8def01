"""accelkit: one PyTorch training script for every accelerator, composed from plugins.

    import accelkit

    class Model(accelkit.Module):
        ...

    accelkit.Trainer(accelerator="auto", devices="auto", precision="32-true").fit(Model())
"""

from accelkit import compat
from accelkit.__about__ import __version__
from accelkit.accelerator import Accelerator
from accelkit.callbacks import Callback
from accelkit.errors import (
    AccelkitError,
    ConfigurationError,
    PluginConflictError,
    PluginError,
    TrainingInterrupted,
    WorkerError,
)
from accelkit.fabric import Fabric
from accelkit.hookspecs import HOOK_API_VERSION, hookimpl, hookspec
from accelkit.module import DataModule, Module
from accelkit.precision import MixedPrecision, Precision, TruePrecision
from accelkit.records import AcceleratorRecord, PrecisionRecord, RunConfig, StrategyRecord
from accelkit.strategies import DDPSpawnStrategy, DDPStrategy, SingleDeviceStrategy, Strategy
from accelkit.trainer import Trainer
from accelkit.utilities import rank_zero_only, seed_everything

#: Lightning's names for the two base classes: the same class objects as :class:`Module` and :class:`DataModule`
#: (not subclasses), so ``import accelkit as L; class LitModel(L.LightningModule)`` runs unchanged
LightningModule = Module
LightningDataModule = DataModule

compat.install()


def __getattr__(name: str) -> object:
    """``accelkit.utils`` and the other modules of the flat layout, as attributes (see :mod:`accelkit.compat`), the
    subpackages not imported yet (``accelkit.loggers``), and
    ``accelkit.pytorch``, accelkit itself: programs that ``import lightning as L`` reach Lightning's names as
    ``L.pytorch.callbacks.ModelCheckpoint``, and with the import changed that reads ``accelkit.callbacks...``."""
    if name == "pytorch":
        import sys

        return sys.modules[__name__]
    import importlib
    import importlib.util

    if f"accelkit.{name}" in compat.MOVED or (
            not name.startswith("_") and importlib.util.find_spec(f"accelkit.{name}") is not None):
        return importlib.import_module(f"accelkit.{name}")  # a subpackage not imported yet (``accelkit.loggers``)
    raise AttributeError(f"module 'accelkit' has no attribute {name!r}")

__all__ = [
    "HOOK_API_VERSION",
    "Accelerator",
    "AcceleratorRecord",
    "AccelkitError",
    "Callback",
    "ConfigurationError",
    "DataModule",
    "DDPSpawnStrategy",
    "DDPStrategy",
    "Fabric",
    "LightningDataModule",
    "LightningModule",
    "MixedPrecision",
    "Module",
    "PluginConflictError",
    "PluginError",
    "Precision",
    "PrecisionRecord",
    "RunConfig",
    "SingleDeviceStrategy",
    "Strategy",
    "StrategyRecord",
    "Trainer",
    "TruePrecision",
    "TrainingInterrupted",
    "WorkerError",
    "__version__",
    "hookimpl",
    "hookspec",
    "rank_zero_only",
    "seed_everything",
]
