"""Entry point of accelkit-fsdp: the records it registers. Importing this module is cheap (no torch import).

A strategy-only plugin: ``fsdp`` runs on every registered accelerator listed here, with the process-group
backend that accelerator declares (``gloo`` on the CPU, ``nccl`` on CUDA).
"""

from __future__ import annotations

from accelkit import hookimpl
from accelkit.records import StrategyRecord

ACCELKIT_API = ">=1.1,<2"  # launchers, checkpoint-state hooks (hook API 1.1)

#: accelerators whose process-group backend runs FSDP2's collectives (all-gather, reduce-scatter)
ACCELERATORS = ("cpu", "cuda")


@hookimpl
def accelkit_register_strategies() -> list[StrategyRecord]:
    return [
        StrategyRecord("fsdp", "accelkit_fsdp.strategy:FSDPStrategy", accelerators=ACCELERATORS,
                       description="parameters, gradients and optimizer state sharded over processes "
                                   "(FSDP2 fully_shard); starts its processes or joins torchrun/srun"),
    ]
