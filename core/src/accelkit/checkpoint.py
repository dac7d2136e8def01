"""Checkpoint files: written atomically, read safely."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from accelkit.utils import apply_to_tensors


def atomic_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` ``obj`` to ``path`` so that ``path`` is either the old file or the complete new one.

    The data goes to a temporary file in the same directory, is flushed to disk, then renamed over ``path``
    (a rename within one file system is atomic). A crash mid-write leaves no half-written checkpoint.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with _suppress():
            os.unlink(tmp_name)
        raise
    return path


def load(path: str | os.PathLike, weights_only: bool = True, map_location: Any = "cpu") -> Any:
    """Load a checkpoint. ``weights_only=True`` (the default) refuses to unpickle arbitrary objects."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    return torch.load(path, map_location=map_location, weights_only=weights_only)


def to_cpu(obj: Any) -> Any:
    """A copy of ``obj`` with every tensor detached and on the CPU (for saving from any device)."""
    return apply_to_tensors(obj, lambda t: t.detach().cpu())


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return True
