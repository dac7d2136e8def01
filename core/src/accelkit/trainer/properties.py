"""The Trainer's read-only view of the run: the names Lightning users read from ``trainer``."""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

from accelkit.trainer.settings import SettingsProperties

if TYPE_CHECKING:
    import torch

    from accelkit.accelerator import Accelerator
    from accelkit.callbacks.base import Callback
    from accelkit.callbacks.early_stopping import EarlyStopping
    from accelkit.callbacks.prediction_writer import BasePredictionWriter
    from accelkit.callbacks.progress.progress_bar import ProgressBar
    from accelkit.loggers.base import Logger, RunFolder, VersionedLogger
    from accelkit.loops.evaluation import PredictionLoop
    from accelkit.loops.state import RunState, TrainerState
    from accelkit.module.datamodule import DataModule
    from accelkit.module.module import Module
    from accelkit.plugins.compose import Composition
    from accelkit.precision import Precision
    from accelkit.records import RunConfig
    from accelkit.strategies.base import Strategy
    from accelkit.trainer.trainer import Trainer
    from accelkit.utilities.types import LRSchedulerConfig

#: what ``trainer.train_dataloader`` and the other loader properties give: the loader in use (any iterable of
#: batches, a ``DataLoader`` as prepared for this process), or a list of them (several evaluation loaders)
Loaders = Iterable[object] | list[Iterable[object]]


class _AcceleratorConnectorView:
    """The one thing callbacks written for Lightning read from Lightning's private ``trainer._accelerator_connector``
    (optuna-integration's pruning callback asks ``is_distributed``); anything else is refused, naming it."""

    def __init__(self, trainer: TrainerProperties) -> None:
        self._trainer = trainer

    @property
    def is_distributed(self) -> bool:
        """Whether the run's strategy is a parallel one (DDP and the like), as Lightning's connector answers."""
        from accelkit.strategies.parallel import ParallelStrategy

        return isinstance(self._trainer.strategy, ParallelStrategy)

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"trainer._accelerator_connector.{name} is a private part of Lightning's Trainer that "
                             f"accelkit does not have (it offers only trainer._accelerator_connector.is_distributed); "
                             f"read the run's setup from trainer.strategy, trainer.accelerator or trainer.precision")


