"""Calling hooks: decided once per run, so a hook nobody overrides costs nothing per step."""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from accelkit.callbacks.base import Callback, callback_base, callback_list, monitors_metrics
from accelkit.module.module import Module
from accelkit.utilities.model_helpers import is_overridden
from accelkit.utilities.user_code import warn_at

if TYPE_CHECKING:
    from accelkit.module.datamodule import DataModule
    from accelkit.profilers import Profiler
    from accelkit.trainer.trainer import Trainer

_R = TypeVar("_R")


def accepts_positional(fn: Callable, count: int) -> bool:
    """Whether ``fn`` takes at least ``count`` positional arguments (``training_step(batch)`` without
    ``batch_idx``, ``validation_step`` without ``dataloader_idx``); ``True`` when it cannot be told."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= count


def profiled(profiler: Profiler, label: str, fn: Callable[..., _R]) -> Callable[..., _R]:
    """``fn``, each call recorded by ``profiler`` as the action ``label`` (decided once: the caller keeps the
    wrapped callable where it would keep ``fn``)."""

    def call(*args: object) -> _R:
        with profiler.profile(label):
            return fn(*args)

    return call


def _public_hooks(base: type) -> set[str]:
    return {n for n in dir(base) if n.startswith("on_") and callable(getattr(base, n, None))}


MODULE_HOOKS = frozenset(_public_hooks(Module))
CALLBACK_HOOKS = frozenset(_public_hooks(Callback))

#: The Callback and Module hooks called inside the automatic training step, in the order the step calls them (see
#: ``docs/hooks.rst``). The one list of them: the eager step (``loops/optimization.py``) plans one list of callables
#: per name from it, and the captured step (``loops/captured.py``) refuses a fit that overrides one of them.
STEP_HOOKS = ("on_before_zero_grad", "on_before_backward", "on_after_backward", "on_before_optimizer_step")
#: The Module methods of the automatic training step whose override replaces a part of it (their defaults do that
#: part): read by the eager step's plan and refused by the captured step, as :data:`STEP_HOOKS`.
STEP_OVERRIDES = ("optimizer_zero_grad", "backward", "configure_gradient_clipping", "optimizer_step")


class HookCaller:
    """Calls a hook on the callbacks (those that override it) and on the Module (if it overrides it).

    :param trainer: the Trainer (first argument of callback hooks).
    :param module: the user's Module.
    :param callbacks: the run's callbacks, in order.
    :param profiler: a profiler whose ``profile(name)`` wraps each call, or ``None``.
    """

    def __init__(self, trainer: Trainer, module: Module, callbacks: list[Callback], profiler: Profiler | None = None,
                 datamodule: DataModule | None = None) -> None:
        self.trainer, self.module, self.callbacks = trainer, module, callbacks
        self.datamodule = datamodule
        self.profiler = profiler
        self._plans: dict[tuple[str, bool | None], list[Callable]] = {}
        self._module_hooks: dict[str, Callable | None] = {}

    def _wrap(self, label: str, fn: Callable) -> Callable:
        return fn if self.profiler is None else profiled(self.profiler, label, fn)

    def callback_plan(self, name: str, monitoring: bool | None = None) -> list[Callable]:
        """Bound callables of the callbacks overriding ``name``; ``monitoring`` keeps only callbacks that monitor
        metrics (``True``) or only the others (``False``)."""
        key = (name, monitoring)
        plan = self._plans.get(key)
        if plan is None:
            plan = []
            for cb in self.callbacks:
                if not is_overridden(name, cb, callback_base(cb)):
                    continue
                if monitoring is not None and monitors_metrics(cb) != monitoring:
                    continue
                fn = functools.partial(getattr(cb, name), self.trainer, self.module)
                plan.append(self._wrap(f"[Callback]{type(cb).__qualname__}.{name}", fn))
            self._plans[key] = plan
        return plan

    def module_hook(self, name: str) -> Callable | None:
        """The Module's ``name`` if its class overrides it, else ``None``."""
        if name not in self._module_hooks:
            fn = getattr(self.module, name) if is_overridden(name, self.module, Module) else None
            self._module_hooks[name] = None if fn is None else self._wrap(
                f"[LightningModule]{type(self.module).__qualname__}.{name}", fn)
        return self._module_hooks[name]

    def module_default(self, name: str) -> Callable:
        """The Module's ``name``, overridden or not (for hooks whose default does work)."""
        hook = self.module_hook(name)
        return hook if hook is not None else getattr(self.module, name)

    def call(self, name: str, *args: object) -> object:
        """Callbacks' ``name`` then the Module's; returns the Module's result."""
        for fn in self.callback_plan(name):
            fn(*args)
        hook = self.module_hook(name)
        return hook(*args) if hook is not None else None

    def call_before_monitors(self, name: str, *args: object) -> None:
        """The callbacks that do not monitor metrics, then the Module (Lightning's order for
        ``on_train_epoch_end``; :meth:`call_monitors` follows once what the Module logged is published)."""
        for fn in self.callback_plan(name, monitoring=False):
            fn(*args)
        hook = self.module_hook(name)
        if hook is not None:
            hook(*args)

    def call_monitors(self, name: str, *args: object) -> None:
        """The callbacks that monitor metrics (checkpointing, early stopping)."""
        for fn in self.callback_plan(name, monitoring=True):
            fn(*args)

    def call_datamodule(self, name: str, *args: object) -> object:
        """The DataModule's ``name`` (if there is a DataModule)."""
        if self.datamodule is None:
            return None
        fn = getattr(self.datamodule, name, None)
        return fn(*args) if callable(fn) else None


