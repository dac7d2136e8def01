""":class:`ParallelStrategy`: the base of strategies whose run spans several processes or devices working together
(Lightning's ``lightning.pytorch.strategies.ParallelStrategy``)."""

from __future__ import annotations

import torch

from accelkit.strategies.base import Strategy


class ParallelStrategy(Strategy):
    """Base class of the strategies that spread one run over several processes or devices: the DDP strategies
    (:class:`~accelkit.strategies.ddp.DDPStrategy`, :class:`~accelkit.strategies.ddp.DDPSpawnStrategy`), FSDP
    and the XLA replica and SPMD strategies derive from it, so ``isinstance(trainer.strategy, ParallelStrategy)``
    tells a single-device run from a parallel one, as in Lightning (a parallel strategy asked for one device is
    still one).

    It adds Lightning's names for the layout: :attr:`num_processes` and :attr:`parallel_devices`, and
    :meth:`reduce_boolean_decision`.
    """

    @property
    def num_processes(self) -> int:
        """How many processes this strategy runs on each node (Lightning's ``strategy.num_processes``: one per
        device for DDP, one for an SPMD strategy that drives every local device from one process)."""
        return self.processes_per_node

    @property
    def parallel_devices(self) -> list[torch.device]:
        """The ``torch.device`` of each local device of the run (read it inside the run: building a device object
        may start the device's runtime)."""
        return [self.accelerator.device(index) for index in self.devices]

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:  # noqa: A002 - Lightning's name
        """Agree on ``decision`` across processes: ``True`` when every process decided ``True`` (``all=True``), or
        when any did (``all=False``)."""
        votes = self.reduce(torch.tensor(1.0 if decision else 0.0, device=self.root_device), op="sum")
        count = float(votes)
        return count >= self.world_size - 0.5 if all else count > 0.5
