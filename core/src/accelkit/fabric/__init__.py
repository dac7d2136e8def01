"""``accelkit.Fabric``: Lightning Fabric's API (a training loop of your own) over accelkit's plugins.

:class:`~accelkit.fabric.fabric.Fabric` composes the run as the Trainer does; :mod:`~accelkit.fabric.wrappers` holds
what ``setup`` returns, :mod:`~accelkit.fabric.checkpoints` its ``save``/``load``, :mod:`~accelkit.fabric.loggers`
Lightning Fabric's loggers (``root_dir=``), imported when first named (``accelkit.loggers`` stays unimported by
``import accelkit``).
"""

from accelkit.fabric.fabric import Fabric
from accelkit.fabric.wrappers import FabricDataLoader, FabricModule, FabricOptimizer, is_wrapped

__all__ = ["Fabric", "loggers", "FabricDataLoader", "FabricModule", "FabricOptimizer", "is_wrapped"]


def __getattr__(name: str) -> object:
    """``accelkit.fabric.loggers`` as an attribute, imported on first use."""
    if name == "loggers":
        import importlib

        return importlib.import_module("accelkit.fabric.loggers")
    raise AttributeError(f"module 'accelkit.fabric' has no attribute {name!r}")
