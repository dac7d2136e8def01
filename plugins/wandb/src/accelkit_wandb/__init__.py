"""accelkit-wandb: a Weights & Biases logger for accelkit, registered as ``logger="wandb"``.

Importing this package does not import ``wandb``; the logger imports it when it is built with arguments for
``wandb.init`` to check, and when it first talks to W&B.
"""

from accelkit_wandb.__about__ import __version__
from accelkit_wandb.logger import WandbLogger

__all__ = ["WandbLogger", "__version__"]