class TrainerProperties(SettingsProperties):
    """Properties of :class:`~accelkit.Trainer` (composition, topology, run state, callbacks, loggers); those of
    its settings (``max_epochs``, ``limit_val_batches``...) come from
    :class:`~accelkit.trainer.settings.SettingsProperties`."""

    # set by Trainer.__init__; declared so that the type checker knows what the properties read
    run_state: RunState
    _composition: Composition
    callbacks: list[Callback]  # accelkit's, or Lightning's (which have the same hooks)
    loggers: list[Any]  # Logger's interface (accelkit's or Lightning's); callers read what their logger has
    requested_ckpt_path: str | os.PathLike[str] | None

    def _missing_attribute(self, name: str) -> object:
        """Only reached for a name the Trainer lacks: fail with a sentence naming it (a callback written for Lightning
        may ask for Lightning's private parts) rather than a bare ``AttributeError``."""
        if name.startswith("__"):
            raise AttributeError(name)
        if isinstance(getattr(type(self), name, None), property):
            return object.__getattribute__(self, name)  # the property itself raised: let its own error through
        if name.startswith("_"):
            raise AttributeError(f"accelkit's Trainer has no attribute {name!r}: it is a private part of Lightning's "
                                 f"Trainer, which accelkit does not reproduce (a callback written for Lightning that "
                                 f"reads it needs a public attribute instead; see the Trainer's attributes in "
                                 f"docs/migrating-from-lightning.rst)")
        close = difflib.get_close_matches(name, [n for n in dir(self) if not n.startswith("_")], n=1, cutoff=0.8)
        hint = f"; did you mean {close[0]!r}?" if close else " (see the Trainer's attributes in " \
                                                              "docs/migrating-from-lightning.rst)"
        raise AttributeError(f"accelkit's Trainer has no attribute {name!r}{hint}")

    if not TYPE_CHECKING:  # hidden from the type checker, which then checks every read of a Trainer attribute
        __getattr__ = _missing_attribute

    @property
    def _accelerator_connector(self) -> _AcceleratorConnectorView:
        """What callbacks written for Lightning read of Lightning's private connector (``is_distributed``)."""
        return _AcceleratorConnectorView(self)

    # ----------------------------------------------------------------- composition
    @property
    def accelerator(self) -> Accelerator:
        """The resolved :class:`~accelkit.Accelerator`."""
        return self._composition.accelerator

    @property
    def strategy(self) -> Strategy:
        """The resolved :class:`~accelkit.Strategy`."""
        return self._composition.strategy

    @property
    def precision(self) -> Precision:
        """The resolved :class:`~accelkit.Precision`."""
        return self._composition.precision

    @property
    def precision_plugin(self) -> Precision:
        """Same as :attr:`precision` (Lightning 1.x name)."""
        return self._composition.precision

    @property
    def config(self) -> RunConfig:
        """The resolved :class:`~accelkit.RunConfig`."""
        return self._composition.config

    # ----------------------------------------------------------------- topology
    @property
    def world_size(self) -> int:
        """Number of processes/replicas."""
        return self.strategy.world_size

    @property
    def global_rank(self) -> int:
        """This process's index among all."""
        return self.strategy.global_rank

    @property
    def local_rank(self) -> int:
        """This process's index on its node."""
        return self.strategy.local_rank

    @property
    def node_rank(self) -> int:
        """This node's index."""
        return self.strategy.node_rank

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return self.strategy.num_nodes

    @property
    def num_devices(self) -> int:
        """Devices per node."""
        return len(self.strategy.devices)

    @property
    def device_ids(self) -> list[int]:
        """Indices of the devices on this node."""
        return list(self.strategy.devices)

    @property
    def is_global_zero(self) -> bool:
        """Whether this process writes files and prints."""
        return self.strategy.is_global_zero

    # ----------------------------------------------------------------- modules and optimizers
    @property
    def lightning_module(self) -> Module:
        """The user's Module (unwrapped); ``None`` before the first run, which the type does not say (as Lightning's
        ``Trainer.lightning_module``, typed the same way so that hooks and callbacks read it without a check)."""
        return cast("Module", self.run_state.module)  # None only before any run: see above

    @property
    def model(self) -> torch.nn.Module:
        """The object the loops call: the Module, or the strategy's wrapper around it (DDP); ``None`` before the
        first run, which the type does not say (as :attr:`lightning_module`: the loops and hooks read it in a run)."""
        state = self.run_state
        return cast("torch.nn.Module", state.model if state.model is not None else state.module)  # see above

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The optimizers ``configure_optimizers`` returned (during and after a fit in this process)."""
        return self.run_state.optimizers

    @optimizers.setter
    def optimizers(self, value: list[torch.optim.Optimizer]) -> None:
        self.run_state.optimizers = list(value)

    @property
    def lr_scheduler_configs(self) -> list[LRSchedulerConfig]:
        """:class:`~accelkit.module.optimizers.LRSchedulerConfig` of every scheduler."""
        return self.run_state.schedulers

    # ----------------------------------------------------------------- loggers and files
    @property
    def logger(self) -> Logger | None:
        """The first logger, or ``None``."""
        return self.loggers[0] if self.loggers else None

    @logger.setter
    def logger(self, value: Logger | None) -> None:
        self.loggers = [] if value is None else [value]

    @property
    def log_dir(self) -> str:
        """The run's folder, a string as in Lightning: the first logger's version folder
        (``<default_root_dir>/lightning_logs/version_<n>`` for the default logger); for a logger without one
        (MLflow), a version folder of the Trainer's own, :attr:`run_folder`; ``default_root_dir`` without a logger.
        The default checkpoints go to its ``checkpoints`` folder and the CLI's ``config.yaml`` into it."""
        logger = self.logger
        if logger is None:
            return str(self.default_root_dir)
        directory = getattr(logger, "log_dir", None)
        if directory is None:
            directory = self.run_folder.log_dir
        return str(directory)

    @property
    def run_folder(self) -> RunFolder:
        """The :class:`~accelkit.loggers.RunFolder` that gives :attr:`log_dir` when the first logger keeps no
        folder of its own (claimed on first use, kept for every stage of this Trainer)."""
        folder = self.__dict__.get("_run_folder")
        if folder is None or folder.save_dir != str(self.default_root_dir):
            from accelkit.loggers import RunFolder

            folder = self._run_folder = RunFolder(self.default_root_dir)
        return folder

    def versioned_loggers(self) -> list[VersionedLogger]:
        """The run's loggers that choose a version folder (:class:`~accelkit.loggers.VersionedLogger`), with
        :attr:`run_folder` when :attr:`log_dir` comes from it: the folders every process of a run must agree on."""
        from accelkit.loggers import VersionedLogger

        found = [logger for logger in self.loggers if isinstance(logger, VersionedLogger)]
        first = self.logger  # (a VersionedLogger's log_dir is not read here: reading it claims its version)
        if first is not None and not isinstance(first, VersionedLogger) and getattr(first, "log_dir", None) is None:
            found.append(self.run_folder)
        return found

    @property
    def checkpoint_callbacks(self) -> list[Callback]:
        """Every checkpoint callback of the run (:func:`~accelkit.callbacks.model_checkpoint.is_checkpoint`)."""
        from accelkit.callbacks.model_checkpoint import is_checkpoint

        return [c for c in self.callbacks if is_checkpoint(c)]

    @property
    def checkpoint_callback(self) -> Callback | None:
        """The first :class:`~accelkit.callbacks.ModelCheckpoint`, or ``None``."""
        found = self.checkpoint_callbacks
        return found[0] if found else None

    @property
    def early_stopping_callbacks(self) -> list[EarlyStopping]:
        """Every :class:`~accelkit.callbacks.EarlyStopping` of the run."""
        from accelkit.callbacks import EarlyStopping

        return [c for c in self.callbacks if isinstance(c, EarlyStopping)]

    @property
    def early_stopping_callback(self) -> EarlyStopping | None:
        """The first :class:`~accelkit.callbacks.EarlyStopping`, or ``None``."""
        found = self.early_stopping_callbacks
        return found[0] if found else None

    @property
    def progress_bar_callback(self) -> ProgressBar | None:
        """The run's :class:`~accelkit.callbacks.ProgressBar` (``None`` when the bar is off)."""
        from accelkit.callbacks.progress.progress_bar import ProgressBar

        return next((c for c in self.callbacks if isinstance(c, ProgressBar)), None)

    @property
    def prediction_writer_callbacks(self) -> list[BasePredictionWriter]:
        """Every :class:`~accelkit.callbacks.BasePredictionWriter` of the run."""
        from accelkit.callbacks import BasePredictionWriter

        return [c for c in self.callbacks if isinstance(c, BasePredictionWriter)]

    @property
    def predict_loop(self) -> PredictionLoop:
        """The prediction loop (:class:`~accelkit.loops.evaluation.PredictionLoop`): what prediction writers read
        during ``predict`` (``predictions``, ``current_batch_indices``, ``epoch_batch_indices``)."""
        loop = self.run_state.predict_loop
        if loop is None:
            from accelkit.loops.evaluation import PredictionLoop

            loop = self.run_state.predict_loop = PredictionLoop(cast("Trainer", self))
        return loop

    @property
    def checkpoint_path(self) -> Path:
        """The checkpoint this Trainer's run wrote last, as its first :class:`~accelkit.callbacks.ModelCheckpoint`
        recorded it (``last_model_path``, else ``best_model_path``: the file written, ``last-v1.ckpt`` or the
        default callback's ``epoch=E-step=S.ckpt``); before a checkpoint is written, ``last.ckpt`` in the folder it
        will go to (``<log_dir>/checkpoints``, or the callback's ``dirpath``; :attr:`checkpoint_dir` is that folder);
        without a checkpoint callback, ``<default_root_dir>/checkpoints/last.ckpt``."""
        for callback in self.checkpoint_callbacks:
            written = getattr(callback, "last_model_path", "") or getattr(callback, "best_model_path", "")
            if written:
                return Path(written)
            if hasattr(callback, "last_checkpoint_path"):
                return callback.last_checkpoint_path(self)
        return self.default_root_dir / "checkpoints" / "last.ckpt"

    @property
    def checkpoint_dir(self) -> Path:
        """The folder of the run's checkpoints: that of :attr:`checkpoint_path`."""
        return self.checkpoint_path.parent

    # ----------------------------------------------------------------- progress (read-only, as in Lightning)
    @property
    def current_epoch(self) -> int:
        """Epochs completed: the epoch running now, from 0 (advanced after the epoch's end hooks)."""
        return self.run_state.progress.current_epoch

    @property
    def global_step(self) -> int:
        """Optimizer steps taken (not reset at an epoch's start)."""
        return self.run_state.progress.global_step

    @property
    def should_stop(self) -> bool:
        """Whether a stop was requested; set it (``trainer.should_stop = True``) to stop the fit after the current
        batch, once ``min_epochs``/``min_steps`` are reached."""
        return self.run_state.progress.should_stop

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        self.run_state.progress.should_stop = bool(value)

    @property
    def sanity_checking(self) -> bool:
        """Whether the sanity check's validation is running."""
        return self.run_state.progress.sanity_checking

    @sanity_checking.setter
    def sanity_checking(self, value: bool) -> None:
        self.run_state.progress.sanity_checking = bool(value)

    @property
    def is_last_batch(self) -> bool:
        """Whether the training batch running now is the epoch's last."""
        return self.run_state.progress.is_last_batch

    @property
    def num_training_batches(self) -> int | float:
        """Batches per training epoch, as Lightning's: in a fit once its training loader is loaded, that loader's
        count (``inf``: it has no length); before that and outside a fit, the latest fit's count (``inf`` before any
        fit)."""
        progress = self.run_state.progress
        loop = self.run_state.fit_loop
        if self.state.fn == "fit" and (progress.num_training_batches is not None or hasattr(loop, "train_loader")):
            return _known(progress.num_training_batches)
        return _known(progress.last_fit_batches[0])

    @property
    def num_val_batches(self) -> list[int | float]:
        """Validation batches per loader (``inf`` for one without a length), in ``fit`` and ``validate``; in
        ``test``/``predict`` the latest fit's (``[]`` before any fit), as Lightning's."""
        progress = self.run_state.progress
        counts = progress.num_val_batches if self.state.fn in ("fit", "validate") else progress.last_fit_batches[1]
        return [_known(count) for count in counts]

    @property
    def num_sanity_val_batches(self) -> list[int | float]:
        """Sanity-check batches per validation loader, as Lightning computes them: ``num_sanity_val_steps`` (all for
        ``-1``) capped by each loader's count in ``num_val_batches``, also outside the sanity check and without one
        (``[0]`` with ``num_sanity_val_steps=0``); ``inf`` for a loader without a length checked whole."""
        progress = self.run_state.progress
        if progress.num_sanity_val_batches:  # what the sanity check ran
            return [_known(count) for count in progress.num_sanity_val_batches]
        steps = self.num_sanity_val_steps
        return [_known(count) if steps < 0 else steps if count is None else min(steps, count)
                for count in progress.num_val_batches]

    @property
    def num_test_batches(self) -> list[int | float]:
        """Test batches per loader (``inf`` for one without a length)."""
        return [_known(count) for count in self.run_state.progress.num_test_batches]

    @property
    def num_predict_batches(self) -> list[int | float]:
        """Prediction batches per loader (``inf`` for one without a length)."""
        return [_known(count) for count in self.run_state.progress.num_predict_batches]

    @property
    def callback_metrics(self) -> dict[str, torch.Tensor]:
        """The logged values as callbacks (``EarlyStopping``...) read them, computed when read as in Lightning:
        scalar tensors, on the device until the run's end; while training batches run, each value's latest step
        value (under its name, and ``<name>_step`` if also logged per epoch), once they are done the epoch values
        (``<name>`` and ``<name>_epoch``); evaluation loops add their epoch values only."""
        return self.run_state.current("callback_metrics")

    @property
    def logged_metrics(self) -> dict[str, torch.Tensor]:
        """The values logged with ``logger=True`` (scalar tensors), computed when read as ``callback_metrics``,
        under the names the loggers get (``<name>_step``/``<name>_epoch`` for a value logged both ways), with or
        without a logger."""
        return self.run_state.current("logged_metrics")

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """The values logged with ``prog_bar=True``, as floats (a read copies them from the device), under the
        loggers' names; computed when read as ``callback_metrics``."""
        return self.run_state.current("progress_bar_metrics")

    @property
    def state(self) -> TrainerState:
        """What the Trainer is doing: the entry point (``state.fn``) and the loop running now (``state.stage``)."""
        return self.run_state.state

    @property
    def datamodule(self) -> DataModule | None:
        """The DataModule of the latest run (``None`` without one)."""
        return self.run_state.datamodule

    @datamodule.setter
    def datamodule(self, value: DataModule | None) -> None:
        self.run_state.datamodule = value

    @property
    def ckpt_path(self) -> str | os.PathLike[str] | None:
        """The checkpoint the latest run loaded (``None`` without one). Setting it, as in Lightning, makes the next
        ``fit``/``validate``/``test``/``predict`` given no ``ckpt_path`` load that checkpoint (and the stages after
        it, until one is given a ``ckpt_path``): see ``requested_ckpt_path``."""
        return self.run_state.ckpt_path

    @ckpt_path.setter
    def ckpt_path(self, value: str | os.PathLike[str] | None) -> None:
        self.run_state.ckpt_path = value
        self.requested_ckpt_path = value or None

    @property
    def training(self) -> bool:
        """Whether the training loop is running."""
        return self.state.stage == "train"

    @property
    def validating(self) -> bool:
        """Whether a validation loop is running (inside fit or ``validate``)."""
        return self.state.stage == "validate"

    @property
    def testing(self) -> bool:
        """Whether the test loop is running."""
        return self.state.stage == "test"

    @property
    def predicting(self) -> bool:
        """Whether the prediction loop is running."""
        return self.state.stage == "predict"

    @property
    def evaluating(self) -> bool:
        """Whether a validation (the sanity check's too, as in Lightning) or test loop is running."""
        stage = self.state.stage
        return stage is not None and stage.evaluating

    # ----------------------------------------------------------------- data
    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """``num_replicas``/``rank`` for a sampler you build yourself (``None`` with one process)."""
        return self.strategy.distributed_sampler_kwargs

    def _loaders(self, kind: str) -> Loaders | None:
        data = self.run_state.data
        loaders = data.prepared.get(kind) if data is not None else None
        if loaders is None:
            return None
        return loaders[0] if len(loaders) == 1 else loaders

    @property
    def train_dataloader(self) -> Loaders | None:
        """The training loader in use (as prepared for this process), in this worker during a run."""
        return self._loaders("train")

    @property
    def val_dataloaders(self) -> Loaders | None:
        """The validation loader(s) in use (a list when there are several)."""
        return self._loaders("val")

    @property
    def test_dataloaders(self) -> Loaders | None:
        """The test loader(s) in use."""
        return self._loaders("test")

    @property
    def predict_dataloaders(self) -> Loaders | None:
        """The prediction loader(s) in use."""
        return self._loaders("predict")

    @property
    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps the fit will take: ``max_steps`` if set, else batches per epoch / accumulation x
        ``max_epochs`` (``inf`` without a bound). Usable in ``configure_optimizers`` (OneCycleLR). With a training
        loader without a length and an epoch limit, ``max_steps`` (``-1`` when not set), as Lightning's."""
        if self.max_epochs in (None, -1):
            return self.max_steps if self.max_steps != -1 else float("inf")
        batches = self.run_state.progress.num_training_batches  # this fit's (None: not loaded yet or no length)
        if batches is None and self.run_state.data is not None:
            loaders = self.run_state.data.loaders("train")
            batches = self.run_state.data.num_batches(loaders[0], "train") if loaders else 0
            self.run_state.progress.record_batches("train", batches)
        if batches is None:  # as Lightning's: an unknown count per epoch bounds nothing but max_steps
            return self.max_steps
        total = math.ceil(batches / self.accumulate_grad_batches) * self.max_epochs
        return total if self.max_steps == -1 else min(total, self.max_steps)


def _known(count: int | float | None) -> int | float:
    """A batch count as the Trainer's public reads give it, Lightning's way: ``inf`` for a loader without a length
    (the loops' own record, :class:`~accelkit.loops.state.Progress`, keeps ``None`` for it)."""
    return math.inf if count is None else count