def warn_unknown_hooks(module: Module, callbacks: list[Callback]) -> None:
    """Warn once per name about methods that look like hooks (``on_*``) but match none (a typo such as
    ``on_validation_epoch_ends`` would otherwise never run, silently)."""
    targets = [(module, Module, MODULE_HOOKS, "Module")] + [(cb, callback_base(cb), CALLBACK_HOOKS, "Callback")
                                                           for cb in callbacks]
    for obj, _base, known, kind in targets:
        for name in dir(type(obj)):
            if (not name.startswith("on_") or name in known or name in REMOVED_HOOKS
                    or not callable(getattr(type(obj), name, None))):
                continue
            if any(name in vars(klass) for klass in type(obj).__mro__ if klass.__module__.startswith("torch.")):
                continue
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            warn_at(getattr(type(obj), name), f"{type(obj).__name__}.{name} looks like a {kind} hook but matches "
                    f"none, so it is never called{hint}")


#: Lightning 1.x hooks that Lightning 2.x removed, with what replaces them
REMOVED_HOOKS = {
    "training_epoch_end": "on_train_epoch_end (collect the step outputs yourself)",
    "validation_epoch_end": "on_validation_epoch_end (collect the step outputs yourself)",
    "test_epoch_end": "on_test_epoch_end (collect the step outputs yourself)",
    "predict_epoch_end": "on_predict_epoch_end",
    "training_step_end": "training_step (do the work there)",
    "validation_step_end": "validation_step (do the work there)",
    "test_step_end": "test_step (do the work there)",
    "on_epoch_start": "on_train_epoch_start / on_validation_epoch_start",
    "on_epoch_end": "on_train_epoch_end / on_validation_epoch_end",
    "on_batch_start": "on_train_batch_start",
    "on_batch_end": "on_train_batch_end",
    "on_pretrain_routine_start": "on_fit_start",
    "on_pretrain_routine_end": "on_fit_start",
    "on_hpc_save": "on_save_checkpoint",
    "on_hpc_load": "on_load_checkpoint",
}
#: the removed hooks Lightning 2.x refuses on a Module (it ignores the others, which still work in a project
#: that keeps one as dead code, such as OML's ``on_epoch_start``: those get a warning)
REFUSED_HOOKS = ("training_epoch_end", "validation_epoch_end", "test_epoch_end")


def check_removed_hooks(module: Module, callbacks: list[Callback], warn: bool = True) -> None:
    """Raise, naming every one, for the Lightning 1.x hooks a Module still defines that Lightning 2.x refuses
    (:data:`REFUSED_HOOKS`); warn, at the method, for the other removed hooks a Module or Callback defines: they
    are never called (Lightning 2.x ignores them silently); ``warn``: false on the ranks other than global zero."""
    found = []
    for obj in [module, *callbacks]:
        for name, replacement in REMOVED_HOOKS.items():
            method = getattr(type(obj), name, None)
            if not callable(method):
                continue
            message = f"{type(obj).__name__}.{name} was removed in Lightning 2.0 and is never called; use {replacement}"
            if obj is module and name in REFUSED_HOOKS:
                found.append(message)
            elif warn:
                warn_at(method, message)
    if found:
        raise NotImplementedError("; ".join(found))


def merge_callbacks(trainer: Trainer, module: Module) -> list[Callback]:
    """The run's callbacks, kept as ``trainer.callbacks``: the Trainer's, then the module's
    ``configure_callbacks()`` (replacing Trainer callbacks of the same type), with checkpoint callbacks last
    (Lightning's order)."""
    from accelkit.callbacks.model_checkpoint import is_checkpoint

    extra = callback_list(module.configure_callbacks())
    if extra:
        kinds = {type(c) for c in extra}
        trainer.callbacks = [c for c in trainer.callbacks if type(c) not in kinds] + extra
    trainer.callbacks = [c for c in trainer.callbacks if not is_checkpoint(c)] + \
                        [c for c in trainer.callbacks if is_checkpoint(c)]
    return trainer.callbacks
