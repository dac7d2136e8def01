"""Reading :mod:`torch.distributed.checkpoint` (DCP) directories without running code from them, and with every
damaged file named.

DCP's own reader unpickles the index (``.metadata``) with :func:`pickle.load` and the non-tensor entries with
``torch.load(weights_only=False)``: a crafted checkpoint runs code on load. Here the index is read admitting only
DCP's metadata types (:data:`DCP_METADATA_GLOBALS`), the non-tensor entries with the weights-only unpickler (unless
the caller asked for ``weights_only=False``), and a refusal is the single-file path's
:class:`~accelkit.checkpoint.files.UnsafeCheckpointError`. A file that cannot be read (an empty or truncated index,
a shard with damaged bytes, a missing shard) is a :class:`~accelkit.checkpoint.files.CheckpointError` naming it.

DCP wraps every failure on any process into ``CheckpointException``, a ``BaseException`` that ordinary
``except Exception`` handlers miss; :func:`unwrap_failure` gives back the real error.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import IO, TYPE_CHECKING

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, _EmptyStateDictLoadPlanner
from torch.distributed.checkpoint.metadata import STATE_DICT_TYPE, Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, ReadItem

from accelkit.checkpoint import files as ckpt

if TYPE_CHECKING:
    from torch.distributed.checkpoint._nested_dict import FLATTEN_MAPPING
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.futures import Future

#: DCP's index file in a sharded checkpoint directory (a pickle, read only through :func:`read_dcp_metadata`)
DCP_METADATA_FILE = ".metadata"
#: the ``(module, name)`` globals a genuine DCP index may name (besides torch's dtypes): DCP's metadata dataclasses
#: and enum, its file-slice record, ``torch.Size``, torch's layout lookup and the path classes of
#: ``checkpoint_id``; :func:`read_dcp_metadata` refuses any other
DCP_METADATA_GLOBALS = frozenset({
    *(("torch.distributed.checkpoint.metadata", name) for name in (
        "Metadata", "MetadataIndex", "StorageMeta", "TensorStorageMetadata", "BytesStorageMetadata",
        "ChunkStorageMetadata", "TensorProperties", "_MEM_FORMAT_ENCODING")),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"), ("torch.serialization", "_get_layout"), ("collections", "OrderedDict"),
    *(("pathlib", name) for name in ("Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath",
                                     "PureWindowsPath")),
})

_ELSE = "Use another checkpoint, or start without ckpt_path."


class _IndexUnpickler(pickle.Unpickler):
    """Unpickles DCP's index admitting only :data:`DCP_METADATA_GLOBALS` and torch's dtypes."""

    def __init__(self, handle: IO[bytes], name: str) -> None:
        super().__init__(handle)
        self.name = name

    def find_class(self, module: str, name: str) -> object:
        if (module, name) in DCP_METADATA_GLOBALS:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise ckpt.unsafe_checkpoint_error(self.name, f"Unsupported global: GLOBAL {module}.{name}")


def read_dcp_metadata(path: str | os.PathLike) -> Metadata:
    """DCP's index (:class:`~torch.distributed.checkpoint.metadata.Metadata`) of the checkpoint directory ``path``,
    unpickled admitting only DCP's metadata types: nothing in the file runs.

    :raises ~accelkit.checkpoint.files.UnsafeCheckpointError: the index names any other Python object (refused as
        the single-file path does).
    :raises ~accelkit.checkpoint.files.CheckpointError: the index is missing, empty, truncated or not DCP's: the
        checkpoint is damaged.
    """
    file = Path(path) / DCP_METADATA_FILE
    name = repr(str(file))
    damaged = f"sharded checkpoint {str(path)!r} is damaged: its index {name} "
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ckpt.CheckpointError(damaged + f"cannot be read ({exc.strerror or exc}). {_ELSE}") from exc
    if not data:
        raise ckpt.CheckpointError(damaged + f"is empty (0 bytes). {_ELSE}")
    try:
        metadata = _IndexUnpickler(io.BytesIO(data), name).load()
    except ckpt.UnsafeCheckpointError:
        raise
    except Exception as exc:  # truncated or garbled bytes: pickle raises many kinds
        raise ckpt.CheckpointError(damaged + f"cannot be read ({len(data)} bytes; {type(exc).__name__}: {exc}). "
                                   f"{_ELSE}") from exc
    if not isinstance(metadata, Metadata):
        raise ckpt.CheckpointError(damaged + f"holds a {type(metadata).__name__}, not DCP's Metadata. {_ELSE}")
    return metadata


class SafeReader(FileSystemReader):
    """DCP's file-system reader with the index read by :func:`read_dcp_metadata` (once, before DCP starts: DCP
    swallows an error of ``read_metadata`` and fails later on an assertion) and any failure to read a shard
    turned into a :class:`~accelkit.checkpoint.files.CheckpointError` naming the shard file."""

    def __init__(self, path: str | os.PathLike, checksums: dict[str, int] | None = None) -> None:
        super().__init__(Path(path))
        self.checkpoint = str(path)
        self.checksums = dict(checksums or {})
        self.checked: set[str] = set()
        self.metadata = read_dcp_metadata(path)  # first: an empty or truncated index says so
        self.check(DCP_METADATA_FILE, "index")
        self.reading: str | None = None

    def check(self, name: str, what: str = "shard") -> None:
        """Compare file ``name`` with its CRC-32 saved in the checkpoint (once; files without one pass)."""
        if name in self.checked or name not in self.checksums:
            return
        file = Path(self.checkpoint) / name
        try:
            actual = ckpt.crc32_of(file)
        except OSError as exc:
            raise ckpt.CheckpointError(f"sharded checkpoint {self.checkpoint!r} is damaged: its {what} "
                                       f"{str(file)!r} cannot be read ({exc.strerror or exc}). {_ELSE}") from exc
        if actual != self.checksums[name]:
            raise ckpt.CheckpointError(
                f"sharded checkpoint {self.checkpoint!r} is damaged: its {what} {str(file)!r} ({file.stat().st_size} "
                f"bytes) does not match the checksum saved with it (its bytes changed after saving). {_ELSE}")
        self.checked.add(name)

    def read_metadata(self, *args: object, **kwargs: object) -> Metadata:
        """The index read at construction (accelkit writes no per-rank index: asked for one, there is none)."""
        if kwargs.get("rank") is not None:
            raise FileNotFoundError(f"{self.checkpoint!r} has no per-rank index")
        storage_meta = getattr(self.metadata, "storage_meta", None)
        if storage_meta is None:
            storage_meta = self.metadata.storage_meta = StorageMeta()
        storage_meta.load_id = self.load_id
        return self.metadata

    def _slice_file(self, file: object, sinfo: _StorageInfo) -> IO[bytes]:
        self.reading = sinfo.relative_path
        return super()._slice_file(file, sinfo)

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """DCP's read, with a failure naming the shard file it came from."""
        for item in plan.items:
            self.check(self.storage_data[item.storage_index].relative_path)
        try:
            return super().read_data(plan, planner)
        except ckpt.CheckpointError:
            raise
        except Exception as exc:
            shard = getattr(exc, "filename", None) or str(Path(self.checkpoint) / (self.reading or "?"))
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            telling = [line for line in lines if line.startswith(("Unsupported", "Can only"))]  # the unpickler's
            text = (telling or lines or [""])[0][:200]
            raise ckpt.CheckpointError(
                f"sharded checkpoint {self.checkpoint!r} is damaged: its shard {str(shard)!r} cannot be read "
                f"({type(exc).__name__}: {text}). {_ELSE}") from exc


