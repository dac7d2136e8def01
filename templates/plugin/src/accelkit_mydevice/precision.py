"""The plugin's own precision: float32 storage, weights rounded to a lower precision after each step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accelkit.precision import Precision


class RoundedPrecision(Precision):
    """Keeps float32 parameters but rounds them to ``dtype`` values after every optimizer step.

    :param dtype: the format whose values the weights are rounded to (``torch.bfloat16`` or its name).
    """

    def __init__(self, dtype: torch.dtype | str = torch.bfloat16, **options: Any) -> None:
        super().__init__(**options)
        if isinstance(dtype, str):
            if not isinstance(getattr(torch, dtype, None), torch.dtype):
                raise ValueError(f"dtype={dtype!r} is not a torch dtype; use e.g. 'bfloat16' or 'float16'")
            dtype = getattr(torch, dtype)
        self.dtype = dtype

    def optimizer_step(self, optimizer: torch.optim.Optimizer, step: Callable[[], Any] | None = None) -> bool | None:
        """Step, then round every parameter the optimizer holds. Returns what the base class says of the step
        (``False``: skipped, ``None``: unknown)."""
        stepped = super().optimizer_step(optimizer, step)
        with torch.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    param.copy_(param.to(self.dtype).to(param.dtype))
        return stepped
