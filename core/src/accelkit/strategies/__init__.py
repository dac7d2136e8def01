"""Strategies: how one run is laid out over devices and processes.

:class:`Strategy` is the base (:mod:`~accelkit.strategies.base`); :class:`SingleDeviceStrategy` runs one process on
one device; :class:`ParallelStrategy` is the base of those that spread a run over several
(:mod:`~accelkit.strategies.parallel`); :class:`DDPStrategy` joins processes a launcher started and
:class:`DDPSpawnStrategy` starts them
(:mod:`~accelkit.strategies.ddp`). How processes come to exist is a launcher's job
(:mod:`accelkit.strategies.launchers`); which shard of the data a rank reads is :mod:`~accelkit.strategies.sampler`.
"""

from accelkit.strategies.base import RunContext, StepRouter, Strategy
from accelkit.strategies.ddp import DDPSpawnStrategy, DDPStrategy, LocalRendezvous, find_free_port
from accelkit.strategies.parallel import ParallelStrategy
from accelkit.strategies.single_device import SingleDeviceStrategy

__all__ = ["DDPSpawnStrategy", "DDPStrategy", "LocalRendezvous", "ParallelStrategy", "RunContext",
           "SingleDeviceStrategy", "StepRouter", "Strategy", "find_free_port"]
