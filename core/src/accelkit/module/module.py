"""``accelkit.Module``: the user's model, with the names LightningModule users know."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from sys import _getframe
from typing import IO, TYPE_CHECKING, Any, TypedDict, Unpack, cast, overload

import torch
from torch import nn

from accelkit.module.datamodule import DataHooks
from accelkit.module.export import ExportMixin
from accelkit.module.hooks import CheckpointHooks, ModelHooks
from accelkit.module.hparams import HyperparametersMixin
from accelkit.module.optimizers import Optimizer
from accelkit.utilities.types import LRSchedulerPLType, OptimizerLRScheduler

if TYPE_CHECKING:
    from accelkit.loops.optimization import Optimization
    from accelkit.trainer.trainer import Trainer


#: Lightning's names of Module properties whose accelkit names say what they mean without naming a kind of device
#: (the core names none): ``module.on_gpu`` is ``module.on_graphics_processor``
LIGHTNING_NAMES = {"on_gpu": "on_graphics_processor"}

#: what :meth:`Module.optimizers` returns: the run's optimizer (wrapped, or the raw ``torch.optim`` one), or a list
#: of them when there are several (Lightning's ``MODULE_OPTIMIZERS``)
OptimizerOrOptimizers = Optimizer | torch.optim.Optimizer | list[Optimizer] | list[torch.optim.Optimizer]


class PrintOptions(TypedDict, total=False):
    """The keywords of the built-in ``print`` that :meth:`Module.print` passes on."""

    sep: str | None
    end: str | None
    file: IO[str] | None
    flush: bool


class LogOptions(TypedDict, total=False):
    """The options of :meth:`Module.log` (see there), which :meth:`Module.log_dict` gives every item."""

    prog_bar: bool
    logger: bool | None
    on_step: bool | None
    on_epoch: bool | None
    reduce_fx: str | Callable[..., object]
    enable_graph: bool
    sync_dist: bool
    sync_dist_group: object
    add_dataloader_idx: bool
    batch_size: int | None
    metric_attribute: str | None
    rank_zero_only: bool


class Module(ModelHooks, DataHooks, CheckpointHooks, HyperparametersMixin, ExportMixin, nn.Module):
    """A :class:`torch.nn.Module` that knows how to train itself: Lightning's ``LightningModule`` under our name.

    Override :meth:`training_step` and :meth:`configure_optimizers`; optionally the evaluation steps, the
    ``*_dataloader`` methods and any hook of :class:`~accelkit.module.hooks.ModelHooks`,
    :class:`accelkit.module.datamodule.DataHooks` and :class:`~accelkit.module.hooks.CheckpointHooks`. Code written
    for a LightningModule ports by changing the base class: the names and signatures are the same.
    """

    #: ``False`` for manual optimization: ``training_step`` calls ``self.optimizers()``, ``manual_backward`` and
    #: ``opt.step()`` itself
    automatic_optimization: bool = True
    if TYPE_CHECKING:
        # the running Trainer, kept in the instance's ``__dict__`` by the ``trainer`` property (absent or ``None``
        # outside a run): annotated for the type checker only (``log`` reads it without the property's call); not a
        # class annotation at run time, which ``torch.jit.script`` would try to compile
        _trainer: Trainer
    #: ``load_state_dict`` strictness when a checkpoint is restored by the Trainer
    strict_loading: bool = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.__dict__["_trainer"] = None
        self.__dict__["example_input_array"] = None

    def __getstate__(self) -> dict[str, object]:
        state = dict(super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__)
        state["_trainer"] = None  # a Module is pickled into workers without its Trainer
        state.pop("_fabric", None)  # ...and without the Fabric that set it up
        return state

    # ----------------------------------------------------------------- context
    @property
    def trainer(self) -> Trainer | None:
        """The :class:`~accelkit.Trainer` running this module (``None`` outside a run)."""
        return self.__dict__.get("_trainer")

    @trainer.setter
    def trainer(self, trainer: Trainer | None) -> None:
        self.__dict__["_trainer"] = trainer

    @property
    def fabric(self) -> Any:
        """The :class:`~accelkit.Fabric` that set this module up (``None`` otherwise): under it, :meth:`log`,
        :meth:`log_dict`, :attr:`logger` and :meth:`print` go through the Fabric, as in Lightning."""
        return self.__dict__.get("_fabric")

    @fabric.setter
    def fabric(self, fabric: Any) -> None:
        self.__dict__["_fabric"] = fabric

    @property
    def device(self) -> torch.device:
        """Device of the module's first parameter (CPU if it has none)."""
        for param in self.parameters():
            return param.device
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        """Floating-point dtype of the module's first floating parameter (``torch.get_default_dtype()`` if none)."""
        for param in self.parameters():
            if param.is_floating_point():
                return param.dtype
        return torch.get_default_dtype()

    @property
    def current_epoch(self) -> int:
        """The epoch being run (0-based)."""
        return self.trainer.current_epoch if self.trainer else 0

    @property
    def global_step(self) -> int:
        """Number of optimizer steps taken."""
        return self.trainer.global_step if self.trainer else 0

    @property
    def global_rank(self) -> int:
        """This process's index among all processes."""
        return self.trainer.global_rank if self.trainer else 0

    @property
    def local_rank(self) -> int:
        """This process's index on its node."""
        return self.trainer.local_rank if self.trainer else 0

    @property
    def logger(self) -> Any:
        """The Trainer's first logger (``None`` without one)."""
        if self.trainer:
            return self.trainer.logger
        return self.fabric.logger if self.fabric is not None else None

    @property
    def loggers(self) -> list[Any]:
        """Every logger of the Trainer (of the Fabric, under one)."""
        if self.trainer:
            return self.trainer.loggers
        return self.fabric.loggers if self.fabric is not None else []

    @property
    def on_graphics_processor(self) -> bool:
        """Whether the module's parameters are on a graphics processor (Lightning's ``on_gpu``, which is this
        property under Lightning's name). In a run, the run's accelerator says whether its devices count as one
        (:attr:`Accelerator.is_graphics_processor <accelkit.Accelerator.is_graphics_processor>`) and the module must
        be on the run's device; outside a run, the accelerator classes loaded in this process that claim the
        module's device type say so."""
        from accelkit.accelerator import graphics_processor_device_types

        device = self.device
        strategy = getattr(self.trainer, "strategy", None)
        accelerator = getattr(strategy, "accelerator", None)
        if accelerator is not None and strategy is not None:
            return bool(accelerator.is_graphics_processor) and device.type == strategy.root_device.type
        return device.type in graphics_processor_device_types()

    def print(self, *args: object, **kwargs: Unpack[PrintOptions]) -> None:
        """``print`` from the global-zero process only (under a Fabric: :meth:`accelkit.Fabric.print`)."""
        if self.trainer is None and self.fabric is not None:
            self.fabric.print(*args, **kwargs)
        elif self.trainer is None or self.trainer.is_global_zero:
            print(*args, **kwargs)

    def freeze(self) -> None:
        """Turn gradients off for every parameter and switch to evaluation mode."""
        for param in self.parameters():
            param.requires_grad = False
        self.eval()

    def unfreeze(self) -> None:
        """Turn gradients back on for every parameter and switch to training mode."""
        for param in self.parameters():
            param.requires_grad = True
        self.train()

    # ----------------------------------------------------------------- steps
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """What ``self(x)`` computes; override it (``training_step`` usually calls it)."""
        raise NotImplementedError(f"{type(self).__name__} does not define forward(); `self(x)` needs it")

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """Compute the loss of one batch ``(batch, batch_idx)``: return the loss tensor, a dict with ``"loss"``,
        or ``None`` to skip the batch. ``training_step(self, batch)`` without ``batch_idx`` is accepted."""
        raise NotImplementedError(f"{type(self).__name__} must implement training_step(batch, batch_idx) to be fit")

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        """Evaluate one validation batch ``(batch, batch_idx[, dataloader_idx])`` and log metrics with :meth:`log`."""

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        """Evaluate one test batch ``(batch, batch_idx[, dataloader_idx])`` and log metrics with :meth:`log`."""

    def predict_step(self, batch: Any, batch_idx: int = 0, dataloader_idx: int = 0) -> Any:
        """Return the prediction for one batch; by default ``self(batch)``, the whole batch as Lightning passes it
        (a ``TensorDataset``'s batch is a list: override ``predict_step`` to pass ``batch[0]``)."""
        return self(batch)

    def configure_optimizers(self) -> OptimizerLRScheduler:
        """Return an optimizer, a list of them, ``(optimizers, schedulers)``, a dict
        ``{"optimizer": ..., "lr_scheduler": scheduler or {"scheduler": ..., "interval": "epoch"|"step",
        "frequency": 1, "monitor": "val_loss", "name": ..., "strict": True}}`` or a list of such dicts."""
        raise NotImplementedError(f"{type(self).__name__} must implement configure_optimizers() to be fit")

    def configure_callbacks(self) -> object:
        """Callbacks this module needs (a callback or a list); they replace Trainer callbacks of the same type."""
        return []

    # ----------------------------------------------------------------- logging
    def log(self, name: str, value: Any, prog_bar: bool = False, logger: bool | None = None,
            on_step: bool | None = None, on_epoch: bool | None = None, reduce_fx: str | Callable[..., object] = "mean",
            enable_graph: bool = False, sync_dist: bool = False, sync_dist_group: object = None,
            add_dataloader_idx: bool = True, batch_size: int | None = None, metric_attribute: str | None = None,
            rank_zero_only: bool = False) -> None:
        """Record a metric.

        :param name: the metric's name.
        :param value: a number (a ``bool`` logs as 1.0 or 0.0, as in Lightning), a scalar tensor, or a metric
            object with ``update``/``compute``/``reset`` (a torchmetrics ``Metric``): its ``compute()`` is the epoch
            value, and it is reset after each epoch.
            Tensors stay on the device until read: by the loggers every ``log_every_n_steps`` steps and at epoch
            end, or through ``trainer.callback_metrics`` and the like (computed when read, as in Lightning). A
            tensor's value is taken when logged (a per-step value is copied, as in Lightning): changing the tensor
            in place afterwards does not change what was logged.
        :param prog_bar: show it in the progress bar.
        :param logger: send it to the loggers (default ``True``).
        :param on_step: log the per-step value (default: ``True`` in training, ``False`` in evaluation). In a hook
            that runs once per loop or epoch (``on_train_start``, ``on_validation_start``, ``on_test_start``,
            ``on_*_epoch_start``, ``on_*_epoch_end``) it must be ``False`` (the default there), as in Lightning: a
            value logged there is the epoch's (``on_train_start``'s, the first epoch's).
        :param on_epoch: log the epoch aggregate (default: ``False`` in training, ``True`` in evaluation and in those
            hooks, where it must be ``True``).
        :param reduce_fx: epoch aggregate: ``"mean"`` (weighted by batch size), ``"sum"``, ``"max"``, ``"min"``
            (or ``torch.mean``/``torch.sum``/``torch.max``/``torch.min``).
        :param sync_dist: reduce across processes with ``reduce_fx``: the epoch aggregate, and a per-step value
            when it is logged (a collective each step, as in Lightning). An epoch mean weighs each process by the
            batch sizes it logged, as Lightning does.
        :param batch_size: weight for the mean (default: the batch's first dimension).
        :param rank_zero_only: the value is not reduced across processes (as Lightning: for a value logged from
            rank 0 only, or one the program has already reduced itself); each process that logs it keeps its own.
            A callback monitoring it on a process that did not log it fails there, naming it.
        :param add_dataloader_idx: with several evaluation loaders, suffix the name with ``/dataloader_idx_N`` (after
            ``_step``/``_epoch``, as Lightning: ``loss_epoch/dataloader_idx_1``).
        """
        try:  # (the ``trainer`` property's value, read without its call: this runs every step)
            store = self._trainer.run_state.metrics
        except AttributeError:  # no trainer (``None``, or never attached)
            fabric = self.__dict__.get("_fabric")
            if fabric is not None:  # under a Fabric: its loggers get the value, as Lightning's
                fabric.log(name, value)
                return
            raise RuntimeError(f"{type(self).__name__}.log({name!r}, ...) was called outside a Trainer run") from None
        if store.repeats:  # (none while a captured step records it: torch.compile reads no frame)
            # a repeat (the per-step log): this name logged before by this function with these options and a
            # floating-point scalar tensor of this dtype: one lookup; the first decisions stand (MetricStore.repeats).
            # A value without ``ndim``/``dtype`` or an option that cannot be a key is not one.
            try:
                again = store.repeats[(name, _getframe(1).f_code, value.ndim, value.dtype, prog_bar, logger, on_step,
                                       on_epoch, reduce_fx, sync_dist, rank_zero_only, add_dataloader_idx, enable_graph,
                                       sync_dist_group)]
            except (AttributeError, KeyError, TypeError):
                if type(value) is float:  # a Python float: the same lookup, its kind in place of ndim and dtype
                    try:
                        again = store.repeats.get((name, _getframe(1).f_code, None, float, prog_bar, logger, on_step,
                                                   on_epoch, reduce_fx, sync_dist, rank_zero_only, add_dataloader_idx,
                                                   enable_graph, sync_dist_group))
                    except TypeError:
                        again = None
                    if again is not None and store.log_again(again, value, batch_size):
                        return
            else:
                if again.quick:  # a step value logged by the hook itself: kept here, detached and copied (as in
                    again.step_value, again.fresh = value.detach().clone(), True  # Lightning)
                    return
                if store.log_again(again, value, batch_size):  # (False: another hook runs the helper: in full)
                    return
        if sync_dist_group is not None or enable_graph:
            if sync_dist_group is not None:
                raise ValueError(f"log({name!r}): sync_dist_group is not supported; metrics sync over all processes")
            raise ValueError(f"log({name!r}): enable_graph=True is not supported; logged values are detached")
        store.log(name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist, batch_size, rank_zero_only,
                  add_dataloader_idx, _getframe(1).f_code if store.repeats is not None else None)

    def log_dict(self, dictionary: Mapping[str, object], **kwargs: Unpack[LogOptions]) -> None:
        """:meth:`log` each item of ``dictionary`` with the same options (a torchmetrics collection too)."""
        for name, value in dictionary.items():
            self.log(name, value, **kwargs)

    @overload
    def all_gather(self, data: torch.Tensor, group: object = None, sync_grads: bool = False) -> torch.Tensor: ...

    @overload
    def all_gather(self, data: object, group: object = None, sync_grads: bool = False) -> object: ...

    def all_gather(self, data: object, group: object = None, sync_grads: bool = False) -> object:
        """Gather tensors (or nested collections of them) from every process along a new first dimension."""
        from accelkit.utilities.apply_func import apply_to_tensors

        if group is not None:
            raise ValueError("all_gather(group=...) is not supported; it gathers from every process")
        strategy = self.trainer.strategy if self.trainer else None
        if strategy is None:
            return apply_to_tensors(data, lambda t: t.unsqueeze(0))

        def gather(t: torch.Tensor) -> torch.Tensor:
            if sync_grads:
                raise ValueError("all_gather(sync_grads=True) is not supported here")
            return strategy.all_gather(t)

        return apply_to_tensors(data, gather)

    # ----------------------------------------------------------------- manual optimization
    def optimizers(self, use_pl_optimizer: bool = True) -> OptimizerOrOptimizers:
        """The optimizers of the run: one if there is one, else a list (wrapped so ``step`` goes through the
        precision and strategy; ``use_pl_optimizer=False`` gives the raw ``torch.optim`` objects)."""
        optimization = self._require_optimization("optimizers()")
        if use_pl_optimizer:
            wrapped = optimization.wrapped
            return wrapped[0] if len(wrapped) == 1 else list(wrapped)
        raw = optimization.trainer.optimizers
        return raw[0] if len(raw) == 1 else list(raw)

    def lr_schedulers(self) -> LRSchedulerPLType | list[LRSchedulerPLType] | None:
        """The schedulers of the run: ``None``, one, or a list."""
        trainer = self._require_trainer("lr_schedulers()")
        scheds = [c.scheduler for c in trainer.lr_scheduler_configs]
        return None if not scheds else scheds[0] if len(scheds) == 1 else scheds

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Back-propagate in manual optimization, through the precision (loss scaling) and the strategy, with
        the ``on_before_backward``/``on_after_backward`` hooks."""
        optimization = self._require_optimization("manual_backward()")
        if self.automatic_optimization:
            raise RuntimeError("manual_backward() is for manual optimization; set `self.automatic_optimization = "
                               "False` in __init__, or return the loss from training_step")
        optimization.backward(loss, *args, **kwargs)

    def toggle_optimizer(self, optimizer: Optimizer | torch.optim.Optimizer) -> None:
        """Let only ``optimizer``'s parameters require gradients (others are frozen until
        :meth:`untoggle_optimizer`)."""
        optimizer = getattr(optimizer, "optimizer", optimizer)
        mine = {id(p) for group in optimizer.param_groups for p in group["params"]}
        saved = self.__dict__.setdefault("_toggled", {})
        for param in self.parameters():
            if id(param) not in mine and id(param) not in saved:
                saved[id(param)] = param.requires_grad
                param.requires_grad = False

    def untoggle_optimizer(self, optimizer: Optimizer | torch.optim.Optimizer) -> None:
        """Restore ``requires_grad`` of the parameters :meth:`toggle_optimizer` froze."""
        saved = self.__dict__.pop("_toggled", {})
        for param in self.parameters():
            if id(param) in saved:
                param.requires_grad = saved[id(param)]

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Optimizer | torch.optim.Optimizer) -> Iterator[None]:
        """:meth:`toggle_optimizer` for the duration of a ``with`` block."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    def clip_gradients(self, optimizer: Optimizer | torch.optim.Optimizer, gradient_clip_val: float | None = None,
                       gradient_clip_algorithm: str | None = None) -> None:
        """Clip the gradients of ``optimizer``'s parameters by norm (default) or value, after bringing them to
        their true scale (a gradient scaler's ``unscale_``)."""
        optimization = self._require_optimization("clip_gradients()")
        # (the wrapper's ``optimizer`` is the torch one; a torch optimizer has no ``optimizer``: itself)
        raw = cast(torch.optim.Optimizer, getattr(optimizer, "optimizer", optimizer))
        optimization.clip(raw, gradient_clip_val, gradient_clip_algorithm)

    def _require_trainer(self, what: str) -> Trainer:
        return self._require_optimization(what).trainer

    def _require_optimization(self, what: str) -> Optimization:
        optimization = None if self.trainer is None else self.trainer.run_state.optimization
        if optimization is None:
            raise RuntimeError(f"{type(self).__name__}.{what} is only available while a Trainer fits the module")
        return optimization


for _lightning_name, _name in LIGHTNING_NAMES.items():
    setattr(Module, _lightning_name, getattr(Module, _name))
#: the properties accelkit's classes give a Module (``trainer``, ``device``, ``hparams`` ...), which
#: ``torch.jit.script`` leaves alone when :meth:`~accelkit.module.export.ExportMixin.to_torchscript` compiles it
Module.__jit_unused_properties__ = sorted({name for klass in Module.__mro__ if klass.__module__.startswith("accelkit.")
                                           for name, value in vars(klass).items() if isinstance(value, property)})
