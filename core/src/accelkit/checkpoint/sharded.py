"""Sharded checkpoints: a directory that every process writes its shards into, loadable at any world size.

A sharded checkpoint is a directory holding a :mod:`torch.distributed.checkpoint` (DCP) checkpoint of the tensor
state (``"state_dict"`` and ``"optimizer_states"``) and a small file, :data:`METADATA_FILE`, with everything else
the Trainer saves (epoch, global step, loops, callbacks, hyper-parameters, precision, schedulers), written by global
zero. That file is what tells a sharded checkpoint directory apart from any other directory.

Saving is atomic: every process writes into a hidden temporary directory next to the target, and after a barrier
global zero renames it into place, so the target is either complete or absent (or the previous checkpoint).

Loading reshards: DCP reads, on each process, the pieces of every tensor that process now owns, whatever the world
size at saving time. :func:`load_full` reads a whole checkpoint into one process without a process group (a plain
unsharded module), and :func:`consolidate` writes it as one ordinary checkpoint file that
``torch.load(path, weights_only=True)`` reads. Reading runs nothing from the checkpoint and names a damaged file
(:mod:`accelkit.checkpoint.dcp_reading`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from accelkit.checkpoint import files as ckpt

if TYPE_CHECKING:
    from torch.distributed.checkpoint.metadata import STATE_DICT_TYPE
    from torch.optim.optimizer import StateDict

    from accelkit.checkpoint.dcp_reading import SafeReader

#: the file (written last, by global zero) holding a sharded checkpoint's non-tensor parts; its presence marks
#: a directory as an accelkit sharded checkpoint
METADATA_FILE = "accelkit_checkpoint.pt"
#: the key, in :data:`METADATA_FILE`, of the number of optimizer states stored in the DCP part
OPTIMIZER_COUNT_KEY = "accelkit_num_optimizer_states"
#: the key, in :data:`METADATA_FILE`, naming the format
FORMAT_KEY = "accelkit_checkpoint_format"
#: the key, in :data:`METADATA_FILE`, of the CRC-32 of every other file of the directory (:func:`file_checksums`),
#: checked as each file is read: flipped bytes inside a tensor's data are otherwise read without complaint
CHECKSUMS_KEY = "accelkit_file_checksums"
#: the key, in :data:`METADATA_FILE`, listing the entries stored through DCP when they are not the Trainer's
#: (a Fabric checkpoint's modules and optimizers, by their names)
SHARDED_KEYS_KEY = "accelkit_sharded_keys"
#: the checkpoint entries stored through DCP (sharded); everything else goes to :data:`METADATA_FILE`
SHARDED_KEYS = ("state_dict", "optimizer_states")


@dataclass(frozen=True)
class DeferredState:
    """Stands for optimizer ``index``'s state in the sharded checkpoint at ``path``, read once the optimizer
    exists (a sharded optimizer state is read into a template built from the live optimizer); ``weights_only``
    as the load that deferred it."""

    path: str
    index: int
    weights_only: bool = True


def is_sharded_checkpoint(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a complete sharded checkpoint directory (its metadata file and DCP's are there)."""
    path = Path(path)
    return path.is_dir() and (path / METADATA_FILE).is_file() and (path / ".metadata").is_file()


_PARTS = {METADATA_FILE: "the non-tensor part: epoch, step, callbacks; written last",
          ".metadata": "DCP's index of the shards"}


def check_complete(path: str | os.PathLike) -> None:
    """Refuse, naming the missing file, a folder holding part of a sharded checkpoint: one of
    :data:`METADATA_FILE` and DCP's ``.metadata`` without the other, or shard files (``*.distcp``) without either.
    Anything else (a complete sharded checkpoint, a file, another folder) passes.

    :raises ~accelkit.checkpoint.files.CheckpointError: the message names the missing file.
    """
    path = Path(path)
    if not path.is_dir():
        return
    present = [name for name in _PARTS if (path / name).is_file()]
    if len(present) == len(_PARTS) or not present and not any(path.glob("*.distcp")):
        return
    missing = [name for name in _PARTS if name not in present]
    shown = " and ".join(f"{str(path / name)!r} ({_PARTS[name]})" for name in missing)
    raise ckpt.CheckpointError(
        f"sharded checkpoint {str(path)!r} is incomplete: {shown} {'is' if len(missing) == 1 else 'are'} missing "
        "(deleted, or not copied with the rest of the folder), so it cannot be loaded. Copy the whole folder "
        "again, or use another checkpoint.")


