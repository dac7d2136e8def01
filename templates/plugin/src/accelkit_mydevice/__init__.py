"""accelkit-mydevice: a template accelkit plugin (a CPU-backed accelerator, a strategy and a precision)."""

from accelkit_mydevice.__about__ import __version__
from accelkit_mydevice.accelerator import MyDeviceAccelerator
from accelkit_mydevice.precision import RoundedPrecision
from accelkit_mydevice.strategy import CountingStrategy

__all__ = ["CountingStrategy", "MyDeviceAccelerator", "RoundedPrecision", "__version__"]
