"""The single-device strategy: one process, one device."""

from __future__ import annotations

from accelkit.strategies.base import Strategy


class SingleDeviceStrategy(Strategy):
    """One process, one device."""

    @property
    def processes_per_node(self) -> int:
        """One process."""
        return 1

    def validate(self) -> list[str]:
        asked = len(self.devices) * self.num_nodes
        if asked != 1:
            return [
                f"strategy {self.name or 'single_device'!r} runs on one device, but devices={self.devices} and "
                f"num_nodes={self.num_nodes} ask for {asked}; use devices=1 or a distributed strategy."
            ]
        return []
