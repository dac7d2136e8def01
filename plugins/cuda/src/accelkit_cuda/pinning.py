"""Page-locked batches, only when asked for (``pin_memory=True`` on a CUDA strategy).

A DataLoader built with ``pin_memory=True`` page-locks every tensor of every batch in a background thread, so
the copy to the GPU can run asynchronously. That is the user's choice, made on the DataLoader, as in Lightning:
the CUDA strategies leave loaders as they are given. A strategy created with ``pin_memory=True`` instead hands
each unpinned DataLoader to the run as a copy (:func:`pinned_dataloader`) whose pinning step page-locks only the
tensors that can be page-locked, dense CPU tensors, and passes every other tensor (one already on a GPU, say,
which the DataLoader's own pinning would refuse with "cannot pin 'torch.cuda.FloatTensor'") through unchanged,
with a warning that names where they are.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset


def pin_cpu_tensors(batch: Any, skipped: set[str]) -> Any:
    """``batch`` with every dense CPU tensor page-locked, its structure kept.

    Tensors that cannot be page-locked (on another device, or sparse) are returned as they are and described
    in ``skipped`` (``"cuda:0"``, ``"cpu (torch.sparse_coo)"``). Tuples, named tuples, lists and mappings keep
    their type where it can be rebuilt; an object with its own ``pin_memory()`` method is asked to pin itself.
    Needs a CUDA-capable machine for the tensors it does pin.
    """
    if isinstance(batch, torch.Tensor):
        if batch.device.type == "cpu" and batch.layout == torch.strided:
            return batch.pin_memory()
        skipped.add(str(batch.device) if batch.device.type != "cpu" else f"cpu ({batch.layout})")
        return batch
    if isinstance(batch, (str, bytes)):
        return batch
    if isinstance(batch, Mapping):
        items = {key: pin_cpu_tensors(value, skipped) for key, value in batch.items()}
        try:
            if isinstance(batch, MutableMapping):
                clone = copy.copy(batch)
                clone.update(items)
                return clone
            return type(batch)(items)
        except TypeError:
            return items
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple
        return type(batch)(*(pin_cpu_tensors(item, skipped) for item in batch))
    if isinstance(batch, (tuple, list)):
        items = [pin_cpu_tensors(item, skipped) for item in batch]
        try:
            return type(batch)(items)
        except TypeError:
            return items
    if hasattr(batch, "pin_memory"):
        return batch.pin_memory()
    return batch


class PinnableBatch:
    """A collated batch waiting for the DataLoader's pinning step.

    The DataLoader pins an object that is not a tensor or a container by calling its ``pin_memory()``; this
    one answers with the batch itself, its CPU tensors page-locked (see :func:`pin_cpu_tensors`), and warns
    about the tensors it had to leave as they were.
    """

    __slots__ = ("batch",)

    def __init__(self, batch: Any) -> None:
        self.batch = batch

    def pin_memory(self, device: Any = None) -> Any:
        """The batch with its dense CPU tensors page-locked; other tensors unchanged (with a warning)."""
        skipped: set[str] = set()
        pinned = pin_cpu_tensors(self.batch, skipped)
        if skipped:
            warnings.warn(
                f"the strategy was created with pin_memory=True, but the DataLoader yields tensors that cannot be "
                f"page-locked (on {', '.join(sorted(skipped))}); they are used as they are and only CPU tensors "
                "are pinned. Create the strategy with pin_memory=False (the default) to leave the loader alone.",
                UserWarning, stacklevel=2)
        return pinned


class PinCPUTensorsCollate:
    """A DataLoader's ``collate_fn`` whose batches come out as :class:`PinnableBatch` (picklable for workers)."""

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, items: Any) -> PinnableBatch:
        """Collate as the wrapped function does, wrapped for the pinning step."""
        return PinnableBatch(self.collate_fn(items))


def pinned_dataloader(loader: Any) -> Any:
    """A copy of ``loader`` that page-locks the CPU tensors of its batches, sharing every other setting.

    The copy has ``pin_memory=True`` and the loader's ``collate_fn`` wrapped in ``PinCPUTensorsCollate``,
    so tensors already on a GPU pass through instead of failing. Its dataset and sampler objects are the
    original's (``set_epoch`` on the original's sampler still shuffles the copy). Anything other than a
    :class:`~torch.utils.data.DataLoader`, and a loader that already pins, is returned unchanged. The copy
    yields plain batches only where the DataLoader pins, i.e. where CUDA is available.
    """
    if not isinstance(loader, DataLoader) or loader.pin_memory:
        return loader
    kwargs: dict[str, Any] = {
        "num_workers": loader.num_workers,
        "collate_fn": PinCPUTensorsCollate(loader.collate_fn),
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
