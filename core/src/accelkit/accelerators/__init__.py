"""Lightning's ``lightning.pytorch.accelerators`` with the package name changed, for a port's imports: the core's
:class:`~accelkit.Accelerator`, and the accelerator classes of the first-party plugins, each read from its plugin when
first asked for (``from accelkit.accelerators import CPUAccelerator``), or a ``ModuleNotFoundError`` naming the
distribution to install. The modules below it (``accelkit.accelerators.cpu``...) are the plugins' packages
(:data:`accelkit.compat.LIGHTNING_PLUGIN_PATHS`). accelkit's own code does not import this package, and importing it
imports no plugin.
"""

from __future__ import annotations

import importlib
from typing import Any

from accelkit.accelerator import Accelerator

#: Lightning's accelerator classes that a first-party plugin defines -> the module path that is the plugin's package
PLUGIN_CLASSES: dict[str, str] = {
    "CPUAccelerator": "accelkit.accelerators.cpu",
    "CUDAAccelerator": "accelkit.accelerators.cuda",
    "XLAAccelerator": "accelkit.accelerators.xla",
}

__all__ = ["PLUGIN_CLASSES", "Accelerator"]


def __getattr__(name: str) -> Any:
    """A plugin's accelerator class (:data:`PLUGIN_CLASSES`), read from its plugin, imported now."""
    path = PLUGIN_CLASSES.get(name)
    if path is None:
        raise AttributeError(f"module 'accelkit.accelerators' has no attribute {name!r}")
    return getattr(importlib.import_module(path), name)
