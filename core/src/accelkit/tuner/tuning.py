"""``accelkit.tuner.Tuner``: Lightning's ``Tuner`` (``lightning.pytorch.tuner.Tuner``) under our name."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from accelkit.tuner.batch_size_scaling import scale_batch_size
from accelkit.tuner.lr_finder import LRFinder, lr_find
from accelkit.tuner.session import check_method

if TYPE_CHECKING:
    from accelkit.module.datamodule import DataModule
    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer


class Tuner:
    """Tune a module's learning rate and batch size with a :class:`~accelkit.Trainer` before the real fit::

        trainer = accelkit.Trainer(max_epochs=10)
        tuner = Tuner(trainer)
        lr_finder = tuner.lr_find(model)          # sets model.lr (or learning_rate) to the suggestion
        tuner.scale_batch_size(model, mode="power")   # sets model.batch_size to the largest that fits
        trainer.fit(model)                        # starts from the weights the model had before tuning

    Both run short trials through the Trainer's ``fit`` (or ``validate``/``test``/``predict``) in this process,
    without loggers, progress bar or the Trainer's callbacks, and then put the module's weights, the optimizer
    and the Trainer (settings, counters, callbacks, loggers) back as they were. They refuse strategies that run
    several processes: tune on one device and give the values to the distributed Trainer.

    :param trainer: the Trainer whose accelerator, precision and settings the trials use.
    """

    def __init__(self, trainer: Trainer) -> None:
        from accelkit.trainer.trainer import Trainer

        if not isinstance(trainer, Trainer):
            raise TypeError(f"Tuner(trainer) needs an accelkit.Trainer, got {type(trainer).__name__}")
        self._trainer = trainer

    @property
    def trainer(self) -> Trainer:
        """The Trainer the trials run on."""
        return self._trainer

    def lr_find(self, model: Module, train_dataloaders: Iterable[object] | DataModule | None = None,
                val_dataloaders: Iterable[object] | None = None,
                dataloaders: Iterable[object] | DataModule | None = None, datamodule: DataModule | None = None,
                method: str = "fit", min_lr: float = 1e-8,
                max_lr: float = 1, num_training: int = 100, mode: str = "exponential",
                early_stop_threshold: float | None = 4.0, update_attr: bool = True,
                attr_name: str = "") -> LRFinder | None:
        """The learning-rate range test: ``num_training`` training steps with the learning rate raised before each
        one, from ``min_lr`` to ``max_lr``, recording the smoothed training loss of every step.

        :param model: the module to tune; its ``configure_optimizers`` must return one optimizer.
        :param train_dataloaders: training loaders, or a DataModule (default: the module's ``train_dataloader``).
        :param val_dataloaders: accepted for Lightning's signature; the sweep does not validate (a warning says so).
        :param dataloaders: only for other methods, which ``lr_find`` refuses.
        :param datamodule: a DataModule providing the training loader.
        :param method: ``"fit"`` (the only method a learning-rate sweep can run).
        :param min_lr: the learning rate of the first step.
        :param max_lr: the learning rate of the last step.
        :param num_training: how many steps (learning rates) to try.
        :param mode: ``"exponential"`` (the rate grows geometrically) or ``"linear"``.
        :param early_stop_threshold: stop once the smoothed loss exceeds this many times the best loss so far
            (or is no longer a number); ``None`` runs every step.
        :param update_attr: set the suggested learning rate (:meth:`~accelkit.tuner.lr_finder.LRFinder.suggestion`)
            in ``model.lr`` / ``model.learning_rate`` or their ``hparams`` entries (``AttributeError`` before the
            sweep when there is none).
        :param attr_name: the attribute to set instead of ``lr``/``learning_rate``.
        :returns: the :class:`~accelkit.tuner.lr_finder.LRFinder` with the curve, or ``None`` under
            ``fast_dev_run`` (with a warning).
        """
        if method != "fit":
            raise ValueError(f"Tuner.lr_find(method={method!r}): the learning-rate sweep trains, so only "
                             "method='fit' runs it")
        check_method(method, train_dataloaders, val_dataloaders, dataloaders, "lr_find")
        return lr_find(self._trainer, model, train_dataloaders, val_dataloaders, datamodule, min_lr=min_lr,
                       max_lr=max_lr, num_training=num_training, mode=mode,
                       early_stop_threshold=early_stop_threshold, update_attr=update_attr, attr_name=attr_name)

    def scale_batch_size(self, model: Module, train_dataloaders: Iterable[object] | DataModule | None = None,
                         val_dataloaders: Iterable[object] | None = None,
                         dataloaders: Iterable[object] | DataModule | None = None,
                         datamodule: DataModule | None = None, method: str = "fit", mode: str = "power",
                         steps_per_trial: int = 3, init_val: int = 2, max_trials: int = 25,
                         batch_arg_name: str = "batch_size", margin: float = 0.05,
                         max_val: int = 8192) -> int | None:
        """Find the largest batch size whose trials do not run out of memory, and set it where the batch size
        is kept: ``model.<batch_arg_name>``, ``model.hparams``, the DataModule's attribute or its ``hparams``
        (every one of them that exists). The loaders are built anew for each trial by the ``*_dataloader``
        methods of the module or DataModule, so loaders passed in directly are refused.

        :param model: the module to tune.
        :param train_dataloaders: a DataModule (``method="fit"``); DataLoaders are refused (see above).
        :param val_dataloaders: validation loaders for ``method="fit"`` trials (used as they are).
        :param dataloaders: a DataModule for ``method="validate"/"test"/"predict"``; DataLoaders are refused.
        :param datamodule: the DataModule providing the loaders (and perhaps keeping the batch size).
        :param method: the stage the trials run: ``"fit"``, ``"validate"``, ``"test"`` or ``"predict"``.
        :param mode: ``"power"`` (double until out of memory; keep the last size that fitted) or
            ``"binsearch"`` (double, then bisect between the last size that fitted and the first that did not;
            keep the largest that fitted, less ``margin``).
        :param steps_per_trial: batches each trial runs (training steps, plus as many validation batches in the
            sanity check of a ``fit`` trial).
        :param init_val: the batch size of the first trial.
        :param max_trials: the most trials the search runs.
        :param batch_arg_name: the name the batch size is kept under.
        :param margin: the fraction ``binsearch`` takes off the largest size that fitted, as a safety buffer
            (``0 <= margin < 1``; ``power`` mode ignores it, with a warning when it is not the default).
        :param max_val: the largest batch size to try.
        :returns: the batch size found (never more than ``max_val`` or the samples in the loaders), or ``None``
            under ``fast_dev_run`` (with a warning).
        """
        check_method(method, train_dataloaders, val_dataloaders, dataloaders, "scale_batch_size")
        return scale_batch_size(self._trainer, model, train_dataloaders, val_dataloaders, dataloaders, datamodule,
                                method=method, mode=mode, steps_per_trial=steps_per_trial, init_val=init_val,
                                max_trials=max_trials, batch_arg_name=batch_arg_name, margin=margin,
                                max_val=max_val)
