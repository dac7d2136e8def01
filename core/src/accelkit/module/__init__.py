"""The user's API: :class:`Module` (Lightning's LightningModule) and its hooks, :class:`DataModule`,
hyper-parameters and their saving, optimizers and schedulers, the model summary.
"""

from accelkit.module.datamodule import DataHooks, DataModule
from accelkit.module.hooks import CheckpointHooks, ModelHooks
from accelkit.module.hparams import AttributeDict, HyperparametersMixin
from accelkit.module.module import Module

__all__ = ["AttributeDict", "CheckpointHooks", "DataHooks", "DataModule", "HyperparametersMixin", "ModelHooks",
           "Module"]
