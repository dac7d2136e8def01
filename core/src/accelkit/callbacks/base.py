"""``accelkit.Callback``: code that watches or steers a run from outside the Module."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch

from accelkit.errors import ConfigurationError
from accelkit.utilities.host import host_stats, host_stats_available

if TYPE_CHECKING:
    from torch.optim import Optimizer

    from accelkit.module.module import Module
    from accelkit.trainer.trainer import Trainer


class Callback:
    """Base class of callbacks, with every hook of Lightning 2.x's ``Callback`` under the same name and signature.

    Override the hooks you need; each receives the Trainer and the user's Module (``pl_module``). A callback hook
    runs right before the Module's hook of the same name, except at the end of a training epoch, where callbacks
    that monitor metrics (:attr:`monitors_metrics`: :class:`~accelkit.callbacks.ModelCheckpoint`,
    :class:`~accelkit.callbacks.EarlyStopping`) run after the Module, so they see what its hook logged (see
    :doc:`/hooks`).
    Hooks a callback does not override cost nothing: the Trainer decides once per run which ones to call.
    """

    #: ``True`` for a callback that decides from logged metrics, as checkpointing and early stopping do. Such a
    #: callback's ``on_train_epoch_end`` runs after the Module's (and after what that logged is published), and a
    #: run whose strategy spawns workers hands its ``state_dict()`` back to the caller's instance after ``fit``
    #: (``best_model_path``...). Set it to ``True`` on a callback class of your own that monitors metrics; it is
    #: read once per run, as the run starts.
    monitors_metrics: bool = False

    @property
    def state_key(self) -> str:
        """Key of this callback's state in a checkpoint (its class name; subclasses with several instances in
        one run add their distinguishing arguments, see ``_generate_state_key()``)."""
        return type(self).__qualname__

    def _generate_state_key(self, **kwargs: object) -> str:
        """A state key made of the class name and ``kwargs``, for callbacks that can appear several times."""
        return f"{type(self).__qualname__}{kwargs!r}"

    # ----------------------------------------------------------------- run lifecycle
    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """At the start of ``fit``/``validate``/``test``/``predict`` in every process (``stage`` names it)."""

    def teardown(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """At the end of ``fit``/``validate``/``test``/``predict``, in every process."""

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        """When fit begins."""

    def on_fit_end(self, trainer: Trainer, pl_module: Module) -> None:
        """When fit ends."""

    def on_sanity_check_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Before the validation sanity check."""

    def on_sanity_check_end(self, trainer: Trainer, pl_module: Module) -> None:
        """After the validation sanity check."""

    def on_exception(self, trainer: Trainer, pl_module: Module, exception: BaseException) -> None:
        """When the run raises (including ``KeyboardInterrupt``)."""

    # ----------------------------------------------------------------- training
    def on_train_start(self, trainer: Trainer, pl_module: Module) -> None:
        """When training begins (after the sanity check)."""

    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None:
        """When training ends."""

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        """At the start of each training epoch."""

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        """At the end of each training epoch (after its validation), with the epoch's metrics in
        ``trainer.callback_metrics``."""

    def on_train_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int) -> None:
        """Before each training batch (the batch is already on the device)."""

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """After each training batch; ``outputs`` is what ``training_step`` returned (a dict with ``"loss"``)."""

    def on_before_backward(self, trainer: Trainer, pl_module: Module, loss: torch.Tensor) -> None:
        """Before ``loss.backward()``."""

    def on_after_backward(self, trainer: Trainer, pl_module: Module) -> None:
        """After the backward pass, before gradients are unscaled or clipped."""

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: Module, optimizer: Optimizer) -> None:
        """Before each optimizer step, before gradient clipping."""

    def on_before_zero_grad(self, trainer: Trainer, pl_module: Module, optimizer: Optimizer) -> None:
        """Before ``optimizer.zero_grad()``."""

    # ----------------------------------------------------------------- evaluation
    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        """When a validation run begins (also inside fit)."""

    def on_validation_end(self, trainer: Trainer, pl_module: Module) -> None:
        """When a validation run ends."""

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        """At the start of the validation epoch."""

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        """At the end of the validation epoch."""

    def on_validation_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        """Before each validation batch."""

    def on_validation_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        """After each validation batch."""

    def on_test_start(self, trainer: Trainer, pl_module: Module) -> None:
        """When the test run begins."""

    def on_test_end(self, trainer: Trainer, pl_module: Module) -> None:
        """When the test run ends."""

    def on_test_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        """At the start of the test epoch."""

    def on_test_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        """At the end of the test epoch."""

    def on_test_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        """Before each test batch."""

    def on_test_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        """After each test batch."""

    def on_predict_start(self, trainer: Trainer, pl_module: Module) -> None:
        """When prediction begins."""

    def on_predict_end(self, trainer: Trainer, pl_module: Module) -> None:
        """When prediction ends."""

    def on_predict_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        """At the start of the prediction epoch."""

    def on_predict_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        """At the end of the prediction epoch."""

    def on_predict_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int,
                               dataloader_idx: int = 0) -> None:
        """Before each prediction batch."""

    def on_predict_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int,
                             dataloader_idx: int = 0) -> None:
        """After each prediction batch."""

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """This callback's state, saved in checkpoints under :attr:`~accelkit.Callback.state_key`."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def on_save_checkpoint(self, trainer: Trainer, pl_module: Module, checkpoint: dict[str, Any]) -> None:
        """Before a checkpoint is written; may add entries to ``checkpoint``."""

    def on_load_checkpoint(self, trainer: Trainer, pl_module: Module, checkpoint: dict[str, Any]) -> None:
        """When a checkpoint is restored, before the training state is applied."""


class DeviceStatsMonitor(Callback):
    """Logs device statistics to the Trainer's loggers, as Lightning's ``DeviceStatsMonitor``: at the start and the
    end of every training, validation and test batch that falls on a logging step, each figure named
    ``DeviceStatsMonitor.<hook><separator><figure>`` (the hook's name, e.g. ``on_train_batch_end``, and the
    logger's ``group_separator``, ``"/"``), at the loggers' step (the training batches that stepped before).

    A training batch falls on a logging step when the batches that stepped, counting it, are a multiple of
    ``log_every_n_steps``; an evaluation batch when its position in the running validation or test (counted from 1
    over all its loaders) is; and every batch once a stop was requested. The figures come from
    :meth:`accelkit.Accelerator.get_device_stats` (on the CPU: the host's, as with Lightning).

    :param cpu_stats: ``None``: the host's CPU and memory figures only when the accelerator is the CPU; ``True``:
        them too on any accelerator; ``False``: never (on the CPU, nothing is logged). The host's figures need
        ``psutil``.
    :raises ConfigurationError: at a fit's setup, when the Trainer has no logger.
    :raises ModuleNotFoundError: at a fit's setup on the CPU, when ``psutil`` is not installed and ``cpu_stats``
        is ``None``.
    """

    def __init__(self, cpu_stats: bool | None = None) -> None:
        if cpu_stats is not None and not isinstance(cpu_stats, bool):
            raise TypeError(f"DeviceStatsMonitor(cpu_stats={cpu_stats!r}): give True, False or None (the host's "
                            "figures only on the CPU)")
        self.cpu_stats = cpu_stats
        self._evaluation_batches = 0  # the running validation's or test's batches so far

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        if stage != "fit":
            return
        if not trainer.loggers:
            from accelkit.errors import ConfigurationError

            raise ConfigurationError("DeviceStatsMonitor writes to the Trainer's loggers, and this Trainer has none "
                                     "(logger=False): give it a logger, or drop the callback")
        if self.cpu_stats is None and trainer.strategy.root_device.type == "cpu" and not host_stats_available():
            raise ModuleNotFoundError("DeviceStatsMonitor logs the host's CPU and memory figures on the CPU, which "
                                      "are read with psutil, not installed: pip install psutil, or pass "
                                      "cpu_stats=False")

    def _log(self, trainer: Trainer, hook: str, due: bool, step: int | None = None) -> None:
        if not (due or trainer.should_stop):
            return
        device = trainer.strategy.root_device
        on_host = device.type == "cpu"
        if (self.cpu_stats is False and on_host) or not trainer.is_global_zero:
            return
        stats = dict(trainer.strategy.accelerator.get_device_stats(device))
        if self.cpu_stats and not on_host:
            stats.update(host_stats())
        if step is None:
            step = trainer.run_state.progress.logger_step()
        prefix = f"{type(self).__qualname__}.{hook}"
        for logger in trainer.loggers:
            separator = getattr(logger, "group_separator", "/")
            logger.log_metrics({f"{prefix}{separator}{name}": value for name, value in stats.items()}, step=step)

    def on_train_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int) -> None:
        stepped = trainer.run_state.progress.batches_that_stepped  # before this batch: it has not stepped yet
        self._log(trainer, "on_train_batch_start", (stepped + 1) % trainer.log_every_n_steps == 0, stepped)

    def on_train_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        stepped = trainer.run_state.progress.logger_step()
        self._log(trainer, "on_train_batch_end", (stepped + 1) % trainer.log_every_n_steps == 0, stepped)

    def on_validation_start(self, trainer: Trainer, pl_module: Module) -> None:
        self._evaluation_batches = 0

    on_test_start = on_validation_start

    def _evaluation_batch(self, trainer: Trainer, hook: str, count: int) -> None:
        self._evaluation_batches += count
        self._log(trainer, hook, self._evaluation_batches % trainer.log_every_n_steps == 0)

    def on_validation_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        self._evaluation_batch(trainer, "on_validation_batch_start", 1)

    def on_validation_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        self._evaluation_batch(trainer, "on_validation_batch_end", 0)

    def on_test_batch_start(self, trainer: Trainer, pl_module: Module, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        self._evaluation_batch(trainer, "on_test_batch_start", 1)

    def on_test_batch_end(self, trainer: Trainer, pl_module: Module, outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        self._evaluation_batch(trainer, "on_test_batch_end", 0)


#: modules defining Lightning's ``Callback`` base class (``lightning.pytorch`` and the ``pytorch_lightning`` package)
LIGHTNING_CALLBACK_MODULES = ("lightning.pytorch.callbacks.callback", "pytorch_lightning.callbacks.callback")


def lightning_callback_base(obj: object) -> type | None:
    """The ``Callback`` base class of Lightning (``lightning.pytorch`` or ``pytorch_lightning``) that ``obj``'s class
    derives from, or ``None``: told from the module names of the class's MRO, so Lightning is never imported."""
    for klass in type(obj).__mro__:
        if klass.__qualname__ == "Callback" and klass.__module__ in LIGHTNING_CALLBACK_MODULES:
            return klass
    return None


def callback_base(obj: object) -> type:
    """The base class whose hooks count as "not overridden" for the callback ``obj``: :class:`Callback`, or for a
    callback written for Lightning, Lightning's ``Callback`` (see :func:`lightning_callback_base`)."""
    if isinstance(obj, Callback):
        return Callback
    return lightning_callback_base(obj) or Callback


#: Lightning's classes whose callbacks its loops run after the Module's epoch-end hooks (``(module, qualname)``)
LIGHTNING_MONITORING_CLASSES = frozenset(
    (f"{package}.callbacks.{module}", name)
    for package in ("lightning.pytorch", "pytorch_lightning")
    for module, name in (("checkpoint", "Checkpoint"), ("early_stopping", "EarlyStopping")))


def monitors_metrics(callback: object) -> bool:
    """Whether ``callback`` monitors metrics (:attr:`~accelkit.Callback.monitors_metrics`); a callback written for
    Lightning does when it derives from Lightning's ``Checkpoint`` or ``EarlyStopping``, as in Lightning's loops
    (told from the class names, so Lightning is never imported)."""
    if isinstance(callback, Callback):
        return bool(callback.monitors_metrics)
    return any((klass.__module__, klass.__qualname__) in LIGHTNING_MONITORING_CLASSES
               for klass in type(callback).__mro__)


#: Lightning's own callback classes that read parts of Lightning's Trainer which accelkit's does not reproduce (what
#: each reads); refused when the Trainer is made, naming accelkit's callback of the same name and arguments, except
#: ``ThroughputMonitor``, which accelkit does not provide
LIGHTNING_OWN_REFUSED: dict[str, str] = {
    "LearningRateMonitor": "the fit loop, trainer.fit_loop",
    "StochasticWeightAveraging": "the fit loop, trainer.fit_loop",
    "GradientAccumulationScheduler": "the LightningModule class: it checks isinstance(pl_module, LightningModule)",
    "DeviceStatsMonitor": "the logger connector, trainer._logger_connector",
    "ThroughputMonitor": "the precision plugin, trainer.precision_plugin",
}


def _refused_lightning_class(item: object) -> str:
    """Why ``item``, an instance of (a subclass of) one of :data:`LIGHTNING_OWN_REFUSED`, cannot run on accelkit's
    Trainer and what to use, or ``""``."""
    for klass in type(item).__mro__:
        name = klass.__qualname__
        if name in LIGHTNING_OWN_REFUSED and klass.__module__.startswith(("lightning.pytorch.callbacks.",
                                                                           "pytorch_lightning.callbacks.")):
            use = ("There is no accelkit ThroughputMonitor yet (Timer reports the time spent per stage)"
                   if name == "ThroughputMonitor" else
                   f"Use accelkit's, with the same arguments: from accelkit.callbacks import {name}")
            return (f"callbacks: {type(item).__name__} is Lightning's own {klass.__module__}.{name}, which needs a "
                    f"part of Lightning's Trainer that accelkit's does not have ({LIGHTNING_OWN_REFUSED[name]}) and "
                    f"would fail in the middle of the fit. {use}.")
    return ""


def callback_list(callbacks: object) -> list[Callback]:
    """``callbacks=`` as a list (one, a list, or ``None``) of :class:`~accelkit.Callback` instances, or of
    Lightning ``Callback`` instances (libraries' callbacks for Lightning; their hooks run as accelkit's do)."""
    if callbacks is None:
        return []
    items = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    for item in items:
        if not isinstance(item, Callback) and lightning_callback_base(item) is None:
            raise TypeError(f"callbacks must be accelkit.Callback instances (or, with lightning installed, "
                            f"lightning.pytorch.Callback ones), got {item!r} ({type(item).__name__})")
        refused = "" if isinstance(item, Callback) else _refused_lightning_class(item)
        if refused:
            raise ConfigurationError(refused)
    return cast("list[Callback]", items)  # a Lightning callback is called through the same hooks (duck-typed)


def monitored_score(value: float | torch.Tensor) -> torch.Tensor:
    """A monitored metric's value as the 0-d CPU tensor a callback compares (``EarlyStopping``,
    ``ModelCheckpoint``): a ``float64`` value stays ``float64`` (as Lightning keeps it: a module computing its loss
    in double precision gets its best score back exactly); any other number or tensor becomes ``float32``."""
    score = torch.as_tensor(value).detach().cpu().reshape(())
    return score if score.dtype == torch.float64 else score.float()
