"""The CPU as an accelerator."""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch

from accelkit import Accelerator
from accelkit.errors import ConfigurationError
from accelkit.utilities.host import host_stats


class CPUAccelerator(Accelerator):
    """The host CPU. ``devices=N`` means N processes (each a rank) for the distributed strategies."""

    name = "cpu"
    distributed_backend = "gloo"
    autocast_device_type = "cpu"
    supports_sync_batchnorm = False  # torch.nn.SyncBatchNorm runs on GPU modules only

    @classmethod
    def device_count(cls) -> int:
        return os.cpu_count() or 1

    @classmethod
    def parse_devices(cls, devices: Any) -> list[int]:
        """``"auto"`` is one process; ``N`` (or ``"N"``) is N processes; lists make no sense on a CPU."""
        original = devices
        if isinstance(devices, str) and devices.strip().lower() == "auto":
            return [0]
        if isinstance(devices, str) and devices.strip().isascii() and devices.strip().isdigit():
            devices = int(devices.strip())
        if isinstance(devices, int) and not isinstance(devices, bool) and devices >= 1:
            cores = cls.device_count()
            if devices > cores:
                warnings.warn(
                    f"devices={original!r} starts {devices} processes on {cores} CPU core(s): they will compete for "
                    f"the cores and each step will be slower than with devices={cores} or fewer.",
                    UserWarning, stacklevel=2)
            return list(range(devices))
        raise ConfigurationError(
            f"devices={original!r} is not valid for the cpu accelerator: give the number of processes as an int "
            ">= 1 (devices=2), or 'auto' for one."
        )

    def device(self, index: int) -> torch.device:
        return torch.device("cpu")

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """The host's CPU and memory use in percent (``cpu_vm_percent``, ``cpu_percent``, ``cpu_swap_percent``, as
        Lightning's CPU accelerator reports), read with ``psutil``; ``ModuleNotFoundError`` without it."""
        return host_stats()

    def is_out_of_memory(self, error: BaseException) -> bool:
        """Host memory ran out: Python's ``MemoryError``, or torch's CPU allocator refusing an allocation
        (``RuntimeError: ... DefaultCPUAllocator: can't allocate memory ...``)."""
        if isinstance(error, MemoryError):
            return True
        return isinstance(error, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(error)
