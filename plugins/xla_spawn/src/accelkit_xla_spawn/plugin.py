"""Entry point of accelkit-xla-spawn: the records it registers and the ``tpu_cores=`` translation.

Importing this module is cheap: it imports neither torch_xla nor the strategy module.
"""

from __future__ import annotations

import sys
from typing import Any

from accelkit import hookimpl
from accelkit.records import AcceleratorRecord, ClusterEnvironmentRecord, PrecisionRecord, StrategyRecord

ACCELKIT_API = ">=1.0,<2"

_XLA = ("xla",)


@hookimpl
def accelkit_register_accelerators() -> list[AcceleratorRecord]:
    """The ``xla`` accelerator (alias ``tpu``)."""
    return [AcceleratorRecord("xla", "accelkit_xla_spawn.accelerator:XLAAccelerator", aliases=("tpu",), priority=20,
                              description="TPU cores (or PJRT_DEVICE=CPU) through torch_xla")]


@hookimpl
def accelkit_register_strategies() -> list[StrategyRecord]:
    """``xla_spawn`` (aliases ``xla``, ``tpu_spawn``) and ``xla_single``."""
    return [
        StrategyRecord("xla_spawn", "accelkit_xla_spawn.strategy:XLASpawnStrategy", aliases=("xla", "tpu_spawn"),
                       accelerators=_XLA, description="one replica per local core (torch_xla.launch, PJRT)"),
        StrategyRecord("xla_single", "accelkit_xla_spawn.strategy:XLASingleStrategy", accelerators=_XLA,
                       description="one XLA core in this process"),
    ]


@hookimpl
def accelkit_register_precisions() -> list[PrecisionRecord]:
    """Full precision on XLA (other precisions come from other plugins)."""
    return [PrecisionRecord("32-true", "accelkit.precision:Precision", aliases=("32",), accelerators=_XLA)]


@hookimpl
def accelkit_register_cluster_environments() -> list[ClusterEnvironmentRecord]:
    """The TPU pod view (one process per host). Lowest priority: torchrun started on a TPU VM wins over it."""
    return [ClusterEnvironmentRecord("tpu_pod", "accelkit_xla_spawn.environments:TPUPodEnvironment", priority=5,
                                     description="a Cloud TPU pod host (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES)")]


def translate_tpu_cores(value: Any) -> Any:
    """The ``devices`` value that the legacy ``tpu_cores`` value means.

    ``tpu_cores=N`` is ``devices=N``; ``tpu_cores=[k]`` named the 1-based core ID in the old Lightning guides,
    so it becomes ``devices=[k - 1]``.
    """
    if isinstance(value, (list, tuple)):
        if len(value) != 1 or not isinstance(value[0], int) or isinstance(value[0], bool) or value[0] < 1:
            raise ValueError(f"tpu_cores={value!r}: a list names one 1-based core ID such as [1]..[8]; "
                             "use devices=[k] (0-based) instead.")
        return [value[0] - 1]
    if isinstance(value, str) and value.strip().startswith("["):
        return translate_tpu_cores([int(v) for v in value.strip()[1:-1].split(",") if v.strip()])
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"tpu_cores={value!r} is not understood; use devices=N or devices=[k] with accelerator='tpu'.")


@hookimpl
def accelkit_translate_arguments(arguments: dict[str, Any]) -> None:
    """Turn ``tpu_cores=`` into ``accelerator="tpu"`` plus ``devices=``, with a one-line deprecation note."""
    extra = arguments["extra"]
    if "tpu_cores" not in extra:
        return
    value = extra.pop("tpu_cores")
    if value is None:
        return
    devices = translate_tpu_cores(value)
    if arguments.get("devices") not in ("auto", None, devices):
        raise ValueError(f"tpu_cores={value!r} and devices={arguments['devices']!r} were both given; "
                         "keep only devices.")
    accelerator = arguments.get("accelerator")
    if isinstance(accelerator, str) and accelerator.strip().lower() not in ("auto", "tpu", "xla"):
        raise ValueError(f"tpu_cores={value!r} asks for TPU cores but accelerator={accelerator!r}; drop tpu_cores "
                         f"(and use devices=) or use accelerator='tpu'.")
    arguments["devices"] = devices
    if accelerator in ("auto", None):
        arguments["accelerator"] = "tpu"
    print(f"accelkit: tpu_cores={value!r} is deprecated; use accelerator='tpu', devices={devices!r}"
          + (" (devices counts cores from 0)." if isinstance(devices, list) else "."), file=sys.stderr)


@hookimpl
def accelkit_environment_variables() -> dict[str, str]:
    """The variables torch_xla's PJRT runtime reads, and the legacy XRT one, for ``accelkit doctor``."""
    return {
        "PJRT_DEVICE": "the XLA device: TPU on a Cloud TPU VM, CPU to run XLA on the host, CUDA for GPUs",
        "CPU_NUM_DEVICES": "with PJRT_DEVICE=CPU: how many XLA CPU devices (replicas) there are",
        "TPU_ACCELERATOR_TYPE": "the TPU type of this VM (v4-8, v5litepod-16 ...), set by Cloud TPU",
        "XRT_TPU_CONFIG": "legacy: the retired XRT runtime's setting; torch_xla 2.x ignores it",
        "XLA_USE_BF16": "legacy bfloat16 switch; accelkit sets it only for precision='bf16-legacy'",
        "PT_XLA_DEBUG_LEVEL": "torch_xla debug output (xla_spawn_debug sets it before the runtime starts)",
    }


@hookimpl
def accelkit_diagnose(environ: dict[str, str]) -> list[str]:
    """Flag the Lightning-era TPU setup: XRT_TPU_CONFIG without PJRT_DEVICE, or a PJRT_DEVICE typo."""
    problems = []
    device = environ.get("PJRT_DEVICE")
    if environ.get("XRT_TPU_CONFIG") and not device:
        problems.append("XRT_TPU_CONFIG is set but PJRT_DEVICE is not: the XRT runtime was removed in torch_xla "
                        "2.x, so the TPU will not be found. Unset XRT_TPU_CONFIG and set PJRT_DEVICE=TPU.")
    if device is not None and device.strip().upper() not in ("TPU", "CPU", "CUDA", "GPU", "NEURON"):
        problems.append(f"PJRT_DEVICE={device!r} is not a PJRT device; use TPU (Cloud TPU VM), CPU or CUDA.")
    return problems
