"""Small helpers shared by the core and plugins."""

from __future__ import annotations

import copy
import dataclasses
import os
import random
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


def seed_everything(seed: int | None = None, workers: bool = False) -> int:
    """Seed Python, NumPy (if installed) and torch; sets ``ACCELKIT_SEED`` so spawned workers inherit it.

    :param seed: the seed (``None``: ``ACCELKIT_SEED`` from the environment, else 0).
    :param workers: also seed every DataLoader worker process differently but reproducibly (sets
        ``ACCELKIT_SEED_WORKERS=1``; the Trainer gives loaders without a ``worker_init_fn`` one that derives
        each worker's seed from the base seed, the worker id and the rank).
    """
    if seed is None:
        raw = os.environ.get("ACCELKIT_SEED", "0")
        try:
            seed = int(raw)
        except ValueError:
            raise ValueError(f"ACCELKIT_SEED={raw!r} is not an integer seed") from None
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed_everything(seed={seed!r}) needs an int")
    os.environ["ACCELKIT_SEED"] = str(seed)
    os.environ["ACCELKIT_SEED_WORKERS"] = "1" if workers else "0"
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover - numpy ships with torch wheels
        pass
    torch.manual_seed(seed)
    return seed


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


def worker_init_function(worker_id: int, rank: int | None = None) -> None:
    """Seed a DataLoader worker (torch, NumPy, Python) from torch's seed for it, its id and the process rank.

    torch gives each worker ``base + worker_id`` where ``base`` is drawn anew from the main process's generator
    every epoch, so the seeds differ per epoch, per worker and per rank, and repeat when the run is repeated
    with the same ``seed_everything`` seed.
    """
    rank = rank_zero_only.rank if rank is None else rank
    base = torch.initial_seed() - worker_id
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy ships with torch wheels
        seed = hash((base, worker_id, rank)) % 2**32
        torch.manual_seed(seed)
        random.seed(seed)
        return
    torch_seed, python_seed, numpy_seed = np.random.SeedSequence([base, worker_id, rank]).generate_state(3)
    torch.manual_seed(int(torch_seed))
    random.seed(int(python_seed))
    np.random.seed(int(numpy_seed))


def rank_zero_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: call ``fn`` only in the global-zero process (``None`` elsewhere).

    The rank is ``rank_zero_only.rank``, which the Trainer sets in every worker; outside a run it comes from
    the launcher's ``RANK`` (or ``SLURM_PROCID``) variable, 0 when neither is set.
    """
    import functools

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if rank_zero_only.rank == 0:
            return fn(*args, **kwargs)
        return None

    return wrapped


def _rank_from_env() -> int:
    for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        raw = os.environ.get(name)
        if raw is not None and raw.strip().isdigit():
            return int(raw)
    return 0


rank_zero_only.rank = _rank_from_env()  # type: ignore[attr-defined]
