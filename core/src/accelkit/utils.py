"""Small helpers shared by the core and plugins."""

from __future__ import annotations

import os
import random
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
    """Move every tensor of ``batch`` to ``device``; other objects pass through."""
    return apply_to_tensors(batch, lambda t: t.to(device, non_blocking=non_blocking))


def seed_everything(seed: int) -> int:
    """Seed Python, NumPy (if installed) and torch; sets ``ACCELKIT_SEED`` so spawned workers inherit it."""
    os.environ["ACCELKIT_SEED"] = str(seed)
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
    found: list[int] = []

    def visit(t: torch.Tensor) -> torch.Tensor:
        if not found and t.ndim > 0:
            found.append(t.shape[0])
        return t

    apply_to_tensors(batch, visit)
    return found[0] if found else 1
