"""The module the ``accelkit`` entry point names: the plugin's hook implementations.

accelkit imports this module in every process, before anything else of the plugin, so it imports nothing
heavy: records name their classes as ``"module:Class"`` strings, imported only when a run uses them.
"""

from __future__ import annotations

from accelkit import hookimpl
from accelkit.records import AcceleratorRecord, PrecisionRecord, StrategyRecord

#: The hook-contract versions this plugin works with (a PEP 440 specifier); accelkit refuses to load the
#: plugin, and says why in ``accelkit plugins``, when its HOOK_API_VERSION is outside this range.
ACCELKIT_API = ">=1.0,<2"

NAME = "mydevice"
_ON = (NAME,)


@hookimpl
def accelkit_register_accelerators() -> list[AcceleratorRecord]:
    """The accelerator, its alias, and its priority for ``accelerator="auto"`` (the cpu plugin uses 0)."""
    return [AcceleratorRecord(NAME, "accelkit_mydevice.accelerator:MyDeviceAccelerator", aliases=("mydev",),
                              priority=10, description="template device, backed by the CPU")]


@hookimpl
def accelkit_register_strategies() -> list[StrategyRecord]:
    """Core strategies reused for this accelerator, plus one of the plugin's own."""
    return [
        StrategyRecord("single_device", "accelkit.strategies.single_device:SingleDeviceStrategy", accelerators=_ON,
                       description="one process"),
        StrategyRecord("ddp_spawn", "accelkit.strategies.ddp:DDPSpawnStrategy", accelerators=_ON,
                       description="N processes started by accelkit, gloo all-reduce"),
        StrategyRecord("mydevice_counting", "accelkit_mydevice.strategy:CountingStrategy", accelerators=_ON,
                       aliases=("counting",), description="single device, counts optimizer steps"),
    ]


@hookimpl
def accelkit_register_precisions() -> list[PrecisionRecord]:
    """accelkit's default precision for this accelerator, plus the plugin's own."""
    return [
        PrecisionRecord("32-true", "accelkit.precision:Precision", aliases=("32",), accelerators=_ON),
        PrecisionRecord("bf16-rounded", "accelkit_mydevice.precision:RoundedPrecision", accelerators=_ON,
                        options={"dtype": "bfloat16"},
                        description="float32 weights rounded to bfloat16 values after each step"),
    ]
