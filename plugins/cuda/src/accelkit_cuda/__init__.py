"""accelkit-cuda: NVIDIA GPUs for accelkit (accelerator ``cuda``, alias ``gpu``).

Importing this package does not initialise CUDA; see ``accelkit_cuda.accelerator``.
"""

from accelkit_cuda.__about__ import __version__
from accelkit_cuda.accelerator import CUDAAccelerator, cuda_device_count
from accelkit_cuda.pinning import pinned_dataloader
from accelkit_cuda.precision import CUDABF16MixedPrecision, CUDABF16TruePrecision
from accelkit_cuda.strategies import (
    CUDADDPSpawnStrategy,
    CUDADDPStrategy,
    CUDASingleDeviceStrategy,
    CUDAStrategyMixin,
)

__all__ = [
    "CUDAAccelerator",
    "CUDABF16MixedPrecision",
    "CUDABF16TruePrecision",
    "CUDADDPSpawnStrategy",
    "CUDADDPStrategy",
    "CUDASingleDeviceStrategy",
    "CUDAStrategyMixin",
    "__version__",
    "cuda_device_count",
    "pinned_dataloader",
]
