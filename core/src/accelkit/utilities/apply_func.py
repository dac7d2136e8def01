"""Tensors inside nested data: apply a function to each, move a batch to a device, a batch's size."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, MutableMapping
from typing import Any, Callable

import torch


def apply_to_tensors(data: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply ``fn`` to every tensor inside nested lists, tuples, dicts and dataclass-like namedtuples.

    Everything that is not a tensor (strings, ids, arbitrary objects) passes through untouched, so batches may
    carry metadata alongside tensors.
    """
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, dict):
        return type(data)((k, apply_to_tensors(v, fn)) for k, v in data.items())
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(apply_to_tensors(v, fn) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(apply_to_tensors(v, fn) for v in data)
    return data


def move_to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Move every tensor of ``batch`` (nested dicts, lists, tuples, namedtuples, dataclasses) to ``device``;
    tensors already there are left alone, other objects with a ``.to`` method move themselves, anything else
    passes through."""
    kind = type(batch)
    if kind is tuple or kind is list:  # the common batch: plain tensors, per step, often already on the device
        for item in batch:
            if type(item) is not torch.Tensor or item.device != device:
                break
        else:
            return batch if kind is tuple else list(batch)
    if isinstance(batch, torch.Tensor):
        return batch if batch.device == device else batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        moved = {key: move_to_device(value, device, non_blocking) for key, value in batch.items()}
        if isinstance(batch, MutableMapping):  # keep the mapping's type (defaultdict, OrderedDict, UserDict, ...)
            out = copy.copy(batch)
            out.update(moved)
            return out
        return moved
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(move_to_device(value, device, non_blocking) for value in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to_device(value, device, non_blocking) for value in batch)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return dataclasses.replace(batch, **{f.name: move_to_device(getattr(batch, f.name), device, non_blocking)
                                             for f in dataclasses.fields(batch) if f.init})
    to = getattr(batch, "to", None)
    if callable(to) and not isinstance(batch, torch.nn.Module):  # a user type that knows how to move itself
        return to(device)
    return batch


def batch_size_of(batch: Any) -> int:
    """Best guess of a batch's size: the first dimension of its first tensor (1 if none)."""
    size = _first_dimension(batch)
    return 1 if size is None else size


def _first_dimension(data: Any) -> int | None:
    """First dimension of the first tensor with one, in :func:`apply_to_tensors`' order (no copy is built)."""
    if isinstance(data, torch.Tensor):
        return data.shape[0] if data.ndim > 0 else None
    if isinstance(data, dict):
        data = data.values()
    elif not isinstance(data, (list, tuple)):
        return None
    for item in data:
        size = _first_dimension(item)
        if size is not None:
            return size
    return None