def _no_op(*args: object, **kwargs: object) -> object:
    return args[0] if args else None


def save(checkpoint: dict[str, Any], path: str | os.PathLike, barrier: Callable[[str], object] = _no_op,
         broadcast: Callable[[str | None], object] = _no_op, is_global_zero: bool = True,
         sharded_keys: list[str] | None = None) -> Path:
    """Write ``checkpoint`` as a sharded directory at ``path`` (every process calls this, with its shards).

    ``checkpoint["state_dict"]`` and ``checkpoint["optimizer_states"]`` (a list) go through DCP: each process writes
    the shards it holds (DTensors), replicated tensors are written once. The rest is written by global zero into
    :data:`METADATA_FILE`. The directory appears at ``path`` only when complete; a save that fails removes its
    temporary directory, and one that was killed leaves only a hidden ``.accelkit-<hash>.tmp-*`` directory
    (:func:`hidden_sibling`), removed by the next save of the same name.

    :param barrier: the strategy's ``barrier``; :param broadcast: its ``broadcast`` (the temporary name is agreed
        on); both no-ops for one process.
    :param sharded_keys: the entries to write through DCP instead of the Trainer's two (a Fabric's state: every
        entry holding a module's or an optimizer's state); they are listed in :data:`METADATA_FILE`
        (:data:`SHARDED_KEYS_KEY`), and :func:`load_full` gives them back under their names.
    """
    import torch.distributed.checkpoint as dcp

    target = Path(path).absolute()
    token = broadcast(secrets.token_hex(4) if is_global_zero else None)
    temporary = hidden_sibling(target, f"tmp-{token}")
    if is_global_zero:
        target.parent.mkdir(parents=True, exist_ok=True)
        for stale in target.parent.glob(hidden_sibling(target, "tmp-*").name):  # left by a killed save
            shutil.rmtree(stale, ignore_errors=True)
        temporary.mkdir()
    barrier("sharded_checkpoint_start")
    tensors, metadata = split(checkpoint, sharded_keys)
    try:
        with _write_error(target, temporary), _real_failure():
            dcp.save(tensors, checkpoint_id=temporary)
        if is_global_zero:  # every process has written its files (DCP's save ends with a collective)
            metadata[CHECKSUMS_KEY] = file_checksums(temporary)
            ckpt.atomic_save(ckpt.to_cpu(metadata), temporary / METADATA_FILE)
    except BaseException:
        if is_global_zero:
            shutil.rmtree(temporary, ignore_errors=True)
        raise
    barrier("sharded_checkpoint_written")
    if is_global_zero:
        _replace(temporary, target)
    barrier("sharded_checkpoint_renamed")
    return target