class _SafeBytes:
    """``load_bytes`` of a DCP load planner through the weights-only unpickler (DCP's own uses
    ``weights_only=False``): set ``weights_only`` and ``checkpoint`` (the directory) on the instance."""

    weights_only = True
    checkpoint = "?"
    flatten_state_dict: bool
    mappings: FLATTEN_MAPPING
    original_state_dict: STATE_DICT_TYPE
    state_dict: STATE_DICT_TYPE

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        try:
            obj = torch.load(value, weights_only=self.weights_only)
        except pickle.UnpicklingError as exc:
            if not self.weights_only or not ckpt.refused_object(exc):
                raise  # garbled bytes: the reader names the damaged shard
            raise ckpt.unsafe_checkpoint_error(repr(self.checkpoint), exc) from exc
        fqn = read_item.dest_index.fqn
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj


class SafeLoadPlanner(_SafeBytes, DefaultLoadPlanner):
    """DCP's default load planner (fills a template) reading non-tensor entries safely."""

    def __init__(self, checkpoint: str | os.PathLike, weights_only: bool = True) -> None:
        super().__init__()
        self.checkpoint, self.weights_only = str(checkpoint), weights_only


class SafeEverythingPlanner(_SafeBytes, _EmptyStateDictLoadPlanner):
    """DCP's planner that reads every entry of a checkpoint (no template), reading non-tensor entries safely."""

    def __init__(self, checkpoint: str | os.PathLike, weights_only: bool = True) -> None:
        super().__init__()
        self.checkpoint, self.weights_only = str(checkpoint), weights_only


def unwrap_failure(exc: CheckpointException) -> BaseException:
    """The error a ``CheckpointException`` carries: an accelkit checkpoint error of any process if there is one
    (the damaged file, the refused object), else the first process's (``OSError: No space left on device``)."""
    failures = [failure[0] if isinstance(failure, tuple) else failure
                for _, failure in sorted(exc.failures.items())]
    failures = [f for f in failures if isinstance(f, BaseException)]
    ours = [f for f in failures if isinstance(f, ckpt.CheckpointError)]
    return (ours or failures or [exc])[0]
