"""Checkpoints: files written atomically and read safely (:mod:`~accelkit.checkpoint.files`), and sharded
checkpoints that every process writes its part of (:mod:`~accelkit.checkpoint.sharded`).

``from accelkit import checkpoint as ckpt`` gives the file functions (``ckpt.atomic_save``, ``ckpt.load``, ...).
"""

from accelkit.checkpoint import sharded
from accelkit.checkpoint.files import (
                                       ALLOW_NON_FINITE_ENV,
                                       CheckpointError,
                                       UnsafeCheckpointError,
                                       atomic_save,
                                       check_file,
                                       load,
                                       non_finite_tensors,
                                       remove_stale_temp_files,
                                       to_cpu,
                                       verify_archive,
)

__all__ = ["ALLOW_NON_FINITE_ENV", "CheckpointError", "UnsafeCheckpointError", "atomic_save", "check_file", "load",
           "non_finite_tensors", "remove_stale_temp_files", "sharded", "to_cpu", "verify_archive"]
