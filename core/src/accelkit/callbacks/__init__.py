"""Callbacks: the :class:`~accelkit.Callback` base and the built-in callbacks.

A Lightning callback accelkit does not provide (:data:`NOT_PROVIDED`) is an ``ImportError`` naming it and what to
use instead, for ``from accelkit.callbacks import ModelPruning`` and ``accelkit.callbacks.ModelPruning`` alike.
"""

from __future__ import annotations

from accelkit.callbacks.base import Callback, DeviceStatsMonitor
from accelkit.callbacks.early_stopping import EarlyStopping
from accelkit.callbacks.finetuning import BackboneFinetuning, BaseFinetuning
from accelkit.callbacks.gradient_accumulation_scheduler import GradientAccumulationScheduler
from accelkit.callbacks.lambda_function import LambdaCallback
from accelkit.callbacks.lr_monitor import LearningRateMonitor
from accelkit.callbacks.model_checkpoint import Checkpoint, ModelCheckpoint
from accelkit.callbacks.model_summary import ModelSummary, RichModelSummary
from accelkit.callbacks.on_exception_checkpoint import OnExceptionCheckpoint
from accelkit.callbacks.prediction_writer import BasePredictionWriter
from accelkit.callbacks.progress import ProgressBar, RichProgressBar, RichProgressBarTheme, TQDMProgressBar
from accelkit.callbacks.stochastic_weight_avg import StochasticWeightAveraging
from accelkit.callbacks.timer import Timer

__all__ = ["Callback", "Checkpoint", "DeviceStatsMonitor", "EarlyStopping", "LearningRateMonitor", "ModelCheckpoint"]
__all__ += ["BasePredictionWriter", "LambdaCallback", "ModelSummary", "OnExceptionCheckpoint", "RichModelSummary",
            "Timer"]
__all__ += ["BackboneFinetuning", "BaseFinetuning", "GradientAccumulationScheduler", "StochasticWeightAveraging"]
__all__ += ["ProgressBar", "RichProgressBar", "RichProgressBarTheme", "TQDMProgressBar"]

#: Lightning's callbacks (``lightning.pytorch.callbacks``) that accelkit does not provide, each with what to use
#: instead; the migration guide's rows say the same
NOT_PROVIDED: dict[str, str] = {
    "BatchSizeFinder": "run Tuner(trainer).scale_batch_size(model) (accelkit.tuner) before fit instead",
    "EMAWeightAveraging": "StochasticWeightAveraging averages uniformly, or keep a "
                          "torch.optim.swa_utils.AveragedModel with an EMA multi_avg_fn in your module",
    "LearningRateFinder": "run Tuner(trainer).lr_find(model) (accelkit.tuner) before fit instead",
    "ModelPruning": "call torch.nn.utils.prune from a callback of your own (on_train_epoch_end)",
    "SpikeDetection": "check the loss in on_train_batch_end of a callback of your own",
    "ThroughputMonitor": "Timer reports the time spent per stage",
    "WeightAveraging": "StochasticWeightAveraging is there, or subclass Callback",
}


def __getattr__(name: str) -> object:
    """Refuse a Lightning callback accelkit lacks with a sentence naming it and what to use instead.

    It raises ``ImportError`` rather than ``AttributeError``: ``from accelkit.callbacks import X`` replaces an
    ``AttributeError`` with Python's bare "cannot import name" and the sentence would be lost (so ``hasattr`` on
    these names raises too)."""
    if name in NOT_PROVIDED:
        raise ImportError(f"accelkit.callbacks has no {name} (Lightning's lightning.pytorch.callbacks.{name} has no "
                          f"accelkit counterpart yet): {NOT_PROVIDED[name]}; see 'Callbacks' in "
                          "docs/migrating-from-lightning.rst", name=__name__, path=__file__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
