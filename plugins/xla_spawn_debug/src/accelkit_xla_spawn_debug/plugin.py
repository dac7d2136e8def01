"""Entry point of accelkit-xla-spawn-debug: the strategy records it registers. Importing this module is cheap
(it imports neither torch_xla nor the strategy module)."""

from __future__ import annotations

import importlib.util

from accelkit import hookimpl
from accelkit.records import StrategyRecord

ACCELKIT_API = ">=1.0,<2"


@hookimpl
def accelkit_register_strategies() -> list[StrategyRecord]:
    """``xla_spawn_debug``, alias ``tpu_spawn_debug`` (the name Lightning's guides pass in ``plugins=``), and
    ``xla_spmd_debug`` when accelkit-xla-spmd is installed."""
    records = [
        StrategyRecord("xla_spawn_debug", "accelkit_xla_spawn_debug.strategy:XLASpawnDebugStrategy",
                       aliases=("tpu_spawn_debug",), accelerators=("xla",),
                       description="xla_spawn (or one core) with torch_xla debug output and a per-replica report"),
    ]
    if importlib.util.find_spec("accelkit_xla_spmd") is not None:
        records.append(StrategyRecord("xla_spmd_debug", "accelkit_xla_spawn_debug.spmd:XLASPMDDebugStrategy",
                                      aliases=("tpu_spmd_debug",), accelerators=("xla",),
                                      description="xla_spmd with torch_xla debug output and a per-host report"))
    return records
