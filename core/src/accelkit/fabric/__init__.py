"""``accelkit.Fabric``: Lightning Fabric's API (a training loop of your own) over accelkit's plugins.

:class:`~accelkit.fabric.fabric.Fabric` composes the run as the Trainer does; :mod:`~accelkit.fabric.wrappers` holds
what ``setup`` returns, :mod:`~accelkit.fabric.checkpoints` its ``save``/``load``, :mod:`~accelkit.fabric.loggers`
Lightning Fabric's loggers (``root_dir=``).
"""

from accelkit.fabric import loggers
from accelkit.fabric.fabric import Fabric
from accelkit.fabric.wrappers import FabricDataLoader, FabricModule, FabricOptimizer, is_wrapped

__all__ = ["Fabric", "loggers", "FabricDataLoader", "FabricModule", "FabricOptimizer", "is_wrapped"]
