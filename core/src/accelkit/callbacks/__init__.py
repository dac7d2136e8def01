"""Callbacks: the :class:`~accelkit.Callback` base and the built-in callbacks."""

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
