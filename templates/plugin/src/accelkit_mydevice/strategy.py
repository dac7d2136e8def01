"""The plugin's own strategy: a single-device strategy that counts optimizer steps."""

from __future__ import annotations

import torch

from accelkit.strategies import SingleDeviceStrategy


class CountingStrategy(SingleDeviceStrategy):
    """Runs like ``single_device`` and counts the optimizer steps it took in :attr:`steps`.

    It shows the minimum a strategy subclass needs: override the pieces you change, call ``super()``.
    """

    def __init__(self, **options: object) -> None:
        super().__init__(**options)
        #: optimizer steps taken (skipped steps are not counted)
        self.steps = 0

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool | None:
        """Step through the base class; count the step if it was taken."""
        stepped = super().optimizer_step(optimizer)
        self.steps += int(bool(stepped))
        return stepped
