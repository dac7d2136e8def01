"""Finetuning callbacks: freeze parts of a model before training, then unfreeze them into new parameter groups
of the running optimizer as training goes on (Lightning's ``BaseFinetuning`` and ``BackboneFinetuning``)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from accelkit.callbacks.base import Callback
from accelkit.errors import ConfigurationError

if TYPE_CHECKING:
    from accelkit.module.module import Module
    from accelkit.strategies.base import Strategy
    from accelkit.trainer.trainer import Trainer

log = logging.getLogger(__name__)

#: the batch-norm layers :meth:`~accelkit.callbacks.BaseFinetuning.freeze` treats apart (``train_bn``); subclasses count
#: too
BATCH_NORM_TYPES = (
    nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
    nn.LazyBatchNorm1d, nn.LazyBatchNorm2d, nn.LazyBatchNorm3d,
)

_METADATA = "internal_optimizer_metadata"


def multiplicative(epoch: int) -> float:
    """:class:`BackboneFinetuning`'s default ``lambda_func``: the backbone's learning rate doubles each epoch."""
    return 2.0


class BaseFinetuning(Callback):
    """Base class of finetuning callbacks: freeze modules before the optimizers are built, unfreeze them later
    into new parameter groups of the running optimizer.

    Override two methods:

    * :meth:`freeze_before_training` ``(pl_module)``: called in ``setup``, before ``configure_optimizers``;
      freeze what must not train at first (:meth:`freeze`).
    * :meth:`finetune_function` ``(pl_module, epoch, optimizer)``: called at the start of every training epoch
      for every optimizer; unfreeze modules and add their parameters to the optimizer
      (:meth:`~accelkit.callbacks.BaseFinetuning.unfreeze_and_add_param_group`).

    ``configure_optimizers`` should give the optimizer the trainable parameters only, e.g.
    ``Adam(filter(lambda p: p.requires_grad, self.parameters()))``.

    The parameter groups the callback sees are saved in checkpoints (by parameter name). A fit resumed from a
    checkpoint written after a milestone rebuilds those groups in ``on_fit_start``, before the optimizer's state
    is loaded (as in Lightning), and makes the parameters of the groups added by the callback trainable again
    (Lightning leaves them frozen after a resume, its issue 21901).

    Under ``ddp``/``ddp_spawn`` the ``DistributedDataParallel`` wrapper only synchronises the parameters that
    were trainable when it was built; the gradients of parameters unfrozen later are averaged over the
    processes by this callback before each optimizer step, so every process keeps the same weights (Lightning
    lets them drift apart, its issue 20340).
    """

    # per optimizer (by id), the trainable parameters the wrapper does not synchronise (set by _find_unsynced)
    _unsynced: dict[int, list[nn.Parameter]]

    def __init__(self) -> None:
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False

    # ----------------------------------------------------------------- module helpers (Lightning's names)
    @staticmethod
    def flatten_modules(modules: nn.Module | Iterable[object]) -> list[nn.Module]:
        """The leaf modules of ``modules`` (a module, a ``ModuleDict``, or nested iterables of modules) and the
        modules that hold parameters of their own, each once."""
        found: list[nn.Module] = []
        seen: set[int] = set()
        for module in _walk(modules):
            if id(module) in seen:
                continue
            seen.add(id(module))
            has_children = next(module.children(), None) is not None
            if not has_children or next(module.parameters(recurse=False), None) is not None:
                found.append(module)
        return found

    @staticmethod
    def filter_params(modules: nn.Module | Iterable[object], train_bn: bool = True,
                      requires_grad: bool = True) -> Generator[nn.Parameter, None, None]:
        """The parameters of ``modules`` whose ``requires_grad`` equals ``requires_grad``; batch-norm layers are
        left out with ``train_bn=False``."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, BATCH_NORM_TYPES) and not train_bn:
                continue
            for param in module.parameters(recurse=False):
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: nn.Module | Iterable[object]) -> None:
        """Set ``requires_grad=True`` on every parameter of ``modules``; batch-norm layers track their running
        statistics again."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, BATCH_NORM_TYPES):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: nn.Module) -> None:
        """Freeze the parameters ``module`` holds itself (not its children's); a batch-norm layer also stops
        tracking running statistics."""
        if isinstance(module, BATCH_NORM_TYPES):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: nn.Module | Iterable[object], train_bn: bool = True) -> None:
        """Freeze every parameter of ``modules``; with ``train_bn=True`` (the default) batch-norm layers stay
        trainable."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, BATCH_NORM_TYPES) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def filter_on_optimizer(optimizer: torch.optim.Optimizer, params: Iterable[nn.Parameter]) -> list[nn.Parameter]:
        """``params`` less those already in one of ``optimizer``'s parameter groups (with a warning: they are
        skipped)."""
        params = list(params)
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        fresh = [p for p in params if id(p) not in held]
        if len(fresh) != len(params):
            warnings.warn(
                f"{len(params) - len(fresh)} of the {len(params)} parameters to unfreeze are already in a parameter "
                f"group of {type(optimizer).__name__}; they are skipped (a parameter can be in one group only). "
                "Give the optimizer the trainable parameters only, e.g. "
                "Adam(filter(lambda p: p.requires_grad, self.parameters())).", UserWarning, stacklevel=3)
        return fresh

    @staticmethod
    def unfreeze_and_add_param_group(modules: nn.Module | Iterable[object], optimizer: torch.optim.Optimizer,
                                     lr: float | None = None, initial_denom_lr: float = 10.0,
                                     train_bn: bool = True) -> None:
        """Make ``modules`` trainable and add their parameters to ``optimizer`` as a new parameter group.

        :param lr: the group's learning rate; ``None``: the first group's learning rate divided by
            ``initial_denom_lr``.
        :param initial_denom_lr: see ``lr``.
        :param train_bn: also add the batch-norm layers' parameters.
        """
        if lr is None and not initial_denom_lr > 0:
            raise ValueError(f"unfreeze_and_add_param_group(initial_denom_lr={initial_denom_lr!r}): the divisor of "
                             "the first group's learning rate must be > 0")
        # parameters that were trainable all along (batch norm with train_bn) and already optimized are expected
        # to be in a group: skipped without the warning filter_on_optimizer gives for frozen ones
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        trained = {id(p) for p in BaseFinetuning.filter_params(modules, train_bn=train_bn) if id(p) in held}
        BaseFinetuning.make_trainable(modules)
        base_lr = optimizer.param_groups[0]["lr"] if lr is None else float(lr)
        denominator = initial_denom_lr if lr is None else 1.0
        params = [p for p in BaseFinetuning.filter_params(modules, train_bn=train_bn) if id(p) not in trained]
        params = BaseFinetuning.filter_on_optimizer(optimizer, params)
        if params:
            optimizer.add_param_group({"params": params, "lr": base_lr / denominator})

    # ----------------------------------------------------------------- what subclasses write
    def freeze_before_training(self, pl_module: Module) -> None:
        """Freeze what must not train at first (called in ``setup``, before ``configure_optimizers``)."""
        raise NotImplementedError(f"{type(self).__name__} must override freeze_before_training(pl_module)")

    def finetune_function(self, pl_module: Module, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        """Unfreeze what trains from ``epoch`` on (called at every training epoch start, for each optimizer)."""
        raise NotImplementedError(f"{type(self).__name__} must override finetune_function(pl_module, epoch, "
                                  "optimizer)")

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, object]:
        """The optimizers' parameter groups as this callback saw them, parameters by name."""
        return {_METADATA: self._metadata}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep the saved parameter groups; the next fit rebuilds them in ``on_fit_start``."""
        self._restarting = True
        # Lightning before 1.6 saved the groups themselves as the state
        self._internal_optimizer_metadata = dict(state_dict.get(_METADATA, state_dict))

    @property
    def _metadata(self) -> dict[int, list[dict[str, Any]]]:
        # subclasses that skip BaseFinetuning.__init__ (as Lightning's older docs show) still work
        return self.__dict__.setdefault("_internal_optimizer_metadata", {})

    # ----------------------------------------------------------------- hooks
    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """Freeze before the optimizers are configured."""
        self.freeze_before_training(pl_module)

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Note which parameters a distributed wrapper synchronises; on a resume, rebuild the saved parameter
        groups (before the optimizer's state is loaded)."""
        self._wrapper_synced = _wrapper_synced(trainer, pl_module)
        if self.__dict__.get("_restarting"):
            named = dict(pl_module.named_parameters())
            for index, optimizer in enumerate(trainer.optimizers):
                saved = self._metadata.get(index)
                if saved is not None:
                    self._rebuild(pl_module, index, optimizer, saved, named)
            self._restarting = False
        self._find_unsynced(trainer)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Call :meth:`finetune_function` for every optimizer and record the groups it added."""
        for index, optimizer in enumerate(trainer.optimizers):
            before = len(optimizer.param_groups)
            self.finetune_function(pl_module, trainer.current_epoch, optimizer)
            self._store(pl_module, index, before, optimizer.param_groups)
        self._find_unsynced(trainer)

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: Module, optimizer: torch.optim.Optimizer) -> None:
        """Average the gradients of unfrozen parameters that the distributed wrapper does not synchronise."""
        params = self.__dict__.get("_unsynced", {}).get(id(optimizer))
        if params:
            _average_gradients(trainer.strategy, params)

    def teardown(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        """A checkpoint loaded by ``validate``/``test``/``predict`` does not rebuild groups in a later fit."""
        self._restarting = False
        self._unsynced = {}

    # ----------------------------------------------------------------- internals
    def _store(self, pl_module: Module, index: int, before: int, groups: list[dict[str, Any]]) -> None:
        names = {p: n for n, p in pl_module.named_parameters()}
        metadata = self._metadata
        if index not in metadata:
            metadata[index] = _named_groups(groups, names, pl_module, index)
        elif len(groups) != before:  # the groups finetune_function added this epoch
            metadata[index].extend(_named_groups(groups[before:], names, pl_module, index))

    def _rebuild(self, pl_module: Module, index: int, optimizer: torch.optim.Optimizer, saved: list[dict[str, Any]],
                 named: dict[str, nn.Parameter]) -> None:
        missing = [n for group in saved for n in group["params"] if n not in named]
        if missing:
            raise ValueError(f"{type(self).__name__}: the checkpoint's parameter groups of optimizer {index} name "
                             f"parameters {missing[:3]} that {type(pl_module).__name__} does not have; was the "
                             "checkpoint written for another model?")
        configured = len(optimizer.param_groups)
        for group in saved[configured:]:  # the groups a finetune_function added before the checkpoint
            params = [named[n] for n in group["params"]]
            for name in group["params"]:  # trainable again, as they were when the checkpoint was written
                owner = pl_module.get_submodule(name.rpartition(".")[0])
                if isinstance(owner, BATCH_NORM_TYPES):
                    owner.track_running_stats = True
                named[name].requires_grad = True
            optimizer.add_param_group({**{k: v for k, v in group.items() if k != "params"}, "params": params})

    def _find_unsynced(self, trainer: Trainer) -> None:
        synced = self.__dict__.get("_wrapper_synced")
        self._unsynced = {}
        if synced is None:
            return
        for optimizer in trainer.optimizers:
            params = [p for group in optimizer.param_groups for p in group["params"]
                      if p.requires_grad and id(p) not in synced]
            if params:
                self._unsynced[id(optimizer)] = params


class BackboneFinetuning(BaseFinetuning):
    """Train a model's ``backbone`` attribute from a given epoch on, at a learning rate that grows each epoch.

    The backbone is frozen before training; at ``unfreeze_backbone_at_epoch`` its parameters join the optimizer
    as a new group at ``backbone_initial_lr`` (default: the current learning rate x
    ``backbone_initial_ratio_lr``). Each later epoch multiplies that rate by ``lambda_func(epoch + 1)``; with
    ``should_align`` it never exceeds the first group's learning rate.

    :param unfreeze_backbone_at_epoch: the epoch (0-based) at which the backbone starts training.
    :param lambda_func: ``epoch -> factor`` applied to the backbone's learning rate each later epoch.
    :param backbone_initial_ratio_lr: the backbone's first learning rate as a fraction of the current one.
    :param backbone_initial_lr: the backbone's first learning rate (wins over the ratio).
    :param should_align: cap the backbone's learning rate at the first group's.
    :param initial_denom_lr: passed to :meth:`~accelkit.callbacks.BaseFinetuning.unfreeze_and_add_param_group`
        (used when no learning rate is given).
    :param train_bn: train the backbone's batch-norm layers while it is frozen, and add them when it unfreezes.
    :param verbose: log both learning rates every epoch from the unfreezing on.
    :param rounding: decimals of the logged learning rates.
    """

    def __init__(self, unfreeze_backbone_at_epoch: int = 10, lambda_func: Callable[[int], float] = multiplicative,
                 backbone_initial_ratio_lr: float = 10e-2, backbone_initial_lr: float | None = None,
                 should_align: bool = True, initial_denom_lr: float = 10.0, train_bn: bool = True,
                 verbose: bool = False, rounding: int = 12) -> None:
        super().__init__()
        problems = []
        if not _is_int(unfreeze_backbone_at_epoch) or unfreeze_backbone_at_epoch < 0:
            problems.append(f"unfreeze_backbone_at_epoch={unfreeze_backbone_at_epoch!r} must be an int >= 0")
        if not callable(lambda_func):
            problems.append(f"lambda_func={lambda_func!r} must be a function of the epoch")
        for name, value in (("backbone_initial_ratio_lr", backbone_initial_ratio_lr),
                            ("initial_denom_lr", initial_denom_lr)):
            if not _is_positive(value):
                problems.append(f"{name}={value!r} must be a number > 0")
        if backbone_initial_lr is not None and not _is_positive(backbone_initial_lr):
            problems.append(f"backbone_initial_lr={backbone_initial_lr!r} must be a number > 0 or None")
        if not _is_int(rounding) or rounding < 0:
            problems.append(f"rounding={rounding!r} must be an int >= 0")
        if problems:
            raise ConfigurationError([f"BackboneFinetuning({p})" for p in problems])
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    def state_dict(self) -> dict[str, object]:
        """The parameter groups and the backbone's last learning rate."""
        return {_METADATA: self._metadata, "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.previous_backbone_lr = state_dict.get("previous_backbone_lr")
        super().load_state_dict({k: v for k, v in state_dict.items() if k != "previous_backbone_lr"})

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        """Check the module has a backbone, then as :meth:`BaseFinetuning.on_fit_start`."""
        _backbone(pl_module)
        super().on_fit_start(trainer, pl_module)

    def freeze_before_training(self, pl_module: Module) -> None:
        """Freeze ``pl_module.backbone`` (its batch-norm layers stay trainable with ``train_bn``)."""
        self.freeze(_backbone(pl_module), train_bn=self.train_bn)

    def finetune_function(self, pl_module: Module, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        """Unfreeze the backbone at ``unfreeze_backbone_at_epoch``; afterwards grow its learning rate."""
        current_lr = optimizer.param_groups[0]["lr"]
        if epoch == self.unfreeze_backbone_at_epoch:
            backbone_lr = self.backbone_initial_lr if self.backbone_initial_lr is not None \
                else current_lr * self.backbone_initial_ratio_lr
            self.previous_backbone_lr = backbone_lr
            self.unfreeze_and_add_param_group(_backbone(pl_module), optimizer, backbone_lr, train_bn=self.train_bn,
                                              initial_denom_lr=self.initial_denom_lr)
        elif epoch > self.unfreeze_backbone_at_epoch and self.previous_backbone_lr is not None:
            backbone_lr = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            if self.should_align and backbone_lr > current_lr:
                backbone_lr = current_lr
            optimizer.param_groups[-1]["lr"] = backbone_lr
            self.previous_backbone_lr = backbone_lr
        else:
            return
        trainer = getattr(pl_module, "trainer", None)
        if self.verbose and (trainer is None or trainer.is_global_zero):
            log.info("Current lr: %s, Backbone lr: %s", round(current_lr, self.rounding),
                     round(backbone_lr, self.rounding))


# --------------------------------------------------------------------------- helpers
def _walk(modules: object) -> Iterable[nn.Module]:
    if isinstance(modules, nn.Module):
        yield from modules.modules()
    elif isinstance(modules, Mapping):
        for value in modules.values():
            yield from _walk(value)
    elif isinstance(modules, Iterable) and not isinstance(modules, (str, bytes, torch.Tensor)):
        for value in modules:
            yield from _walk(value)
    else:
        raise TypeError(f"expected a torch.nn.Module or an iterable of modules, got {type(modules).__name__}: "
                        f"{modules!r}")


def _named_groups(groups: list[dict[str, Any]], names: Mapping[nn.Parameter, str], pl_module: Module,
                  index: int) -> list[dict[str, Any]]:
    """``groups`` with each parameter replaced by its name in ``pl_module``."""
    named = []
    for group in groups:
        unknown = [p for p in group["params"] if p not in names]
        if unknown:
            raise ValueError(f"optimizer {index} holds a tensor of shape {tuple(unknown[0].shape)} that is not a "
                             f"parameter of {type(pl_module).__name__}; finetuning callbacks record parameter "
                             "groups by parameter name, so every optimized tensor must be a module parameter")
        named.append({**{k: v for k, v in group.items() if k != "params"},
                      "params": [names[p] for p in group["params"]]})
    return named


def _wrapper_synced(trainer: Trainer, pl_module: Module) -> set[int] | None:
    """The parameters a ``DistributedDataParallel`` wrapper synchronises (those trainable when it was built, which
    is before ``on_fit_start``), or ``None`` when there is no such wrapper."""
    if isinstance(trainer.model, nn.parallel.DistributedDataParallel) and trainer.world_size > 1:
        return {id(p) for p in pl_module.parameters() if p.requires_grad}
    return None


def _average_gradients(strategy: Strategy, params: list[nn.Parameter]) -> None:
    """Average the gradients of ``params`` over the processes in one collective (a missing gradient counts as
    zeros; it is set when another process had one)."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = strategy.reduce(torch.cat([g.reshape(-1) for g in grads]), "mean")
    offset = 0
    for param in params:
        chunk = flat[offset:offset + param.numel()].view_as(param)
        offset += param.numel()
        if param.grad is not None:
            param.grad.copy_(chunk)
        elif bool(chunk.any()):
            param.grad = chunk.clone()


def _backbone(pl_module: Module) -> nn.Module:
    backbone = getattr(pl_module, "backbone", None)
    if not isinstance(backbone, nn.Module):
        raise ConfigurationError(f"BackboneFinetuning needs a torch.nn.Module in {type(pl_module).__name__}.backbone "
                                 f"(found {type(backbone).__name__}); name the part to finetune `backbone`, or "
                                 "subclass BaseFinetuning to freeze other modules")
    return backbone


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
