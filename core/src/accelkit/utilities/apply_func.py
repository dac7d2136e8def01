"""Tensors inside nested data: apply a function to each, move a batch to a device, a batch's size."""

from __future__ import annotations

import copy
import dataclasses
import functools
import operator
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any, TypeVar, cast, overload

import torch

#: the element types of a batch of plain tensors, and a tensor's device, read in C (:func:`move_to_device`)
_TENSORS = {torch.Tensor}
_DEVICE = operator.attrgetter("device")
#: an element's (class, device), read in C (:func:`device_plan`): a plain tensor's is ``(torch.Tensor, its device)``
_CLASS_AND_DEVICE = operator.attrgetter("__class__", "device")


def namedtuple_constructor(value: tuple[object, ...]) -> Callable[..., tuple[object, ...]]:
    """The class of the namedtuple ``value``: its constructor takes one argument per field (mypy sees the one of
    ``tuple``, which takes an iterable)."""
    return cast("Callable[..., tuple[object, ...]]", type(value))


_Data = TypeVar("_Data")


@overload
def apply_to_tensors(data: _Data, fn: Callable[[torch.Tensor], torch.Tensor]) -> _Data: ...
@overload
def apply_to_tensors(data: object, fn: Callable[[torch.Tensor], object]) -> object: ...
def apply_to_tensors(data: object, fn: Callable[[torch.Tensor], object]) -> object:
    """Apply ``fn`` to every tensor inside nested lists, tuples, dicts and dataclass-like namedtuples.

    Everything that is not a tensor (strings, ids, arbitrary objects) passes through untouched, so batches may
    carry metadata alongside tensors: with an ``fn`` that returns tensors, the result has ``data``'s structure and
    type.
    """
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, dict):
        return type(data)((k, apply_to_tensors(v, fn)) for k, v in data.items())
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return namedtuple_constructor(data)(*(apply_to_tensors(v, fn) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(apply_to_tensors(v, fn) for v in data)
    return data


@overload
def move_to_device(batch: torch.Tensor, device: torch.device, non_blocking: bool = False) -> torch.Tensor: ...
@overload
def move_to_device(batch: _Data, device: torch.device, non_blocking: bool = False) -> _Data: ...
def move_to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> object:
    """Move every tensor of ``batch`` (nested dicts, lists, tuples, namedtuples, dataclasses) to ``device``;
    tensors already there are left alone, other objects with a ``.to`` method move themselves, anything else
    passes through. The result has ``batch``'s structure and type."""
    # (the batch's annotation is loose: any object is taken, but this runs per step and tells a batch's kind by
    # ``kind is ...``, which mypy does not follow to ``batch``; ``object`` would need casts on the per-step path)
    kind = type(batch)
    if (kind is tuple or kind is list) and set(map(type, batch)) == _TENSORS:
        # the common batch: plain tensors, their devices read and moved without a Python call per tensor
        devices = set(map(_DEVICE, batch))
        if device not in devices:  # all elsewhere (a host batch for an accelerator)
            return kind(map(operator.methodcaller("to", device, non_blocking=non_blocking), batch))
        if len(devices) == 1:  # all there already
            return batch if kind is tuple else list(batch)
        return kind([item if item.device == device else item.to(device, non_blocking=non_blocking)
                     for item in batch])
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
        return namedtuple_constructor(batch)(*(move_to_device(value, device, non_blocking) for value in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to_device(value, device, non_blocking) for value in batch)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return dataclasses.replace(batch, **{f.name: move_to_device(getattr(batch, f.name), device, non_blocking)
                                             for f in dataclasses.fields(batch) if f.init})
    to = getattr(batch, "to", None)
    if callable(to) and not isinstance(batch, torch.nn.Module):  # a user type that knows how to move itself
        return to(device)
    return batch


def device_plan(batch: object, device: torch.device, non_blocking: bool = False) -> Callable[[object], object]:
    """:func:`move_to_device` for the batches of an epoch, planned from its first ``batch``: where that is a tuple or
    list of plain tensors or a dict of them, all on one device, a batch of the same type whose tensors are all on
    that device (read in C, without a Python call per tensor) is handled as planned (left alone, or each tensor
    moved); any other batch (another type, a tensor elsewhere, an element that is not a plain tensor) takes
    :func:`move_to_device`. Returns the function to call with each batch (``batch`` included), as
    :func:`move_to_device` would be."""
    general = functools.partial(move_to_device, device=device, non_blocking=non_blocking)
    kind = type(batch)
    if kind is not tuple and kind is not list and kind is not dict:
        return general
    try:
        # (``kind`` is dict, tuple or list, tested above: the casts say so to mypy, which does not follow ``kind``)
        seen = set(map(_CLASS_AND_DEVICE, cast("dict[object, object]", batch).values() if kind is dict
                       else cast("Iterable[object]", batch)))
    except AttributeError:  # an element without a device
        return general
    if len(seen) != 1 or next(iter(seen))[0] is not torch.Tensor:
        return general
    planned, move = seen, next(iter(seen))[1] != device
    to = operator.methodcaller("to", device, non_blocking=non_blocking)
    if kind is dict:
        def dict_plan(batch: object) -> object:
            if type(batch) is dict:
                try:
                    if set(map(_CLASS_AND_DEVICE, batch.values())) == planned:
                        return {key: to(value) for key, value in batch.items()} if move else batch.copy()
                except AttributeError:
                    pass
            return general(batch)
        return dict_plan
    # a sequence: as planned when its class is the first's (read as ``_CLASS_AND_DEVICE`` reads its elements') and
    # its elements' classes and devices are all the planned one (an empty one: nothing to move either way)
    covered = planned.issuperset
    if move:
        def sequence_plan(batch: object) -> object:
            if batch.__class__ is kind:
                try:
                    if covered(map(_CLASS_AND_DEVICE, batch)):
                        return kind(map(to, batch))
                except AttributeError:
                    pass
            return general(batch)
        return sequence_plan

    def sequence_stays(batch: object) -> object:
        if batch.__class__ is kind:
            try:
                if covered(map(_CLASS_AND_DEVICE, batch)):
                    return kind(batch)  # (tuple(): the tuple; list(): a copy)
            except AttributeError:
                pass
        return general(batch)
    return sequence_stays


def batch_size_of(batch: object) -> int:
    """Best guess of a batch's size: the first dimension of its first tensor (1 if none)."""
    size = _first_dimension(batch)
    return 1 if size is None else size


def _first_dimension(data: object) -> int | None:
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


def move_data_to_device(batch: object, device: torch.device | str | int) -> object:
    """Lightning's name for :func:`move_to_device`: every tensor of ``batch`` on ``device`` (a ``torch.device``
    or what ``torch.device()`` takes)."""
    return move_to_device(batch, device if isinstance(device, torch.device) else torch.device(device))


def apply_to_collection(data: object, dtype: type | tuple[type, ...], function: Callable[..., object], *args: object,
                        wrong_dtype: type | tuple[type, ...] | None = None, include_none: bool = True,
                        **kwargs: object) -> object:
    """``function(element, *args, **kwargs)`` for every element of type ``dtype`` inside nested mappings,
    namedtuples, dataclasses, lists and tuples (Lightning's ``apply_to_collection``); the containers keep their
    types and everything else passes through.

    :param wrong_dtype: elements of these types are left alone even when they are also ``dtype``.
    :param include_none: keep the entries for which ``function`` returned ``None`` (``False`` drops them from
        mappings and sequences).
    """
    def apply(value: object) -> object:
        return apply_to_collection(value, dtype, function, *args, wrong_dtype=wrong_dtype, include_none=include_none,
                                   **kwargs)

    if isinstance(data, dtype) and (wrong_dtype is None or not isinstance(data, wrong_dtype)):
        return function(data, *args, **kwargs)
    if isinstance(data, Mapping):
        items = [(key, apply(value)) for key, value in data.items()]
        kept = {key: value for key, value in items if include_none or value is not None}
        if isinstance(data, MutableMapping):
            out = copy.copy(data)
            out.clear()
            out.update(kept)
            return out
        return kept
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple: every field stays
        return namedtuple_constructor(data)(*(apply(value) for value in data))
    if isinstance(data, (list, tuple)):
        values = [apply(value) for value in data]
        return type(data)(value for value in values if include_none or value is not None)
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return dataclasses.replace(data, **{f.name: apply(getattr(data, f.name))
                                            for f in dataclasses.fields(data) if f.init})
    return data
