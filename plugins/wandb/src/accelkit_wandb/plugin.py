"""The accelkit plugin module of accelkit-wandb: registers the ``wandb`` logger (wandb is not imported here)."""

from __future__ import annotations

from accelkit import hookimpl
from accelkit.records import LoggerRecord

ACCELKIT_API = ">=1.1,<2"


@hookimpl
def accelkit_register_loggers() -> list[LoggerRecord]:
    """``logger="wandb"``: a :class:`~accelkit_wandb.WandbLogger` writing under ``default_root_dir``."""
    return [LoggerRecord("wandb", "accelkit_wandb.logger:logger_by_name",
                         description="Weights & Biases runs (files under <default_root_dir>/wandb; WANDB_MODE, "
                                     "WANDB_PROJECT... as wandb reads them)")]
