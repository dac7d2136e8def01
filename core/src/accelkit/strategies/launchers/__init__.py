"""Launchers: how a strategy's work reaches its processes (in place, under an external launcher, or spawned),
with what a worker sends back (:mod:`~accelkit.strategies.launchers.result`), stopping on a signal
(:mod:`~accelkit.strategies.launchers.interrupt`) and naming the rank that holds a run up
(``watchdog``).
"""

from accelkit.strategies.launchers.base import Launcher
from accelkit.strategies.launchers.in_place import ExternalLauncher, InPlaceLauncher
from accelkit.strategies.launchers.result import WorkerResult
from accelkit.strategies.launchers.spawn import SpawnLauncher, remove_stale_temp_dirs, share_cores, worker_entry

__all__ = ["ExternalLauncher", "InPlaceLauncher", "Launcher", "SpawnLauncher", "remove_stale_temp_dirs",
           "share_cores", "worker_entry", "WorkerResult"]
