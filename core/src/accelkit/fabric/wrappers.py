"""What :meth:`accelkit.Fabric.setup` returns: the module, optimizer and data loader wrappers.

:class:`FabricModule` runs the module's forward (and the ``*_step`` methods of a :class:`~accelkit.Module`, and the
methods named with :meth:`FabricModule.mark_forward_method`) through the strategy's wrapper, under the precision's
context and input conversion; every other attribute, ``state_dict`` included, is the user's module's.
:class:`FabricOptimizer` steps through the strategy and the precision and shares everything else (``param_groups``,
``state``) with the user's optimizer. :class:`FabricDataLoader` moves each batch to the device and gives the sampler
the epoch every time it is iterated.
"""

from __future__ import annotations

import functools
import inspect
import operator
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, overload

import torch
from torch import nn
from torch.nn.modules import module as module_hooks

from accelkit.strategies.base import DirectCallModule, StepRouter
from accelkit.strategies.sampler import set_epoch
from accelkit.utilities.apply_func import device_plan

if TYPE_CHECKING:
    from accelkit.fabric.fabric import Fabric
    from accelkit.precision import Precision

_T = TypeVar("_T")

#: a :class:`~accelkit.Module`'s methods that run through the strategy's wrapper as its forward does
STEP_METHODS = ("training_step", "validation_step", "test_step", "predict_step")


