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
        problems = []
        asked = len(self.devices) * self.num_nodes
        if asked != 1:
            problems.append(
                f"strategy {self.name or 'single_device'!r} runs on one device, but devices={self.devices} and "
                f"num_nodes={self.num_nodes} ask for {asked}; use devices=1 or a distributed strategy.")
        if self.options and type(self).__init__ is Strategy.__init__:  # no subclass reads options
            problems.append(
                f"strategy {self.name or type(self).__name__!r} takes no options, but was given "
                f"{sorted(self.options)}: the device comes from Trainer(accelerator=..., devices=...); drop them.")
        return problems
