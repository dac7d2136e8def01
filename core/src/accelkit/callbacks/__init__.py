"""Callbacks: the :class:`Callback` base and the built-in callbacks."""

from accelkit.callbacks.base import Callback, DeviceStatsMonitor

__all__ = ["Callback", "DeviceStatsMonitor"]
