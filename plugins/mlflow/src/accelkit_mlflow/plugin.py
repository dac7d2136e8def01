"""The accelkit plugin module of accelkit-mlflow: registers the ``mlflow`` logger (mlflow is not imported here)."""

from __future__ import annotations

from accelkit import hookimpl
from accelkit.records import LoggerRecord

ACCELKIT_API = ">=1.1,<2"


@hookimpl
def accelkit_register_loggers() -> list[LoggerRecord]:
    """``logger="mlflow"``: an :class:`~accelkit_mlflow.MLFlowLogger` with a file store under ``default_root_dir``."""
    return [LoggerRecord("mlflow", "accelkit_mlflow.logger:logger_by_name",
                         description="MLflow runs in a local file store (<default_root_dir>/mlruns) or a tracking URI")]
