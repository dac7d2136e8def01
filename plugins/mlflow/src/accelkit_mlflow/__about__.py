"""The version of accelkit-mlflow."""

__version__ = "0.1.0"
