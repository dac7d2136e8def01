"""Entry point of accelkit-cpu: the records it registers. Importing this module is cheap."""

from __future__ import annotations

from accelkit import hookimpl
from accelkit.records import AcceleratorRecord, PrecisionRecord, StrategyRecord

ACCELKIT_API = ">=1.0,<2"

_CPU = ("cpu",)

#: shown once when ``precision=16`` / ``"16"`` / ``"16-mixed"`` is chosen on the CPU (Lightning warns the same and
#: substitutes bf16-mixed, so a program written for a GPU starts on a laptop)
SIXTEEN_MIXED_NOTICE = (
    "precision='16-mixed' on CPU runs as bf16-mixed (CPU autocast to bfloat16): float16 mixed precision (AMP) is "
    "not supported on CPU; write precision='bf16-mixed' to silence this notice."
)


@hookimpl
def accelkit_register_accelerators() -> list[AcceleratorRecord]:
    return [AcceleratorRecord("cpu", "accelkit_cpu.accelerator:CPUAccelerator", priority=0,
                              description="the host CPU; devices=N runs N processes")]


def _with_unused_parameters_variant(name: str, target: str, description: str) -> list[StrategyRecord]:
    """``name`` and Lightning's ``<name>_find_unused_parameters_true`` variant of it."""
    return [StrategyRecord(name, target, accelerators=_CPU, description=description),
            StrategyRecord(f"{name}_find_unused_parameters_true", target, accelerators=_CPU,
                           options={"find_unused_parameters": True},
                           description=f"{name} with find_unused_parameters=True")]


@hookimpl
def accelkit_register_strategies() -> list[StrategyRecord]:
    fork = "accelkit.strategies.ddp:DDPForkStrategy"
    return [
        StrategyRecord("single_device", "accelkit.strategies.single_device:SingleDeviceStrategy", accelerators=_CPU,
                       description="one process"),
        *_with_unused_parameters_variant("ddp_spawn", "accelkit.strategies.ddp:DDPSpawnStrategy",
                                         "N processes started by accelkit, gloo all-reduce"),
        *_with_unused_parameters_variant("ddp_fork", fork,
                                         "ddp_spawn with workers forked from the caller (no pickling, fast start)"),
        *_with_unused_parameters_variant("ddp_notebook", fork,
                                         "ddp_fork, by the name Lightning gives it for notebooks"),
        *_with_unused_parameters_variant("ddp", "accelkit.strategies.ddp:DDPStrategy",
                                         "processes started by torchrun or srun, gloo all-reduce"),
    ]


@hookimpl
def accelkit_register_precisions() -> list[PrecisionRecord]:
    return [
        PrecisionRecord("32-true", "accelkit.precision:Precision", aliases=("32",), accelerators=_CPU),
        PrecisionRecord("64-true", "accelkit.precision:TruePrecision", aliases=("64",), accelerators=_CPU,
                        options={"dtype": "float64"}),
        PrecisionRecord("bf16-mixed", "accelkit.precision:MixedPrecision", aliases=("bf16",), accelerators=_CPU,
                        options={"dtype": "bfloat16"}, description="CPU autocast to bfloat16"),
        PrecisionRecord("bf16-true", "accelkit.precision:TruePrecision", accelerators=_CPU,
                        options={"dtype": "bfloat16"}, description="weights, inputs and computation in bfloat16"),
        PrecisionRecord("16-true", "accelkit.precision:TruePrecision", accelerators=_CPU,
                        options={"dtype": "float16"}, description="weights, inputs and computation in float16"),
        PrecisionRecord("16-mixed", "accelkit.precision:MixedPrecision", aliases=("16",), accelerators=_CPU,
                        options={"dtype": "bfloat16"}, notice=SIXTEEN_MIXED_NOTICE,
                        description="runs as bf16-mixed on CPU (no float16 autocast), with a notice"),
    ]
