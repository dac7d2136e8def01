"""bfloat16 precisions that check, inside the worker, that the GPU computes bfloat16 natively.

The parent process checks through NVML while the run is resolved (see
:func:`accelkit_cuda.plugin.accelkit_validate_config`); where NVML cannot tell, these classes make the same
check in the worker, after the worker has claimed its GPU, and stop with a clear message.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from accelkit.precision import MixedPrecision, TruePrecision


def require_native_bf16(precision_name: str) -> None:
    """Raise ``ValueError`` if the current GPU has no native bfloat16 (compute capability below 8.0)."""
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    if (major, minor) < (8, 0):
        raise ValueError(
            f"precision {precision_name!r} needs a GPU with native bfloat16 (compute capability 8.0 or newer, "
            f"Ampere and later), but GPU {index} ({torch.cuda.get_device_name(index)}) has compute capability "
            f"{major}.{minor}; use precision='16-mixed' (float16 with a gradient scaler) or '32-true'."
        )


class _NativeBF16:
    """Mixin: bfloat16 by default, and a check (in the worker) that the GPU computes it natively."""

    dtype: torch.dtype
    name: str

    def __init__(self, **options: Any) -> None:
        options.setdefault("dtype", torch.bfloat16)
        super().__init__(**options)  # type: ignore[call-arg]

    def convert_module(self, module: nn.Module) -> nn.Module:
        """Check the GPU, then convert as the precision does."""
        if self.dtype == torch.bfloat16:
            require_native_bf16(self.name)
        return super().convert_module(module)  # type: ignore[misc]


class CUDABF16MixedPrecision(_NativeBF16, MixedPrecision):
    """``"bf16-mixed"``: float32 weights, bfloat16 autocast on the GPU, no gradient scaler."""


class CUDABF16TruePrecision(_NativeBF16, TruePrecision):
    """``"bf16-true"``: weights, inputs and computation in bfloat16."""
