"""Precisions that break the precision contract, for the strategies' checks (importable by spawned workers)."""

from __future__ import annotations

from typing import Any

import torch

from accelkit.precision import Precision


class CastAfterStep(Precision):
    """Re-casts every parameter to float64 after each optimizer step (as a careless stochastic-rounding plugin
    might): under DDP the wrapper's all-reduce was built for float32, so the processes would drift apart."""

    name = "cast-after-step"

    def optimizer_step(self, optimizer: torch.optim.Optimizer, step: Any = None) -> bool:
        (step or optimizer.step)()
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.data = param.data.to(torch.float64)
        return True
