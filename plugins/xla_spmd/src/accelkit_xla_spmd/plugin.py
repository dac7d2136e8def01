"""Entry point of accelkit-xla-spmd: the strategy record it registers. Importing this module is cheap (it imports
neither torch_xla nor the strategy module)."""

from __future__ import annotations

from accelkit import hookimpl
from accelkit.records import StrategyRecord

ACCELKIT_API = ">=1.0,<2"


@hookimpl
def accelkit_register_strategies() -> list[StrategyRecord]:
    """``xla_spmd`` (alias ``tpu_spmd``) on the ``xla`` accelerator (``accelerator="tpu"`` is its alias)."""
    return [
        StrategyRecord("xla_spmd", "accelkit_xla_spmd.strategy:XLASPMDStrategy", aliases=("tpu_spmd",),
                       accelerators=("xla",),
                       description="one process per host over all its XLA devices (torch_xla SPMD, device mesh)"),
    ]
