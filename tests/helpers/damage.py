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


def record_offset(file: Path, suffix: str) -> tuple[int, int]:
    """``(offset, size)`` of the bytes of the record whose name ends with ``suffix`` in the zip archive ``file``
    (a ``torch.save`` file: records are stored uncompressed)."""
    import struct
    import zipfile

    with zipfile.ZipFile(file) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(suffix))
    with open(file, "rb") as handle:
        handle.seek(info.header_offset + 26)
        name_length, extra_length = struct.unpack("<HH", handle.read(4))
    return info.header_offset + 30 + name_length + extra_length, info.file_size


def flip_record_byte(file: Path, suffix: str, at: int = 0, mask: int = 0x01) -> Path:
    """Flip the bits ``mask`` of byte ``at`` of the record ending with ``suffix`` in the archive ``file``."""
    offset, size = record_offset(file, suffix)
    assert 0 <= at < size, (suffix, at, size)
    data = bytearray(file.read_bytes())
    data[offset + at] ^= mask
    file.write_bytes(bytes(data))
    return file
