"""Damaged and malicious sharded checkpoints, made from genuine ones (the checkpoint and fsdp tests share them)."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path


class RunsCommand:
    """Unpickling this runs ``touch <marker>`` through ``os.system``: what an attacker would plant."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return os.system, (f"touch {self.marker}",)


def copy_checkpoint(source: Path, target: Path) -> Path:
    """A copy of the sharded checkpoint directory ``source`` at ``target`` (to damage it there)."""
    shutil.copytree(source, target, symlinks=False)
    return target


def plant_malicious_index(directory: Path, marker: Path) -> Path:
    """Replace the DCP index (``.metadata``) of ``directory`` with a pickle that would create ``marker``."""
    (directory / ".metadata").write_bytes(pickle.dumps(RunsCommand(marker)))
    return directory


def truncate(file: Path, keep: int) -> Path:
    """Keep the first ``keep`` bytes of ``file``."""
    data = file.read_bytes()
    file.write_bytes(data[:keep])
    return file


def flip_bytes(file: Path, start: int, count: int = 64) -> Path:
    """Invert ``count`` bytes of ``file`` from offset ``start``."""
    data = bytearray(file.read_bytes())
    for i in range(start, min(start + count, len(data))):
        data[i] ^= 0xFF
    file.write_bytes(bytes(data))
    return file
