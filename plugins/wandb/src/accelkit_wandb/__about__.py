"""The version of accelkit-wandb."""

__version__ = "0.1.0"
