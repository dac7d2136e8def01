"""NVIDIA GPUs as an accelkit accelerator."""

from __future__ import annotations

import os
from typing import Any

import torch

from accelkit import Accelerator
from accelkit.accelerator import parse_device_indices
from accelkit.errors import ConfigurationError

#: texts of CUDA runtime errors that mean the device ran out of memory
_OOM_MARKERS = (
    "CUDA out of memory",
    "CUDA error: out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input",
)


def cuda_device_count() -> int:
    """Number of GPUs this process may use, counted without initialising CUDA.

    ``torch.cuda.device_count()`` asks NVML first (which reads ``CUDA_VISIBLE_DEVICES`` and creates no CUDA
    context); only where NVML is missing does it fall back to ``cudaGetDeviceCount``, which loads the driver
    but still leaves ``torch.cuda.is_initialized()`` false. A PyTorch built without CUDA has no GPUs.
    """
    if torch.version.cuda is None or not torch.backends.cuda.is_built():
        return 0
    return max(int(torch.cuda.device_count()), 0)


class CUDAAccelerator(Accelerator):
    """NVIDIA GPUs through CUDA.

    ``devices`` is ``N`` (the first N visible GPUs), a list of indices (``[0, 2]``), a string (``"0,1"``;
    a single number such as ``"2"`` means *two GPUs*, as an int does), or ``-1``/``"auto"`` for every visible
    GPU. Indices count the GPUs that ``CUDA_VISIBLE_DEVICES`` leaves visible, renumbered from 0.
    """

    name = "cuda"
    distributed_backend = "nccl"
    socket_interface_variables = ("NCCL_SOCKET_IFNAME",)  # NCCL's bootstrap and socket transport
    autocast_device_type = "cuda"
    pin_memory = True
    is_graphics_processor = True  # Module.on_gpu
    device_type = "cuda"
    compiled_optimizer_capturable = True  # torch.compile's optimizer step sets capturable=True on CUDA parameters

    # ----------------------------------------------------------------- resolution (parent process)
    @classmethod
    def device_count(cls) -> int:
        """Visible GPUs; never initialises CUDA (see :func:`cuda_device_count`)."""
        return cuda_device_count()

    @classmethod
    def is_available(cls) -> bool:
        """At least one GPU is visible (NVML-based; CUDA stays uninitialised)."""
        return cls.device_count() > 0

    @classmethod
    def unavailable_reason(cls) -> str:
        """Why no GPU can be used: a CPU-only PyTorch, ``CUDA_VISIBLE_DEVICES`` hiding them, or no GPU/driver."""
        if torch.version.cuda is None or not torch.backends.cuda.is_built():
            return (f"this PyTorch ({torch.__version__}) was built without CUDA; install a CUDA build of torch "
                    "(see https://pytorch.org/get-started/locally/)")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and cls.device_count() == 0:
            return (f"CUDA_VISIBLE_DEVICES={visible!r} leaves no GPU visible; unset it or list GPU indices "
                    "such as CUDA_VISIBLE_DEVICES=0,1")
        return ("no NVIDIA GPU was found (NVML and the CUDA driver report none); check `nvidia-smi`, or use "
                "accelerator='cpu'")

    @classmethod
    def parse_devices(cls, devices: Any) -> list[int]:
        """Parse ``devices`` against the visible GPUs; a bad index names the GPUs that do exist."""
        count = cls.device_count()
        try:
            return parse_device_indices(devices, count, cls.name)
        except ConfigurationError as exc:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            note = (f" (CUDA_VISIBLE_DEVICES={visible!r} leaves {count} GPU{'' if count == 1 else 's'} visible, "
                    "numbered from 0 in that order)") if visible is not None else ""
            gpus = _describe_gpus(count)
            raise ConfigurationError([p + note + gpus for p in exc.problems]) from None

    @classmethod
    def auto_strategy(cls, num_devices: int, num_nodes: int) -> str:
        """One GPU: ``single_device``; several on one node: ``ddp_spawn``; several nodes: ``ddp`` (torchrun)."""
        if num_devices * num_nodes == 1:
            return "single_device"
        return "ddp" if num_nodes > 1 else "ddp_spawn"

    # ----------------------------------------------------------------- runtime (worker process)
    def device(self, index: int) -> torch.device:
        """``torch.device("cuda", index)``."""
        return torch.device("cuda", index)

    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` this process's current GPU (the first CUDA call a worker makes)."""
        if device.type != "cuda" or device.index is None:
            raise ValueError(f"{device} is not an indexed CUDA device; expected e.g. torch.device('cuda', 0)")
        torch.cuda.set_device(device)

    def ddp_device_ids(self, device: torch.device) -> list[int]:
        """The ``device_ids`` DistributedDataParallel needs: this process's one GPU."""
        return [device.index]

    def get_device_stats(self, device: torch.device) -> dict[str, float]:
        """The caching allocator's statistics for ``device`` (``torch.cuda.memory_stats``: bytes and counts, e.g.
        ``allocated_bytes.all.current``, ``allocated_bytes.all.peak``, ``reserved_bytes.all.current``), as
        Lightning's CUDA accelerator reports them; nothing before CUDA is used in this process."""
        if not torch.cuda.is_initialized():
            return {}
        return dict(torch.cuda.memory_stats(device))

    def rng_state(self) -> dict[str, Any]:
        """Every visible GPU's generator state under ``"cuda"``, once CUDA is initialised in this process."""
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return {"cuda": torch.cuda.get_rng_state_all()}
        return {}

    def set_rng_state(self, states: dict[str, Any]) -> None:
        """Put back the ``"cuda"`` states if they were saved with as many GPUs as are visible now."""
        saved = states.get("cuda")
        if saved is not None and torch.cuda.is_available() and len(saved) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(saved)

    def configure_determinism(self, deterministic: bool | str | None, benchmark: bool | None) -> None:
        """cuBLAS needs a fixed workspace for deterministic results; ``benchmark`` is cuDNN's autotuner."""
        if deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        if benchmark is not None:
            torch.backends.cudnn.benchmark = benchmark

    def teardown(self) -> None:
        """Return cached blocks to the driver so a following run in this process starts clean."""
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def is_out_of_memory(self, error: BaseException) -> bool:
        """GPU memory ran out: ``torch.cuda.OutOfMemoryError``, or the runtime errors that mean the same thing
        (a failed cuBLAS/cuDNN workspace allocation, cuDNN's "not supported" for a batch too large for it)."""
        if isinstance(error, torch.cuda.OutOfMemoryError):
            return True
        return isinstance(error, RuntimeError) and any(marker in str(error) for marker in _OOM_MARKERS)


def _describe_gpus(count: int) -> str:
    """``"; visible GPUs: 0: NVIDIA A100 (compute capability 8.0), ..."`` from NVML; ``""`` when NVML is silent."""
    from accelkit_cuda._nvml import visible_gpus

    gpus = visible_gpus()
    if gpus:
        return "; visible GPUs: " + ", ".join(f"{g.index}: {g.name} (compute capability "
                                              f"{g.capability[0]}.{g.capability[1]})" for g in gpus)
    return ""
