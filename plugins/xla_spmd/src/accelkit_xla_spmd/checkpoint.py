"""Sharded checkpoints of ``xla_spmd``: accelkit's sharded checkpoint directory (:mod:`accelkit.checkpoint.sharded`),
with the tensors written through torch_xla's ``SPMDSavePlanner``.

The directory holds DCP's ``.metadata`` and data files for the tensors (``"state_dict"`` and the optimizer states,
keyed by parameter name) and accelkit's metadata file for everything else, exactly as the ``fsdp`` strategy writes
it, so ``accelkit checkpoint consolidate``, any strategy's ``ckpt_path=`` and a plain module read it. With the SPMD
planner, each device's shard of a split parameter (or optimizer state) is written as its own chunk, by the host
that holds it, without gathering the whole tensor first; replicated tensors are written once.

The directory appears complete or not at all: it is written under a hidden temporary name next to the target and
renamed into place by the coordinating process (an older checkpoint of the same name is replaced).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelkit import checkpoint as ckpt
from accelkit.checkpoint import sharded as sharded


def _no_dist() -> bool:
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized())


def save_sharded(checkpoint: dict[str, Any], path: str | os.PathLike, is_coordinator: bool = True,
                 barrier: Callable[[str], None] = lambda name: None) -> Path:
    """Write ``checkpoint`` as a sharded checkpoint directory at ``path``; every process (host) calls it.

    :param is_coordinator: the process that writes accelkit's metadata file and renames the directory into place.
    :param barrier: waits for every process (a no-op in one process).
    """
    import torch.distributed.checkpoint as dcp
    from torch_xla.experimental.distributed_checkpoint import SPMDSavePlanner

    target = Path(path).absolute()
    temporary = sharded.hidden_sibling(target, "tmp-spmd")
    if is_coordinator:
        target.parent.mkdir(parents=True, exist_ok=True)
        for stale in target.parent.glob(sharded.hidden_sibling(target, "tmp-*").name):  # left by a killed save
            sharded.remove(stale)
    barrier("accelkit_spmd_checkpoint_start")
    tensors, metadata = sharded.split(checkpoint)
    try:
        with warnings.catch_warnings():
            # DCP's notes that one process saves alone and that torch_xla's planner predates an optional argument
            warnings.filterwarnings("ignore", message=".*assuming the intent is to save in a single process.*")
            warnings.filterwarnings("ignore", message=".*set_up_planner has been updated.*")
            dcp.save(tensors, storage_writer=dcp.FileSystemWriter(str(temporary)), planner=SPMDSavePlanner(),
                     no_dist=_no_dist())
        if is_coordinator:
            ckpt.atomic_save(ckpt.to_cpu(metadata), temporary / sharded.METADATA_FILE)
    except BaseException:
        if is_coordinator:
            sharded.remove(temporary)
        raise
    barrier("accelkit_spmd_checkpoint_written")
    if is_coordinator:
        aside = sharded.hidden_sibling(target, "old-spmd")
        if os.path.lexists(target):
            sharded.remove(aside)
            os.rename(target, aside)
        os.rename(temporary, target)
        sharded.remove(aside)
    barrier("accelkit_spmd_checkpoint_renamed")
    return target
