"""The core strategies with what GPUs add: page-locked loaders, NCCL barriers on the right GPU, spawn checks.

Each class here is the core class of the same role (:class:`~accelkit.SingleDeviceStrategy`,
:class:`~accelkit.DDPStrategy`, :class:`~accelkit.DDPSpawnStrategy`) plus :class:`CUDAStrategyMixin`. The
DDP classes take DistributedDataParallel's options as keyword arguments, as the core classes do::

    Trainer(accelerator="cuda", devices=2, strategy=CUDADDPSpawnStrategy(find_unused_parameters=True))
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from accelkit.strategy import DDPSpawnStrategy, DDPStrategy, SingleDeviceStrategy


def pinned_dataloader(loader: Any) -> Any:
    """A copy of ``loader`` with ``pin_memory=True``, sharing its dataset, sampler and every other setting.

    Page-locked batches are copied to the GPU asynchronously (``non_blocking=True``) by a background thread
    of the DataLoader. Anything other than a :class:`~torch.utils.data.DataLoader`, and loaders that already
    pin, are returned unchanged. The sampler objects are shared, so ``set_epoch`` on the original's sampler
    still shuffles the copy.
    """
    if not isinstance(loader, DataLoader) or loader.pin_memory:
        return loader
    kwargs: dict[str, Any] = {
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": True,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
        kwargs["persistent_workers"] = loader.persistent_workers
    if hasattr(loader, "in_order"):
        kwargs["in_order"] = loader.in_order
    if isinstance(loader.dataset, IterableDataset):
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_sampler is not None:
        kwargs["batch_sampler"] = loader.batch_sampler
    else:  # batch_size=None: the sampler yields single items and collation is off
        kwargs.update(batch_size=None, sampler=loader.sampler)
    return DataLoader(loader.dataset, **kwargs)


class CUDAStrategyMixin:
    """GPU additions shared by the CUDA strategies.

    :param pin_memory: give DataLoaders that do not pin host memory a pinned copy (default ``True``), so
        batches reach the GPU with asynchronous copies. ``False`` leaves every loader as the user made it.
    """

    def __init__(self, *args: Any, pin_memory: bool = True, **options: Any) -> None:
        if not isinstance(pin_memory, bool):
            raise TypeError(f"pin_memory={pin_memory!r} must be True or False")
        super().__init__(*args, **options)
        self.pin_memory = pin_memory
        self._pinned: dict[int, tuple[Any, Any]] = {}

    def process_dataloader(self, dataloader: Any, stage: str) -> Any:
        """The loader itself, or (with ``pin_memory``) one pinned copy of it, made once and reused each epoch."""
        dataloader = super().process_dataloader(dataloader, stage)  # type: ignore[misc]
        if not self.pin_memory:
            return dataloader
        cached = self._pinned.get(id(dataloader))
        if cached is None or cached[0] is not dataloader:
            cached = (dataloader, pinned_dataloader(dataloader))
            self._pinned[id(dataloader)] = cached
        return cached[1]

    def teardown(self) -> None:
        """Forget the pinned loader copies, then tear down as the core strategy does."""
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
