"""accelkit-cpu: the CPU accelerator plugin."""

from accelkit_cpu.__about__ import __version__
from accelkit_cpu.accelerator import CPUAccelerator

__all__ = ["CPUAccelerator", "__version__"]
