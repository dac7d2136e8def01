"""The accelerator: what the device is, whether it is here, how many there are."""

from __future__ import annotations

import os

import torch

from accelkit import Accelerator

#: Set to ``0`` to make the template device unavailable (to see ``accelerator="auto"`` fall back).
AVAILABLE_ENV = "ACCELKIT_MYDEVICE_AVAILABLE"


class MyDeviceAccelerator(Accelerator):
    """A template device that computes on the CPU.

    A real plugin answers :meth:`is_available` and :meth:`device_count` from the environment or a cheap
    query that does not initialise the device runtime: accelkit calls them in the parent process before
    it starts any worker.
    """

    name = "mydevice"
    distributed_backend = "gloo"
    autocast_device_type = "cpu"

    @classmethod
    def is_available(cls) -> bool:
        """Available unless ``ACCELKIT_MYDEVICE_AVAILABLE=0``."""
        return os.environ.get(AVAILABLE_ENV, "1").strip() != "0"

    @classmethod
    def unavailable_reason(cls) -> str:
        """Says which variable turned the device off and how to turn it back on."""
        if cls.is_available():
            return ""
        return f"{AVAILABLE_ENV}=0 is set; unset it (or set it to 1) to use mydevice"

    @classmethod
    def device_count(cls) -> int:
        """Two template devices (both are the CPU)."""
        return 2

    @classmethod
    def parse_devices(cls, devices: object) -> list[int]:
        """``"auto"`` means one device here; everything else is parsed as accelkit does by default."""
        if isinstance(devices, str) and devices.strip().lower() == "auto":
            return [0]
        return super().parse_devices(devices)

    def device(self, index: int) -> torch.device:
        """Every index maps to the CPU."""
        return torch.device("cpu")
