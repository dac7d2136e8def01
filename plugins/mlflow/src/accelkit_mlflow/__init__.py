"""accelkit-mlflow: an MLflow logger for accelkit, registered as ``logger="mlflow"``.

Importing this package does not import ``mlflow``; the logger imports it when it first talks to the store.
"""

from accelkit_mlflow.__about__ import __version__
from accelkit_mlflow.logger import MLFlowLogger

__all__ = ["MLFlowLogger", "__version__"]
