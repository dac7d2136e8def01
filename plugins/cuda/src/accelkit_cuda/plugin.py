"""Entry point of accelkit-cuda: the records it registers and its configuration check.

Importing this module is cheap and touches no GPU: the classes are named by ``"module:Class"`` strings and
imported only when a run uses them.
"""

from __future__ import annotations

from accelkit import hookimpl
from accelkit.records import AcceleratorRecord, PrecisionRecord, RunConfig, StrategyRecord

ACCELKIT_API = ">=1.0,<2"

_CUDA = ("cuda",)
_PKG = "accelkit_cuda"
_BF16_PRECISIONS = ("bf16-mixed", "bf16-true")


@hookimpl
def accelkit_register_accelerators() -> list[AcceleratorRecord]:
    """``cuda`` (alias ``gpu``), preferred over the CPU by ``accelerator="auto"`` when a GPU is visible."""
    return [AcceleratorRecord("cuda", f"{_PKG}.accelerator:CUDAAccelerator", aliases=("gpu",), priority=10,
                              description="NVIDIA GPUs; devices=N, [i, j], '0,1' or -1 for all visible")]


def _ddp_variants(name: str, target: str, what: str) -> list[StrategyRecord]:
    records = [StrategyRecord(name, target, accelerators=_CUDA, description=what)]
    for flag in (True, False):
        records.append(StrategyRecord(f"{name}_find_unused_parameters_{str(flag).lower()}", target,
                                      accelerators=_CUDA, options={"find_unused_parameters": flag},
                                      description=f"{name} with find_unused_parameters={flag}"))
    return records


@hookimpl
def accelkit_register_strategies() -> list[StrategyRecord]:
    """``single_device``, ``ddp`` (torchrun/SLURM), ``ddp_spawn`` (accelkit starts the processes), and the
    ``*_find_unused_parameters_true/false`` variants of both DDP strategies."""
    return [
        StrategyRecord("single_device", f"{_PKG}.strategies:CUDASingleDeviceStrategy", accelerators=_CUDA,
                       description="one process on one GPU"),
        *_ddp_variants("ddp", f"{_PKG}.strategies:CUDADDPStrategy",
                       "processes started by torchrun or srun, one per GPU, NCCL all-reduce"),
        *_ddp_variants("ddp_spawn", f"{_PKG}.strategies:CUDADDPSpawnStrategy",
                       "one process per GPU started by accelkit, NCCL all-reduce"),
    ]


@hookimpl
def accelkit_register_precisions() -> list[PrecisionRecord]:
    """``32-true``, ``16-mixed`` (float16 autocast + gradient scaler), ``bf16-mixed``, ``bf16-true``,
    ``16-true`` and ``64-true`` on GPUs."""
    return [
        PrecisionRecord("32-true", "accelkit.precision:Precision", aliases=("32",), accelerators=_CUDA,
                        description="float32 weights and computation"),
        PrecisionRecord("16-mixed", "accelkit.precision:MixedPrecision", aliases=("16",), accelerators=_CUDA,
                        options={"dtype": "float16", "scaler": True},
                        description="float16 autocast; a gradient scaler skips steps with inf/NaN gradients"),
        PrecisionRecord("bf16-mixed", f"{_PKG}.precision:CUDABF16MixedPrecision", aliases=("bf16",),
                        accelerators=_CUDA, description="bfloat16 autocast (GPUs of compute capability 8.0+)"),
        PrecisionRecord("bf16-true", f"{_PKG}.precision:CUDABF16TruePrecision", accelerators=_CUDA,
                        description="bfloat16 weights and computation (GPUs of compute capability 8.0+)"),
        PrecisionRecord("16-true", "accelkit.precision:TruePrecision", accelerators=_CUDA,
                        options={"dtype": "float16"}, description="float16 weights and computation"),
        PrecisionRecord("64-true", "accelkit.precision:TruePrecision", aliases=("64",), accelerators=_CUDA,
                        options={"dtype": "float64"}, description="float64 weights and computation"),
    ]


def bf16_problems(precision: str, devices: list[int]) -> list[str] | None:
    """Problems with running ``precision`` on the GPUs ``devices``, judged through NVML without CUDA.

    :return: one sentence per GPU without native bfloat16, ``[]`` when all have it, ``None`` when NVML cannot
        tell (the worker then checks, see :mod:`accelkit_cuda.precision`).
    """
    from accelkit_cuda._nvml import visible_gpus

    gpus = visible_gpus()
    if gpus is None:
        return None
    by_index = {g.index: g for g in gpus}
    problems = []
    for index in devices:
        gpu = by_index.get(index)
        if gpu is None:
            return None  # NVML sees fewer GPUs than CUDA does: do not guess
        if not gpu.native_bf16:
            problems.append(
                f"precision {precision!r} needs native bfloat16 (compute capability 8.0 or newer), but GPU {index} "
                f"({gpu.name}) has compute capability {gpu.capability[0]}.{gpu.capability[1]}; use "
                "precision='16-mixed' (float16 with a gradient scaler) or '32-true'."
            )
    return problems


@hookimpl
def accelkit_validate_config(config: RunConfig) -> list[str] | None:
    """Refuse a bfloat16 precision on GPUs that lack it, before anything starts (CUDA stays uninitialised)."""
    if config.accelerator != "cuda" or config.precision not in _BF16_PRECISIONS:
        return None
    return bf16_problems(config.precision, config.devices)


@hookimpl
def accelkit_environment_variables() -> dict[str, str]:
    """The variables that decide which GPUs a process sees, for ``accelkit doctor``."""
    return {
        "CUDA_VISIBLE_DEVICES": "which GPUs are visible, in what order (indices are relative to this list)",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID makes indices match nvidia-smi",
        "NCCL_*": "NCCL settings for ddp/ddp_spawn on GPUs",
    }


@hookimpl
def accelkit_diagnose(environ: dict[str, str]) -> list[str]:
    """An empty ``CUDA_VISIBLE_DEVICES`` hides every GPU: say so."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None and not value.strip():
        return ["CUDA_VISIBLE_DEVICES is set but empty, which hides every GPU; unset it or list the GPU indices "
                "to use (CUDA_VISIBLE_DEVICES=0,1)."]
    return []
