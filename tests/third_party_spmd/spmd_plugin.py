"""A third-party plugin: a one-process-many-devices (SPMD) data-parallel strategy for accelkit's ``xla`` accelerator,
written only against public names (accelkit's hook API and records, ``accelkit_xla_spawn.XLAStrategy``, and
torch_xla's public SPMD API). It is what a user outside this repository would write; test_third_party_spmd.py
checks that it uses no private name and that it trains.

Registered with ``Trainer(plugins=[spmd_plugin], strategy="third_party_spmd")``.
"""

from __future__ import annotations

from typing import Any

import torch

from accelkit import hookimpl
from accelkit.records import StrategyRecord
from accelkit_xla_spawn import XLAStrategy

ACCELKIT_API = ">=1.1,<2"


class MinimalSPMDStrategy(XLAStrategy):
    """Every local XLA device in this one process, batch split on a one-axis ``("data",)`` mesh, parameters
    replicated (GSPMD inserts the gradient all-reduce)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.mesh: Any = None

    @property
    def processes_per_node(self) -> int:
        return 1

    @property
    def devices_per_process(self) -> int:
        return len(self.devices)

    def setup_runtime(self) -> None:
        """SPMD mode must be on before anything touches a device: the Trainer calls this first."""
        import numpy as np
        import torch_xla.distributed.spmd as xs
        import torch_xla.runtime as xr

        if self.mesh is None:
            xr.use_spmd()
            count = xr.global_runtime_device_count()
            self.mesh = xs.Mesh(np.arange(count), (count,), ("data",))

    @property
    def root_device(self) -> torch.device:
        import torch_xla

        return torch_xla.device()

    def process_dataloader(self, dataloader: Any, stage: str) -> Any:
        """torch_xla's device loader, splitting every 2-d batch tensor's rows over the devices."""
        import torch_xla.distributed.parallel_loader as pl
        import torch_xla.distributed.spmd as xs

        return pl.MpDeviceLoader(dataloader, self.root_device,
                                 input_sharding=xs.ShardingSpec(self.mesh, ("data", None)))


@hookimpl
def accelkit_register_strategies() -> list[StrategyRecord]:
    """``third_party_spmd`` on the ``xla`` accelerator."""
    return [StrategyRecord("third_party_spmd", MinimalSPMDStrategy, accelerators=("xla",),
                           description="a third party's SPMD data-parallel strategy")]
