"""The core strategies with what GPUs add: NCCL barriers on the right GPU, spawn checks, opt-in pinning.

Each class here is the core class of the same role (:class:`~accelkit.SingleDeviceStrategy`,
:class:`~accelkit.DDPStrategy`, :class:`~accelkit.DDPSpawnStrategy`) plus :class:`CUDAStrategyMixin`. The
DDP classes take DistributedDataParallel's options as keyword arguments, as the core classes do::

    Trainer(accelerator="cuda", devices=2, strategy=CUDADDPSpawnStrategy(find_unused_parameters=True))
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader

from accelkit.strategies import DDPSpawnStrategy, DDPStrategy, SingleDeviceStrategy
from accelkit_cuda.pinning import pinned_dataloader


class CUDAStrategyMixin:
    """GPU additions shared by the CUDA strategies.

    :param pin_memory: ``False`` (the default) leaves every DataLoader exactly as you made it: pin host
        memory by building it with ``DataLoader(..., pin_memory=True)``, as in Lightning. ``True`` hands each
        DataLoader that does not pin to the run as a copy that page-locks the CPU tensors of its batches
        (:func:`~accelkit_cuda.pinning.pinned_dataloader`); tensors the loader already puts on a GPU pass
        through, with a warning.
    """

    def __init__(self, *args: Any, pin_memory: bool = False, **options: Any) -> None:
        if not isinstance(pin_memory, bool):
            raise TypeError(f"pin_memory={pin_memory!r} must be True or False")
        super().__init__(*args, **options)
        self.pin_memory = pin_memory
        self._pinned: dict[int, tuple[Any, Any]] = {}

    def process_dataloader(self, dataloader: Any, stage: str) -> Any:
        """The loader as given; with ``pin_memory=True``, one pinning copy of it, made once and reused."""
        dataloader = super().process_dataloader(dataloader, stage)  # type: ignore[misc]
        if not self.pin_memory or not isinstance(dataloader, DataLoader) or dataloader.pin_memory:
            return dataloader
        if not torch.cuda.is_available():
            warnings.warn("the strategy was created with pin_memory=True, but CUDA is not available in this process, "
                          "so nothing can be page-locked; the DataLoader is used as it is.", UserWarning, stacklevel=2)
            return dataloader
        cached = self._pinned.get(id(dataloader))
        if cached is None or cached[0] is not dataloader:
            cached = (dataloader, pinned_dataloader(dataloader))
            self._pinned[id(dataloader)] = cached
        return cached[1]

    def teardown(self) -> None:
        """Forget the pinning loader copies, then tear down as the core strategy does."""
        self._pinned.clear()
        super().teardown()  # type: ignore[misc]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pinned"] = {}  # loaders stay in the process that made them
        return state


class CUDASingleDeviceStrategy(CUDAStrategyMixin, SingleDeviceStrategy):
    """One process on one GPU."""


class _NCCLBarrierMixin:
    """NCCL barriers on this process's GPU.

    Without ``device_ids`` an NCCL barrier guesses the GPU from the rank, which is wrong when the run uses
    GPUs ``[1, 2]`` and can hang. Passing this process's GPU makes the barrier run where the process works.
    """

    def barrier(self, name: str | None = None) -> None:
        """Wait until every process gets here."""
        if not dist.is_initialized():
            return
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[self.root_device.index])  # type: ignore[attr-defined]
        else:
            dist.barrier()


class CUDADDPStrategy(CUDAStrategyMixin, _NCCLBarrierMixin, DDPStrategy):
    """DistributedDataParallel over NCCL for processes a launcher started (``torchrun``, SLURM's ``srun``).

    Each process takes GPU ``LOCAL_RANK`` of the node's ``devices``. Keyword options other than
    ``pin_memory`` and ``timeout_s`` go to :class:`torch.nn.parallel.DistributedDataParallel`
    (``find_unused_parameters``, ``static_graph``, ``gradient_as_bucket_view``, ``broadcast_buffers``,
    ``bucket_cap_mb``).
    """


class CUDADDPSpawnStrategy(CUDAStrategyMixin, _NCCLBarrierMixin, DDPSpawnStrategy):
    """DistributedDataParallel over NCCL with one process per GPU, started by accelkit (``spawn``).

    The parent never initialises CUDA; each worker's first CUDA call is ``torch.cuda.set_device`` for its
    own GPU. The model handed to ``fit`` must therefore still be on the CPU: its weights are pickled into
    every worker, and CUDA tensors there would all land on one GPU.
    """

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Refuse a model already on a GPU, then start one worker per GPU (see the core class)."""
        for value in (*args, *kwargs.values()):
            if isinstance(value, nn.Module):
                on_gpu = [n for n, t in (*value.named_parameters(), *value.named_buffers()) if t.is_cuda]
                if on_gpu:
                    raise ValueError(
                        f"strategy {self.name or 'ddp_spawn'!r} starts one process per GPU and sends the model to "
                        f"each, but {type(value).__name__} is already on a GPU (e.g. {on_gpu[0]!r} is on "
                        f"{_device_of(value, on_gpu[0])}); leave it on the CPU (call .cpu() before fit) and "
                        "accelkit moves it to each worker's GPU."
                    )
        return super().launch(function, *args, **kwargs)


def _device_of(module: nn.Module, name: str) -> torch.device:
    tensors = dict(module.named_parameters())
    tensors.update(dict(module.named_buffers()))
    return tensors[name].device
