"""accelkit-fsdp: the ``fsdp`` strategy (parameters, gradients and optimizer state sharded with FSDP2)."""

from accelkit_fsdp.__about__ import __version__
from accelkit_fsdp.strategy import FSDPStrategy

__all__ = ["FSDPStrategy", "__version__"]