class FabricModule(nn.Module):
    """The module as :meth:`accelkit.Fabric.setup` returns it.

    Calling it runs the user's module through the strategy's wrapper (``DistributedDataParallel`` for DDP,
    the sharded module for FSDP), its inputs converted by the precision and its body under the precision's context
    (autocast for mixed precision). Attribute reads and writes other than these reach the user's module, so
    ``model.state_dict()``, ``model.layer`` and ``model.some_flag = 1`` behave as on the module itself.

    :param forward_module: what the strategy's :meth:`~accelkit.Strategy.setup_module` returned.
    :param original_module: the user's module.
    :param fabric: the :class:`~accelkit.Fabric` that set it up.
    """

    def __init__(self, forward_module: nn.Module, original_module: nn.Module, fabric: Fabric) -> None:
        super().__init__()
        self._forward_module = forward_module
        self._original_module = original_module
        self._fabric = fabric
        self._forward_methods: set[str] = {name for name in STEP_METHODS if callable(
            getattr(original_module, name, None))}
        #: whether the strategy's wrapper routes named methods (``DistributedDataParallel`` over a
        #: :class:`~accelkit.strategies.base.StepRouter`)
        self._routed = isinstance(getattr(forward_module, "module", None), StepRouter)
        plain = plain_forward(forward_module, fabric.strategy.precision, self._routed)
        if plain is not None:  # the plain precision: calling the wrapper calls the strategy's wrapper, no more
            self.__dict__["forward"] = plain
            object.__setattr__(self, "__class__", _PlainFabricModule)

    @property
    def module(self) -> nn.Module:
        """The user's module (Lightning's ``_FabricModule.module``)."""
        return self._original_module

    @property
    def forward_module(self) -> nn.Module:
        """What the strategy's :meth:`~accelkit.Strategy.setup_module` returned (``DistributedDataParallel``, the
        sharded module...), which the strategy's checkpoint and synchronisation methods take."""
        return self._forward_module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The user's module's forward, through the strategy's wrapper, under the precision. (Where the precision
        changes neither the inputs nor the context, the instance's ``forward`` is the strategy's wrapper's call
        itself, :func:`plain_forward`: the same, without this method's frame.)"""
        return self._run("__call__", args, kwargs)

    def _run(self, method: str, args: tuple[object, ...], kwargs: dict[str, object]) -> object:
        precision = self._fabric.strategy.precision
        args, kwargs = precision.convert_input((args, kwargs))
        with precision.forward_context():
            if self._routed:
                output = self._forward_module(method, *args, **kwargs)
            elif method == "__call__":
                output = self._forward_module(*args, **kwargs)
            else:
                output = getattr(self._forward_module, method)(*args, **kwargs)
        return precision.convert_output(output)  # float32 again after a lower precision, as Lightning's

    def mark_forward_method(self, method: str | Callable[..., object]) -> None:
        """Run ``method`` (a name, or the module's bound method) through the strategy's wrapper and the precision,
        as the forward: a method that computes the loss outside ``forward`` then gets its gradients reduced. As
        Lightning's: ``TypeError`` for anything but a name or a method, ``ValueError`` for ``"forward"`` (it runs so
        already), ``AttributeError`` for a name the module has no method of. Unlike Lightning's, the method runs
        under the precision on one process too (Lightning's runs it plain there, under the precision only where a
        strategy wraps the module)."""
        if not isinstance(method, str) and not inspect.ismethod(method):
            raise TypeError(f"mark_forward_method({method!r}): give a method's name or the bound method "
                            f"(module.{getattr(method, '__name__', 'name')}), not a {type(method).__name__}")
        name = method if isinstance(method, str) else method.__name__
        if name == "forward":
            raise ValueError("mark_forward_method('forward'): the forward already runs through the strategy's wrapper "
                             "and the precision; mark other methods only")
        if not inspect.ismethod(getattr(self._original_module, name, None)):
            raise AttributeError(f"mark_forward_method({name!r}): {type(self._original_module).__name__}.{name} is "
                                 "not a method of the module; give the name of one of its methods")
        self._forward_methods.add(name)
        register = getattr(self._fabric.strategy, "register_forward_method", None)
        if callable(register):
            register(self._forward_module, name)

    def __getattr__(self, name: str) -> Any:
        if name in ("_forward_module", "_original_module", "_fabric", "_forward_methods", "_routed"):
            return super().__getattr__(name)
        methods = self.__dict__.get("_forward_methods")
        if methods is not None and name in methods:
            return _ForwardMethod(self, name)
        original = super().__getattr__("_original_module")
        return getattr(original, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("_forward_module", "_original_module", "_fabric", "_forward_methods", "_routed") or \
                "_original_module" not in self._modules or \
                (name.startswith("_") and (name in self.__dict__ or hasattr(nn.Module, name))):
            # (the last: nn.Module's own state of the wrapper, such as the flag register_full_backward_hook sets
            # or the call compile() makes, which belongs to the wrapper, not to the user's module)
            super().__setattr__(name, value)
            return
        original = self._original_module
        if hasattr(original, name) or not hasattr(self, name):
            setattr(original, name, value)
        else:
            super().__setattr__(name, value)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """The user's module's ``state_dict`` (its own names, without a wrapper's prefix). Where the strategy shards
        the parameters, the full tensors gathered from every process (a collective: every process calls it, as
        Lightning's FSDP module's ``state_dict``); ``fabric.save`` writes shards instead."""
        state = self._original_module.state_dict(*args, **kwargs)
        for key, value in state.items():
            full = getattr(value, "full_tensor", None)  # a sharded (DTensor) value: gathered, on every process
            if callable(full):
                state[key] = full().detach()
        return state

    def load_state_dict(self, state_dict: Mapping[str, object], strict: bool = True, assign: bool = False) -> Any:
        """The user's module's ``load_state_dict``."""
        return self._original_module.load_state_dict(state_dict, strict=strict, assign=assign)

    def __repr__(self) -> str:
        return f"FabricModule({self._original_module!r})"


def plain_forward(forward_module: nn.Module, precision: Precision, routed: bool) -> Callable[..., object] | None:
    """What calling a :class:`FabricModule` comes down to where ``precision`` converts neither inputs nor outputs
    and wraps the forward in no context (its :class:`~accelkit.Precision` defaults): a call of the strategy's wrapper
    (through the router's ``"__call__"`` where ``routed``); ``None`` where the precision does any of them."""
    from accelkit.precision import Precision
    from accelkit.utilities.model_helpers import is_overridden

    if any(is_overridden(name, precision, Precision) for name in ("convert_input", "forward_context",
                                                                  "convert_output")):
        return None
    return functools.partial(forward_module, "__call__") if routed else forward_module.__call__


class _PlainFabricModule(DirectCallModule, FabricModule):
    """A :class:`FabricModule` whose precision changes neither the inputs nor the context (:func:`plain_forward`):
    calling it calls its ``forward`` (the strategy's wrapper's call) without ``nn.Module.__call__``'s hook machinery
    for this wrapper (the user's module and the strategy's wrapper run theirs as usual), as long as nothing asks for
    that machinery: a module hook registered globally (``torch.nn.modules.module.register_module_forward_hook``...)
    is seen at each call, and registering a hook on the wrapper, or ``compile()``, makes it a :class:`FabricModule`
    called through ``nn.Module.__call__`` from then on (:class:`~accelkit.strategies.base.DirectCallModule`, as
    :class:`~accelkit.strategies.base.StepRouter` does)."""

    hooked_class = FabricModule

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if any(_GLOBAL_MODULE_HOOKS):
            return nn.Module.__call__(self, *args, **kwargs)
        return self.forward(*args, **kwargs)

    def compile(self, *args: object, **kwargs: object) -> None:
        """:meth:`torch.nn.Module.compile`: calls run the compiled call from then on."""
        self.use_hooks().compile(*args, **kwargs)


#: torch's registries of module hooks registered globally (``torch.nn.modules.module.register_module_*_hook``),
#: which ``nn.Module.__call__`` runs for every module
_GLOBAL_MODULE_HOOKS = (module_hooks._global_backward_pre_hooks, module_hooks._global_backward_hooks,  # noqa: SLF001
                        module_hooks._global_forward_hooks, module_hooks._global_forward_pre_hooks)  # noqa: SLF001


class _ForwardMethod:
    """A marked method of a :class:`FabricModule`, bound: calling it runs the method as the forward."""

    def __init__(self, owner: FabricModule, name: str) -> None:
        self.owner, self.name = owner, name
        self.__signature__ = inspect.signature(getattr(owner.module, name))

    def __call__(self, *args: object, **kwargs: object) -> Any:
        return self.owner._run(self.name, args, kwargs)  # noqa: SLF001 - the owner's own helper


class FabricOptimizer:
    """The optimizer as :meth:`accelkit.Fabric.setup` returns it: :meth:`step` goes through the strategy (gradients
    reduced where the strategy does so, the precision's gradient scaler, the strategy's step end: a lazy device
    cuts its graph there); everything else (``param_groups``, ``state``, ``defaults``, ``zero_grad``) is the user's
    optimizer's own objects, so a learning-rate scheduler built on it before ``setup`` keeps working, and one built
    on the wrapper (an instance of the optimizer's class too) changes the same parameter groups.

    :param optimizer: the user's optimizer (after the strategy's ``setup_optimizer``).
    :param fabric: the :class:`~accelkit.Fabric` that set it up.
    """

    _OWN = ("step", "zero_grad", "state_dict", "load_state_dict", "__del__")

    def __init__(self, optimizer: torch.optim.Optimizer, fabric: Fabric) -> None:
        self.__dict__.update({k: v for k, v in optimizer.__dict__.items() if k not in self._OWN})
        self._optimizer = optimizer
        self._fabric = fabric
        #: whether :meth:`step` is the optimizer's own step alone (:meth:`follow`)
        self._direct_step = False
        # an instance of the user's optimizer class too (torch's schedulers check it)
        self.__class__ = type(f"Fabric{type(optimizer).__name__}", (FabricOptimizer, type(optimizer)), {})

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The user's optimizer."""
        return self._optimizer

    def step(self, closure: Callable[[], float] | None = None) -> Any:  # (the closure typed as torch's)
        """One optimizer step through the strategy and the precision; returns the closure's loss, if any. Inside
        :meth:`accelkit.Fabric.accumulate` on an accumulation step, nothing (the step comes with the window's last
        batch)."""
        if self._direct_step and closure is None:  # what the plain strategy and precision come down to
            self._optimizer.step()
            return None
        if self._fabric.accumulating:
            return None
        return self._fabric.optimizer_step(self._optimizer, closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The user's optimizer's ``zero_grad`` (nothing on an accumulation step of
        :meth:`accelkit.Fabric.accumulate`: the window's gradients are kept). Outside those steps the instance's
        ``zero_grad`` is the user's optimizer's own (:meth:`follow`): the same call, without this method's frame."""
        if self._fabric.accumulating:
            return
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def follow(self, plain_step: bool, accumulating: bool) -> None:
        """How :meth:`step` and :meth:`zero_grad` run, as the :class:`~accelkit.Fabric` plans them (it calls this
        when the wrapper is made, and when its composition or :meth:`~accelkit.Fabric.accumulate`'s window
        changes): ``plain_step`` where neither the strategy nor the precision customises the step (then
        :meth:`step` is the optimizer's own step), ``accumulating`` on an accumulation step (both do nothing)."""
        self._direct_step = plain_step and not accumulating
        if accumulating:
            self.__dict__.pop("zero_grad", None)
        else:
            self.__dict__["zero_grad"] = self._optimizer.zero_grad

    def state_dict(self) -> dict[str, object]:
        """The user's optimizer's state (this process's shard where the strategy shards it)."""
        return self._optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, object]) -> None:
        """Load into the user's optimizer, and share its new ``state`` and ``param_groups`` again."""
        self._optimizer.load_state_dict(state_dict)
        self.__dict__.update({k: v for k, v in self._optimizer.__dict__.items() if k not in self._OWN})

    def __repr__(self) -> str:
        return f"FabricOptimizer({self._optimizer!r})"


class LoaderPosition(TypedDict):
    """A :class:`FabricDataLoader`'s position, as its ``state_dict`` gives it."""

    #: the epoch being read
    epoch: int
    #: the batches of it already used
    batches_done: int
    #: what decided its order (:func:`accelkit.loops.resume.epoch_start`)
    epoch_start: dict[str, object] | None


class FabricDataLoader:
    """A data loader as :meth:`accelkit.Fabric.setup_dataloaders` returns it: iterating it gives the sampler the
    epoch (``set_epoch``: a new shuffle every epoch, the same on every process) and moves each batch to the device;
    ``len``, ``dataset``, ``sampler``, ``batch_size`` and the rest are the loader's own.

    Its position is state: ``fabric.save(path, {"loader": loader, ...})`` records the epoch, the batches read in
    it and what decided its order, and after ``fabric.load`` the next iteration continues the same epoch's order
    after them without loading them (a mid-epoch resume). The epochs after it draw their order from the loader's
    ``generator`` when it has one (exact), else from the global random state, which the program saves and restores
    itself (``torch.get_rng_state``) for an exact run. While it yields its last batch, :attr:`at_last_batch` is
    ``True`` and :attr:`padding` says how many indices the distributed sampler repeated to give every process as
    many (what :meth:`accelkit.Fabric.gather_for_metrics` drops).

    :param loader: the (re-sharded) loader.
    :param device: where batches go, or ``None`` to leave them where the loader puts them.
    :param fabric: the :class:`~accelkit.Fabric` that set it up.
    """

    def __init__(self, loader: Any, device: torch.device | None, fabric: Fabric) -> None:
        self._loader = loader
        self._device = device
        self._fabric = fabric
        self._num_iter_calls = 0
        #: the epoch's batches used: ``_done_before`` plus the numbers ``_drawn`` has given (:attr:`_batches_done`)
        self._done_before = 0
        self._drawn = iter(range(_COUNT_END))
        self._skip = 0
        self._epoch = 0
        #: what decided the order of the epoch being read (:func:`accelkit.loops.resume.epoch_start`), saved with
        #: the position; a loaded one is put back before the resumed epoch's first batch
        self._epoch_start: dict[str, object] | None = None
        self._resume_start: dict[str, object] | None = None
        #: the index of the epoch's last batch (-1: unknown), and whether an epoch is being read (not exhausted)
        self._last_index = -1
        self._reading = False

    @property
    def loader(self) -> Any:
        """The wrapped loader (where :func:`~accelkit.strategies.sampler.set_epoch` finds its sampler)."""
        return self._loader

    @property
    def at_last_batch(self) -> bool:
        """Whether the batch being used is the loader's last of the epoch (``False`` once the epoch is exhausted,
        and where the loader has no length)."""
        return self._reading and self._last_index >= 0 and self._batches_done == self._last_index + 1

    @property
    def _batches_done(self) -> int:
        """The batches of the epoch used so far: those counted before the epoch's counter started, plus the numbers
        it has given (one as each batch passes, in C: :meth:`__iter__`)."""
        return self._done_before + _COUNT_END - operator.length_hint(self._drawn)

    @_batches_done.setter
    def _batches_done(self, done: int) -> None:
        self._done_before, self._drawn = done, iter(range(_COUNT_END))

    @property
    def device(self) -> torch.device | None:
        """Where batches are moved (``None``: left where the loader puts them)."""
        return self._device

    @property
    def padding(self) -> int:
        """How many indices the loader's distributed sampler repeats at the end of an epoch (0 without one)."""
        sampler: Any = getattr(self._loader, "sampler", None)
        replicas = getattr(sampler, "num_replicas", None)
        source = getattr(sampler, "data_source", None) or getattr(sampler, "dataset", None)
        if not replicas or source is None or getattr(sampler, "drop_last", False):
            return 0
        try:
            return replicas * len(sampler) - len(source)
        except TypeError:
            return 0

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[Any]:
        from accelkit.loops import resume

        epoch, skip, start = self._num_iter_calls, self._skip, self._resume_start
        self._num_iter_calls, self._skip, self._resume_start = epoch + 1, 0, None
        self._epoch, self._batches_done = epoch, skip
        set_epoch(self._loader, epoch)
        self._fabric.active_loader = self
        try:
            total = len(self._loader)
        except TypeError:
            total = None
        now = None
        if start is None:
            self._epoch_start = resume.epoch_start(self._loader)
        else:  # resuming mid-epoch: that epoch's order, without the batches read before the save
            self._epoch_start, now = start, resume.rng_states()
            resume.restore_epoch_start(self._loader, start)
        source = resume.skip_batches(self._loader, skip) if skip else self._loader
        self._last_index, self._reading = (total - 1 if total is not None else -1), True
        batches = iter(source)
        for batch in batches:  # the first batch: the random streams, the transfer decided
            if now is not None:  # the order is drawn: the random streams go on as they were
                resume.set_rng_states(now)
            to_device = self._transfer(batch)
            self._batches_done = skip + 1  # in use from here: a save during its step counts it as read
            yield to_device(batch)
            # the others: zip draws a number from the counter as each batch passes (in use from there, as the
            # first), and no Python frame runs per batch beyond the transfer
            yield from map(to_device, map(_FIRST, zip(batches, self._drawn, strict=False)))
            break
        self._reading = False

    def _transfer(self, first: object) -> Callable[[object], object]:
        """How this epoch's batches reach the device, decided from its ``first``: left alone without a device; the
        strategy's own ``batch_to_device`` where it customises it; else :func:`~accelkit.utilities.apply_func.
        device_plan` (what the default ``batch_to_device`` does, planned once, as the Trainer's loop does)."""
        from accelkit.strategies.base import Strategy
        from accelkit.utilities.model_helpers import is_overridden

        strategy = self._fabric.strategy
        if self._device is None:
            return _unchanged
        if is_overridden("batch_to_device", strategy, Strategy):
            return strategy.batch_to_device
        return device_plan(first, strategy.root_device, bool(strategy.accelerator.pin_memory))

    def state_dict(self) -> LoaderPosition:
        """The position: the epoch being read, the batches of it already used, and what decided its order."""
        return {"epoch": self._epoch, "batches_done": self._batches_done, "epoch_start": self._epoch_start}

    def load_state_dict(self, state: LoaderPosition) -> None:
        """Continue from a position :meth:`state_dict` gave: the next iteration reads that epoch's order after its
        used batches (the next epoch when it had ended)."""
        epoch, done = int(state["epoch"]), int(state["batches_done"])
        try:
            ended = done >= len(self._loader)
        except TypeError:
            ended = False
        self._epoch, self._batches_done = (epoch, done)
        self._num_iter_calls, self._skip = (epoch + 1, 0) if ended else (epoch, done)
        self._resume_start = None if ended else state.get("epoch_start")
        self._epoch_start = self._resume_start

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._loader, name)

    def __repr__(self) -> str:
        return f"FabricDataLoader({self._loader!r})"


def _unchanged(batch: _T) -> _T:
    return batch


#: the end of a loader's batch counter (:attr:`FabricDataLoader._batches_done`): more numbers than batches
_COUNT_END = sys.maxsize
_FIRST = operator.itemgetter(0)


def is_wrapped(obj: object) -> bool:
    """Whether ``obj`` is a :class:`FabricModule`, :class:`FabricOptimizer` or :class:`FabricDataLoader`."""
    return isinstance(obj, (FabricModule, FabricOptimizer, FabricDataLoader))


@overload
def unwrap(obj: FabricModule) -> nn.Module: ...


@overload
def unwrap(obj: FabricOptimizer) -> torch.optim.Optimizer: ...


@overload
def unwrap(obj: FabricDataLoader) -> object: ...


@overload
def unwrap(obj: _T) -> _T: ...


def unwrap(obj: object) -> object:
    """The user's object inside a Fabric wrapper (``obj`` itself if it is not one)."""
    if isinstance(obj, FabricModule):
        return obj.module
    if isinstance(obj, FabricOptimizer):
        return obj.optimizer
    if isinstance(obj, FabricDataLoader):
        return obj.loader
    return obj