@contextlib.contextmanager
def _write_error(target: Path, temporary: Path) -> Iterator[None]:
    """A failed write of the shards (disk full, quota, permissions) as an OSError naming the checkpoint, the
    cause and what is kept; torch's writer may hide the OS error in a RuntimeError: a probe write finds it."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        code = exc.errno if isinstance(exc, OSError) and exc.errno else None
        if code is None:
            code = ckpt.probe_write_error(temporary / f".probe-{secrets.token_hex(4)}")
        if code is None:
            raise
        cause = os.strerror(code) + (f" ({exc.filename})" if isinstance(exc, OSError) and exc.filename else "")
        raise OSError(code, f"could not write sharded checkpoint {str(target)!r}: {cause}. The previous "
                      "checkpoint at that path, if any, is unchanged; free space or choose another folder "
                      "(default_root_dir or ModelCheckpoint(dirpath=...)).") from exc


def file_checksums(folder: str | os.PathLike) -> dict[str, int]:
    """The CRC-32 of every file in ``folder`` (DCP's index and shards), by name."""
    checksums = {}
    for file in sorted(Path(folder).iterdir()):
        if file.is_file() and file.name != METADATA_FILE:
            checksums[file.name] = ckpt.crc32_of(file)
    return checksums


def split(checkpoint: dict[str, Any], sharded_keys: list[str] | None = None,
          ) -> tuple[STATE_DICT_TYPE, dict[str, object]]:
    """``(tensor part for DCP, everything else)`` of a Trainer checkpoint, or of any checkpoint whose
    ``sharded_keys`` entries are the sharded ones."""
    if sharded_keys is not None:
        named = {k: checkpoint[k] for k in sharded_keys}
        rest = {k: v for k, v in checkpoint.items() if k not in named}
        rest[SHARDED_KEYS_KEY] = list(sharded_keys)
        rest[FORMAT_KEY] = 1
        return named, rest
    optimizers = list(checkpoint.get("optimizer_states") or [])
    tensors: STATE_DICT_TYPE = {"state_dict": checkpoint.get("state_dict", {})}
    if optimizers:
        tensors["optimizer_states"] = {str(i): state for i, state in enumerate(optimizers)}
    metadata = {k: v for k, v in checkpoint.items() if k not in SHARDED_KEYS}
    metadata[OPTIMIZER_COUNT_KEY] = len(optimizers) if "optimizer_states" in checkpoint else -1
    metadata[FORMAT_KEY] = 1
    return tensors, metadata


def _replace(temporary: Path, target: Path) -> None:
    """Rename ``temporary`` to ``target``; an existing ``target`` (file, link or directory) is moved aside first
    and removed after."""
    if not os.path.lexists(target):
        os.rename(temporary, target)
        return
    aside = hidden_sibling(target, f"old-{secrets.token_hex(4)}")
    os.rename(target, aside)
    os.rename(temporary, target)
    remove(aside)


def hidden_sibling(target: Path, tag: str) -> Path:
    """A short hidden name beside ``target`` for its temporary (``tag="tmp-<token>"``) or set-aside copy:
    ``.accelkit-<8 hex digits of target's name>.<tag>``, so a target name near the 255-byte limit still has one,
    and the stale temporaries of one target are found by a glob (``tag="tmp-*"``)."""
    digest = hashlib.sha1(target.name.encode(), usedforsecurity=False).hexdigest()[:8]
    return target.parent / f".accelkit-{digest}.{tag}"


def remove(path: str | os.PathLike) -> None:
    """Remove a checkpoint: a file, a symbolic link, or a sharded directory."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def load_metadata(path: str | os.PathLike, weights_only: bool = True) -> dict[str, Any]:
    """The non-tensor parts of the sharded checkpoint at ``path`` (epoch, global step, callbacks, ...)."""
    check_complete(path)
    if not is_sharded_checkpoint(path):
        raise FileNotFoundError(f"{os.fspath(path)!r} is not a sharded accelkit checkpoint (a directory holding "
                                f"{METADATA_FILE} and .metadata)")
    metadata = ckpt.load(Path(path) / METADATA_FILE, weights_only=weights_only)
    metadata.pop(FORMAT_KEY, None)
    metadata.pop(CHECKSUMS_KEY, None)
    return metadata


def _reader(path: str | os.PathLike, weights_only: bool) -> SafeReader:
    """DCP's reader of ``path`` that runs nothing and checks each file against the checksums saved with it."""
    from accelkit.checkpoint.dcp_reading import SafeReader

    saved = ckpt.load(Path(path) / METADATA_FILE, weights_only=weights_only)
    return SafeReader(path, checksums=saved.get(CHECKSUMS_KEY) if isinstance(saved, dict) else None)


def load_into(path: str | os.PathLike, template: STATE_DICT_TYPE, weights_only: bool = True) -> STATE_DICT_TYPE:
    """Read the entries of ``template`` from the checkpoint at ``path`` into its tensors, in place (each process
    reads the pieces of its shards, whatever the world size at saving time); returns ``template``.

    Nothing in the checkpoint runs: DCP's index admits only DCP's types, other entries only plain data unless
    ``weights_only=False`` (:mod:`accelkit.checkpoint.dcp_reading`).

    :raises ~accelkit.checkpoint.files.UnsafeCheckpointError: the checkpoint holds other objects.
    :raises ~accelkit.checkpoint.files.CheckpointError: a file of it is damaged (named).
    """
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from accelkit.checkpoint.dcp_reading import SafeLoadPlanner

    no_dist = not (dist.is_available() and dist.is_initialized())
    with _real_failure():
        dcp.load(template, storage_reader=_reader(path, weights_only), planner=SafeLoadPlanner(path, weights_only),
                 no_dist=no_dist)
    return template


@contextlib.contextmanager
def _real_failure() -> Iterator[None]:
    """Raise the error inside DCP's ``CheckpointException`` (a ``BaseException``, which ``except Exception``
    misses) in its place: the damaged file, the refused object, ``No space left on device``."""
    from torch.distributed.checkpoint.api import CheckpointException

    from accelkit.checkpoint.dcp_reading import unwrap_failure

    try:
        yield
    except CheckpointException as exc:
        raise unwrap_failure(exc) from exc


def load_full(path: str | os.PathLike, weights_only: bool = True) -> dict[str, Any]:
    """The whole checkpoint at ``path`` in one process, without a process group, in the ordinary single-file
    format: full tensors on the CPU, optimizer states keyed by index as ``optimizer.state_dict()`` gives them.
    As safe as :func:`load_into`."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    from accelkit.checkpoint.dcp_reading import SafeEverythingPlanner

    checkpoint = load_metadata(path, weights_only=weights_only)
    reader = _reader(path, weights_only)  # DCP's index: refused or damaged before any shard is read
    count = int(checkpoint.pop(OPTIMIZER_COUNT_KEY, -1))
    tensors: STATE_DICT_TYPE = {}
    # as torch's own dcp_to_torch_save: read every entry the checkpoint holds, with no template to fill
    with _real_failure():
        _load_state_dict(tensors, storage_reader=reader, planner=SafeEverythingPlanner(path, weights_only),
                         no_dist=True)
    named = checkpoint.pop(SHARDED_KEYS_KEY, None)
    if named is not None:  # a Fabric's checkpoint: its entries under their own names
        checkpoint.update({key: tensors.get(key, {}) for key in named})
        return checkpoint
    checkpoint["state_dict"] = tensors.get("state_dict", {})
    if count >= 0:
        saved = tensors.get("optimizer_states", {})
        checkpoint["optimizer_states"] = [optimizer_state_by_index(saved[str(i)]) for i in range(count)]
    return checkpoint


def consolidate(path: str | os.PathLike, output: str | os.PathLike) -> Path:
    """Write the sharded checkpoint at ``path`` as one ordinary checkpoint file at ``output`` (atomically); the
    file loads with ``torch.load(output, weights_only=True)`` and as ``ckpt_path`` of any strategy."""
    return ckpt.atomic_save(load_full(path), output)


# ----------------------------------------------------------------- optimizer state: by name <-> by index
def keyed_by_index(state: StateDict) -> bool:
    """Whether an optimizer state names its parameters by index (``optimizer.state_dict()``) rather than by name
    (``torch.distributed.checkpoint.state_dict.get_optimizer_state_dict``)."""
    params = [p for group in state.get("param_groups", []) for p in group.get("params", [])]
    return all(isinstance(p, int) for p in params)


def optimizer_state_by_index(state: StateDict) -> StateDict:
    """A name-keyed optimizer state as ``optimizer.state_dict()`` would give it: parameters numbered in the order
    of the parameter groups (no model needed; an index-keyed state is returned unchanged)."""
    if keyed_by_index(state):  # DCP stores dictionary keys as strings: number the per-parameter states again
        return {**state, "state": {int(k): v for k, v in state.get("state", {}).items()}}
    index: dict[str, int] = {}
    groups = []
    for group in state.get("param_groups", []):
        numbered = []
        for name in group["params"]:
            index.setdefault(name, len(index))
            numbered.append(index[name])
        groups.append({**group, "params": numbered})
    per_param = {index[name]: value for name, value in state.get("state", {}).items() if name in index}
    return {"state": per_param, "param_groups": groups}


def optimizer_state_by_name(state: StateDict, module: torch.nn.Module,
                            optimizer: torch.optim.Optimizer) -> StateDict:
    """An index-keyed optimizer state keyed by parameter names instead, as ``set_optimizer_state_dict`` takes it
    (the indices follow ``optimizer.param_groups``, whose parameters ``module`` names)."""
    names = {id(p): name for name, p in module.named_parameters()}
    order = [names.get(id(p), str(i)) for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])]
    if len(order) != sum(len(g["params"]) for g in state.get("param_groups", [])):
        raise ValueError(f"the checkpoint's optimizer state covers "
                         f"{sum(len(g['params']) for g in state.get('param_groups', []))} parameters, the optimizer "
                         f"{len(order)}; was it saved with another model or optimizer?")
    groups, offset = [], 0
    for group in state["param_groups"]:
        count = len(group["params"])
        groups.append({**group, "params": order[offset:offset + count]})
        offset += count
    return {"state": {order[int(i)]: value for i, value in state.get("state", {}).items()}, "param_groups": groups}
