"""Callbacks: the :class:`Callback` base and the built-in callbacks."""

from accelkit.callbacks.base import Callback, DeviceStatsMonitor
from accelkit.callbacks.early_stopping import EarlyStopping
from accelkit.callbacks.lr_monitor import LearningRateMonitor
from accelkit.callbacks.model_checkpoint import Checkpoint, ModelCheckpoint

__all__ = ["Callback", "Checkpoint", "DeviceStatsMonitor", "EarlyStopping", "LearningRateMonitor", "ModelCheckpoint"]
