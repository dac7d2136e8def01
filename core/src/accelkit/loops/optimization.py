"""One optimization step, automatic (Lightning's closure) or manual, through the strategy and the precision."""

from __future__ import annotations

import contextlib
import functools
import operator
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from accelkit.loops.captured import captured_step
from accelkit.loops.hooks import STEP_HOOKS, HookCaller, accepts_positional, profiled
from accelkit.module.module import Module
from accelkit.module.optimizers import Optimizer
from accelkit.precision import Precision
from accelkit.strategies.base import Strategy
from accelkit.utilities.model_helpers import is_overridden
from accelkit.utilities.types import STEP_OUTPUT
from accelkit.utilities.user_code import warn_at

#: an empty search path, as Lightning's lightning.pytorch.loops.optimization is a package: importing a path below it
#: that Lightning has and accelkit lacks reaches :class:`accelkit.compat.MissingModuleFinder`, which says what
#: to import instead (Python would stop at "is not a package"); no module is found below this one
__path__: list[str] = []

if TYPE_CHECKING:
    from accelkit.trainer.trainer import Trainer

#: ``call(optimizer)`` runs ``optimizer.step()`` / ``optimizer.zero_grad()``, looked up on the instance at each call
#: (a learning-rate scheduler wraps the instance's ``step``)
_STEP = operator.methodcaller("step")
_ZERO_GRAD = operator.methodcaller("zero_grad")

#: a batch's output once the automatic step read it (:meth:`Optimization._loss_of`): ``{"loss": tensor, ...}`` (the
#: dict ``training_step`` returned, whose other values are the user's), or ``None`` for a skipped batch
StepOutput = Mapping[str, Any] | None
#: the eager automatic step, ``step(batch, batch_idx, boundary) -> (output, stepped)`` (:meth:`Optimization.eager_step`)
EagerStep = Callable[[object, int, bool], tuple[StepOutput, bool]]
#: what trains one batch, ``run(batch, batch_idx, boundary) -> (output, stepped)`` (:meth:`Optimization.batch_runner`;
#: in manual optimization the output is what ``training_step`` returned)
BatchRunner = Callable[[object, int, bool], tuple[STEP_OUTPUT, bool]]
_R = TypeVar("_R")


def _defaults(obj: object, base: type, *names: str) -> bool:
    """Whether ``obj``'s class keeps ``base``'s implementation of every method in ``names``."""
    return not any(is_overridden(name, obj, base) for name in names)


def _needs_closure(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step`` must be given a closure (it evaluates the loss itself, as ``LBFGS``)."""
    import inspect

    closure = inspect.signature(type(optimizer).step).parameters.get("closure")
    return closure is not None and closure.default is inspect.Parameter.empty


def _batch_only(step: Callable[[object], _R]) -> Callable[[object, int], _R]:
    """``step`` called as ``step(batch)``: for a ``training_step`` that takes no ``batch_idx``."""

    def call(batch: object, batch_idx: int) -> _R:
        return step(batch)

    return call


def _inside(context: Callable[[], contextlib.AbstractContextManager[object]],
            step: Callable[[object, int], _R]) -> Callable[[object, int], _R]:
    """``step`` run inside a fresh ``context()`` (the precision's forward context)."""

    def call(batch: object, batch_idx: int) -> _R:
        with context():
            return step(batch, batch_idx)

    return call


def _scaled(backward: Callable[[torch.Tensor], None], accumulate: int, loss: torch.Tensor) -> None:
    """``backward(loss / accumulate)``: the backward part of a batch inside an accumulation window."""
    return backward(loss / accumulate)


def _after(first: Callable[[], None], step: Callable[[object, int], _R]) -> Callable[[object, int], _R]:
    """``first()``, then ``step``."""

    def call(batch: object, batch_idx: int) -> _R:
        first()
        return step(batch, batch_idx)

    return call


class Optimization:
    """Optimizers of a fit and how they step.

    Automatic optimization: every batch runs the one eager step, :meth:`eager_step`'s function (``training_step``,
    zero-grad, backward, then at the end of an accumulation window what the Module's default ``optimizer_step``
    does), called by the fit loop itself or, where the Module overrides ``optimizer_step``, through that hook with
    Lightning's :class:`Closure` (:meth:`batch_runner`). Manual optimization: ``training_step`` calls
    ``self.optimizers()`` (wrapped in :class:`~accelkit.module.optimizers.Optimizer`), ``manual_backward`` and
    ``opt.step()``, which land in :meth:`backward` and :meth:`step`.

    There is one implementation of each part of the step. Everything a part could call around its work (the hooks
    of :data:`~accelkit.loops.hooks.STEP_HOOKS`, one list each, empty where nothing overrides the hook; the
    strategy's and the precision's steps where they are not the base classes' defaults; the profiler) is decided
    here, once, and a part left with one callable is that callable (with nothing overridden, the backward part is
    ``loss.backward``).
    """

    def __init__(self, trainer: Trainer, module: Module, hooks: HookCaller,
                 optimizers: list[torch.optim.Optimizer]) -> None:
        self.trainer, self.module, self.hooks = trainer, module, hooks
        self.strategy, self.precision = trainer.strategy, trainer.precision
        self.optimizers = optimizers
        self.wrapped = [Optimizer(o, self) for o in optimizers]
        #: the run's progress record (the same object for the whole run: ``RunState.restore`` keeps it)
        self._progress = trainer.run_state.progress
        self.automatic = bool(module.automatic_optimization)
        #: batches per optimizer step (the fit loop sets it each epoch: GradientAccumulationScheduler)
        self.accumulate: int = trainer.accumulate_grad_batches
        #: the Module's ``lr_scheduler_step`` (its default steps the scheduler)
        self.scheduler_hook = hooks.module_default("lr_scheduler_step")
        #: each hook of :data:`~accelkit.loops.hooks.STEP_HOOKS`: the callbacks that override it, then the Module's
        #: (planned once; empty where nothing overrides it)
        self._step_hooks: dict[str, list[Callable[..., object]]] = {
            name: [*hooks.callback_plan(name), *self._module_hooks(name)] for name in STEP_HOOKS}
        self._plan_training_step()
        self._plan_backward()
        self._plan_step()
        self._batch_idx = 0  # the batch whose gradients are zeroed (the Module's optimizer_zero_grad is given it)
        self._stepped = False  # the optimizer stepped (what an overridden optimizer_step did)
        self._warned_skip = False
        # compile_step (issue 24): the captured step runs automatic batches instead (refused here if it cannot)
        self.captured = captured_step(self)

    # ----------------------------------------------------------------- decided once
    def _plan_training_step(self) -> None:
        """The call of ``training_step``: through the strategy's wrapper (DDP sees the forward pass) or the
        Module itself, in the precision's forward context, timed by the profiler."""
        trainer, module = self.trainer, self.module
        # Manual optimization backpropagates inside training_step, so that does not run inside a wrapper's
        # forward (DDP would then wait for a backward after it); the strategy arms the wrapper before each
        # manual backward instead (Strategy.pre_manual_backward).
        direct = trainer.model is module or not self.automatic
        # through the wrapper: bound once (the strategy wrapped the module before the fit built this object)
        call: Callable[..., STEP_OUTPUT] = \
            self._module_training_step if direct else functools.partial(trainer.model, "training_step")
        if not accepts_positional(module.training_step, 2):
            call = _batch_only(call)
        if not _defaults(self.precision, Precision, "forward_context"):
            call = _inside(self.precision.forward_context, call)
        if trainer.model is not module and not self.automatic and any(True for _ in module.buffers()):
            call = _after(self._sync_buffers, call)  # what the wrapper's forward would have done
        if trainer.profiler is not None:
            call = profiled(trainer.profiler, f"[LightningModule]{type(module).__qualname__}.training_step", call)
        self._training_step: Callable[[object, int], STEP_OUTPUT] = call

    def _plan_backward(self) -> None:
        """The backward phase: its hooks and the pass itself (the
        Module's ``backward`` if overridden, a plain ``loss.backward()`` where the strategy and the precisions keep
        the defaults, else the strategy's)."""
        hooks, strategy = self.hooks, self.strategy
        # the watchdog of a distributed run sees the backward pass on the training thread's stack: no note here
        self._before_backward: list[Callable[[torch.Tensor], object]] = [*self._step_hooks["on_before_backward"]]
        if not self.automatic:
            self._before_backward.append(self._arm_manual_backward)
        self._after_backward: list[Callable[[], object]] = self._step_hooks["on_after_backward"]
        self._backward_hook = hooks.module_hook("backward")
        plain = _defaults(strategy, Strategy, "backward") and all(p.passes_through() for p in self._precisions())
        self._backward_pass: Callable[[torch.Tensor], None] = (
            self._module_backward if self._backward_hook is not None else
            torch.Tensor.backward if plain else strategy.backward)
        self._backward_with_arguments = (
            self._module_backward if self._backward_hook is not None else self._scaled_backward)
        #: the step's backward part: :meth:`backward`, or the pass alone when its hook lists are empty
        self._backward_phase: Callable[[torch.Tensor], None] = (
            self.backward if self._before_backward or self._after_backward else self._backward_pass)

    def _plan_step(self) -> None:
        """The zero-grad and optimizer-step phases and ``optimizer_step`` itself."""
        hooks, strategy = self.hooks, self.strategy
        self._before_zero: list[Callable[[torch.optim.Optimizer], object]] = self._step_hooks["on_before_zero_grad"]
        self._zero_grad_hook = hooks.module_hook("optimizer_zero_grad")
        self._zero: Callable[[torch.optim.Optimizer], object] = (
            _ZERO_GRAD if self._zero_grad_hook is None else self._call_zero_grad_hook)
        #: the step's zero-grad part: :meth:`zero_grad`, or ``optimizer.zero_grad()`` alone when it has no hook
        self._zero_phase: Callable[[], object] = self.zero_grad
        if not self._before_zero and self._zero_grad_hook is None and len(self.optimizers) == 1:
            self._zero_phase = functools.partial(_ZERO_GRAD, self.optimizers[0])
        plain = _defaults(strategy, Strategy, "reduce_gradients", "optimizer_step") and all(
            p.passes_through() for p in self._precisions())
        self._before_step: list[Callable[[torch.optim.Optimizer], object]] = [
            *([] if plain else [strategy.reduce_gradients, self.precision.unscale_gradients]),
            *self._step_hooks["on_before_optimizer_step"]]
        #: automatic optimization's clipping: the Module's ``configure_gradient_clipping`` where overridden (``None``:
        #: the Trainer's ``gradient_clip_val``; see :meth:`before_optimizer_step`)
        self._clip_hook = hooks.module_hook("configure_gradient_clipping") if self.automatic else None
        self._step_optimizer: Callable[[torch.optim.Optimizer], object] = _STEP if plain else strategy.optimizer_step
        #: the optimizers whose ``step`` evaluates the loss itself (LBFGS): stepped as ``optimizer.step(closure)``,
        #: the closure run again at each evaluation (as Lightning)
        self.closure_optimizers = [o for o in self.optimizers if _needs_closure(o)]
        if self.closure_optimizers and not plain:
            names = ", ".join(type(o).__name__ for o in self.closure_optimizers)
            raise NotImplementedError(
                f"{names}.step() re-evaluates the loss through its closure, which accelkit supports with the "
                f"default optimizer step and full precision only; strategy {type(strategy).__name__} and precision "
                f"{type(self.precision).__name__} step through their own code. Use precision='32-true' and a "
                "strategy that keeps the default step (single device, DDP), or an optimizer that steps on the "
                "gradients of one backward pass (SGD, Adam, ...)")
        self._step_end: list[Callable[[], object]] = [] if _defaults(strategy, Strategy, "step_end") else \
            [strategy.step_end]
        #: manual optimization ends its step inside ``opt.step()``; automatic after ``optimizer_step`` returns
        self._after_step: list[Callable[[], object]] = [] if self.automatic else [self._end_step]
        self._run_step: Callable[[torch.optim.Optimizer, Callable[[], object] | None], object] = self._step
        if self.trainer.profiler is not None:
            self._run_step = profiled(self.trainer.profiler,
                                      f"[Strategy]{type(strategy).__name__}.optimizer_step", self._step)
        self._optimizer_step = hooks.module_hook("optimizer_step") or self._default_optimizer_step
        #: the Module's ``optimizer_step`` is given Lightning's :class:`Closure` (:meth:`_routed_batch`): it is
        #: overridden, a profiler times the step, or an optimizer evaluates the loss itself; otherwise the eager step
        #: does what the default ``optimizer_step`` does, without a closure
        self._through_closure = self._optimizer_step != self._default_optimizer_step or \
            self._run_step != self._step or bool(self.closure_optimizers)

    def _precisions(self) -> list[Precision]:
        """The trainer's precision and the strategy's (the same object unless a strategy brings its own)."""
        return list({id(p): p for p in (self.precision, self.strategy.precision)}.values())

    def _module_hooks(self, name: str) -> list[Callable[..., object]]:
        hook = self.hooks.module_hook(name)
        return [] if hook is None else [hook]

    # ----------------------------------------------------------------- automatic
    def batch_runner(self) -> BatchRunner:
        """What trains one batch this epoch (manual optimization: ``training_step``), called as
        ``run(batch, batch_idx, boundary)``; ``boundary``: the batch ends an accumulation window, so the optimizer
        steps. Returns ``(output, stepped)``: the step's output
        (``{"loss": ...}``, or ``None`` when ``training_step`` skipped the batch) and whether the optimizer stepped.
        Asked once per epoch (``accumulate_grad_batches`` may change between epochs).

        It is :meth:`eager_step`'s function, the one eager step, called by the fit loop itself where the Module keeps
        the default ``optimizer_step`` and a batch inside an accumulation window needs no context, else through
        :meth:`_routed_batch` (the Module's ``optimizer_step`` given Lightning's :class:`Closure`, the strategy's
        ``no_backward_sync`` around a window's batch). With ``compile_step``, ``loops/captured.py`` runs the batch."""
        if not self.automatic:
            return self._manual_batch
        if self.captured is not None:
            return self._captured_batch
        needs_no_sync = self.accumulate > 1 and not _defaults(self.strategy, Strategy, "no_backward_sync")
        if not self._through_closure and not needs_no_sync:
            return self.eager_step()
        return functools.partial(self._routed_batch, self.eager_step())

    def run_batch(self, batch: object, batch_idx: int, boundary: bool) -> tuple[STEP_OUTPUT, bool]:
        """Train on one batch outside an epoch loop: :meth:`batch_runner`'s function for the current settings."""
        return self.batch_runner()(batch, batch_idx, boundary)

    def eager_step(self) -> EagerStep:
        """The eager automatic step, its parts bound once (per epoch): ``step(batch, batch_idx, boundary)`` runs, in
        Lightning's order,

        1. ``training_step`` (through the strategy's wrapper, in the precision's forward context);
        2. at the start of an accumulation window, ``on_before_zero_grad`` and ``optimizer_zero_grad`` (also when the
           batch is skipped, as Lightning's closure: its step then moves nothing);
        3. ``on_before_backward``, the backward pass of the loss (divided by ``accumulate_grad_batches``),
           ``on_after_backward`` -- parts 1 to 3 are Lightning's closure, all that a batch inside an accumulation
           window (``boundary`` false) or :class:`Closure` runs;
        4. at ``boundary``, what the Module's default ``optimizer_step`` does: :meth:`before_optimizer_step`
           (reduction and unscaling where the strategy and precision do them, ``on_before_optimizer_step``, the
           clipping), the optimizer's step, its count and the strategy's ``step_end``.

        Each part's hooks are a list planned at the fit's start, empty where nothing overrides them, and a part with
        no hook is its bare callable (the backward part: ``loss.backward``); a part with nothing to do is skipped by
        one test (no hook before the optimizer step and no ``gradient_clip_val``)."""
        training_step, zero_phase, backward_phase = self._training_step, self._zero_phase, self._backward_phase
        before_step, before_optimizer_step = bool(self._before_step) or self._clip_hook is not None, \
            self.before_optimizer_step
        optimizer, trainer = self.optimizers[0], self.trainer
        step_optimizer = functools.partial(self._step_optimizer, optimizer)  # (steps it through the strategy)
        end_step = self._progress.advance_step if not self._step_end else self._end_step
        accumulate, loss_of, skip_batch, tensor = self.accumulate, self._loss_of, self._skip_batch, torch.Tensor
        every = accumulate == 1
        zero_hooked = self._zero_phase == self.zero_grad  # (its optimizer_zero_grad hook is given the batch index)
        if not every:  # a window's loss is back-propagated divided by its length (decided here, not per batch)
            backward_phase = functools.partial(_scaled, backward_phase, accumulate)

        def step(batch: object, batch_idx: int, boundary: bool) -> tuple[StepOutput, bool]:
            output = training_step(batch, batch_idx)  # 1.
            loss: torch.Tensor | None
            if output.__class__ is not tensor:  # (a dict, None, a tensor subclass...)
                loss, output = loss_of(output)
            else:  # the common return, without a call
                loss, output = output, {"loss": output}
            if every or batch_idx % accumulate == 0:  # 2.
                if zero_hooked:
                    self._batch_idx = batch_idx
                zero_phase()
            if loss is None:  # 3.
                skip_batch(batch_idx)
            else:
                backward_phase(loss)
            if not boundary:
                return output, False
            if before_step or trainer.settings.gradient_clip_val is not None:  # 4.
                before_optimizer_step(optimizer)
            step_optimizer()  # the strategy steps through the precision (a scaler)
            end_step()
            return output, True

        return step

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """What comes between the backward pass and ``optimizer``'s step: the strategy's gradient reduction and the
        precision's unscaling where they do them, ``on_before_optimizer_step``, and in automatic optimization the
        clipping (the Module's ``configure_gradient_clipping``, else the Trainer's ``gradient_clip_val``, read at
        each step as Lightning does)."""
        for hook in self._before_step:
            hook(optimizer)
        if not self.automatic:
            return
        trainer = self.trainer
        if self._clip_hook is not None:
            self._clip_hook(optimizer, trainer.gradient_clip_val, trainer.gradient_clip_algorithm)
        elif trainer.gradient_clip_val is not None:
            self.clip(optimizer, trainer.gradient_clip_val, trainer.gradient_clip_algorithm)

    def _routed_batch(self, step: EagerStep, batch: object, batch_idx: int, boundary: bool) -> tuple[StepOutput, bool]:
        """:meth:`batch_runner`'s function when the fit loop cannot call ``step`` (:meth:`eager_step`'s) itself: a
        batch inside an accumulation window runs parts 1 to 3 inside the strategy's ``no_backward_sync``; at a
        window's end, the Module's ``optimizer_step`` (overridden, timed by a profiler, or for an optimizer that
        evaluates the loss itself) is given Lightning's :class:`Closure`, which runs parts 1 to 3, and steps."""
        if not boundary:
            with self.strategy.no_backward_sync(self.trainer.model, enabled=True):
                return step(batch, batch_idx, False)
        if not self._through_closure:
            return step(batch, batch_idx, True)
        closure = Closure(step, batch, batch_idx, self.accumulate)
        self._stepped = False
        self._optimizer_step(self.trainer.current_epoch, batch_idx, self.wrapped[0], closure)
        if not closure.ran:
            raise RuntimeError(f"{type(self.module).__name__}.optimizer_step did not call the closure: call "
                               "optimizer.step(closure=optimizer_closure) (it runs training_step and backward)")
        if self._stepped:
            self._end_step()
        return closure.output, self._stepped

    def _manual_batch(self, batch: object, batch_idx: int, boundary: bool) -> tuple[STEP_OUTPUT, bool]:
        """:meth:`batch_runner`'s function in manual optimization: ``training_step`` steps the optimizers itself
        (``opt.step()`` counts each step); stepped: the global step moved."""
        before = self._progress.global_step
        output = self._training_step(batch, batch_idx)
        return output, self._progress.global_step != before

    def _captured_batch(self, batch: object, batch_idx: int, boundary: bool) -> tuple[StepOutput, bool]:
        """:meth:`batch_runner`'s function with ``compile_step``: ``loops/captured.py`` runs the batch."""
        assert self.captured is not None
        output, stepped = self.captured.run_batch(batch, batch_idx, boundary)
        if stepped:
            self._end_step()
        return output, stepped

    def _default_optimizer_step(self, epoch: int, batch_idx: int, optimizer: Optimizer,
                                closure: Callable[[], object]) -> None:
        """What the Module's default ``optimizer_step`` does (``optimizer.step(closure=closure)``), without the
        wrapper in between: ``optimizer`` wraps the fit's one optimizer."""
        self._run_step(self.optimizers[0], closure)

    @staticmethod
    def _loss_of(output: object) -> tuple[torch.Tensor | None, StepOutput]:
        """``(loss, outputs)`` of what ``training_step`` returned: a tensor becomes ``{"loss": tensor}``."""
        if isinstance(output, torch.Tensor):
            return output, {"loss": output}
        if isinstance(output, dict):
            if "loss" not in output:
                raise KeyError(f"training_step returned a dict without the key 'loss' (keys: {sorted(output)}); "
                               "return {'loss': loss, ...} or the loss tensor")
            return output["loss"], output
        if output is None:
            return None, None
        raise TypeError(f"training_step returned {type(output).__name__}; return the loss tensor, a dict with "
                        "'loss', or None to skip the batch")

    def _skip_batch(self, batch_idx: int) -> None:
        """``training_step`` returned ``None`` for batch ``batch_idx``: an error with several processes (the others
        would wait in the gradient exchange), else a warning, once per run."""
        trainer = self.trainer
        if trainer.world_size > 1:
            raise RuntimeError(
                f"{type(self.module).__name__}.training_step returned None on rank {trainer.global_rank} "
                f"(batch {batch_idx}, step {trainer.global_step}) in a run of "
                f"{trainer.world_size} processes: skipping a batch on one rank leaves the others waiting "
                "in the gradient exchange (Lightning does not support it either). Return the loss on every "
                "rank; to skip a batch everywhere, make the decision identical on all ranks and return "
                "loss * 0, or use manual optimization.")
        if not self._warned_skip:  # once per run, as Lightning's warning cache
            self._warned_skip = True
            warn_at(type(self.module).training_step,
                    f"{type(self.module).__name__}.training_step returned None for batch {batch_idx} "
                    f"(epoch {trainer.current_epoch}), so that batch is skipped: no backward, and the optimizer step "
                    "moves nothing. If this was on purpose, ignore this warning; otherwise return the loss (or "
                    "{'loss': loss}).")

    def zero_grad(self) -> None:
        """``on_before_zero_grad`` hooks and ``optimizer_zero_grad`` for every optimizer."""
        for opt in self.optimizers:
            for fn in self._before_zero:
                fn(opt)
            self._zero(opt)

    def _call_zero_grad_hook(self, optimizer: torch.optim.Optimizer) -> None:
        assert self._zero_grad_hook is not None
        self._zero_grad_hook(self.trainer.current_epoch, self._batch_idx, optimizer)

    # ----------------------------------------------------------------- both
    def training_step(self, batch: object, batch_idx: int) -> STEP_OUTPUT:
        """Call ``training_step`` through the strategy's wrapper (DDP sees the forward pass), in the precision's
        forward context (manual optimization: the fit loop calls this for each batch)."""
        return self._training_step(batch, batch_idx)

    def _module_training_step(self, *args: object) -> STEP_OUTPUT:
        return self.module.training_step(*args)

    def _sync_buffers(self) -> None:
        self.strategy.sync_buffers(self.trainer.model)

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``on_before_backward``, the backward pass (precision scaling; the Module's ``backward`` if
        overridden), ``on_after_backward``."""
        for fn in self._before_backward:
            fn(loss)
        if args or kwargs:
            self._backward_with_arguments(loss, *args, **kwargs)
        else:
            self._backward_pass(loss)
        for fn_after in self._after_backward:
            fn_after()

    def _arm_manual_backward(self, loss: torch.Tensor) -> None:
        self.strategy.pre_manual_backward(self.trainer.model, loss)

    def _module_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        assert self._backward_hook is not None
        self._backward_hook(self.precision.scale_loss(loss), *args, **kwargs)

    def _scaled_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self.precision.scale_loss(loss).backward(*args, **kwargs)

    def step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], object] | None) -> object:
        """Run ``closure``, then step ``optimizer``: reduce gradients (strategies that do so at step time),
        unscale, ``on_before_optimizer_step``, clip (automatic), precision step; manual steps also count the
        global step and end the step on the strategy."""
        return self._run_step(optimizer, closure)

    def _step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], object] | None) -> object:
        if closure is not None and self.closure_optimizers and optimizer in self.closure_optimizers:
            return self._step_evaluating(optimizer, closure)
        result = closure() if closure is not None else None
        self.before_optimizer_step(optimizer)
        self._step_optimizer(optimizer)  # the strategy steps through the precision (a scaler)
        self._stepped = True
        for fn_after in self._after_step:
            fn_after()
        return result

    def _step_evaluating(self, optimizer: torch.optim.Optimizer, closure: Callable[[], object]) -> object:
        """Step an optimizer that evaluates the loss itself (LBFGS): ``optimizer.step(evaluate)``, where each
        evaluation runs ``closure`` anew (automatic: :meth:`Closure.evaluate`, the eager step's parts 1 to 3) and then
        :meth:`before_optimizer_step`, as Lightning's wrapped closure. One step is counted however many evaluations
        the optimizer makes."""
        again = closure.evaluate if isinstance(closure, Closure) else closure
        evaluations = 0

        def evaluate() -> Any:  # (torch's stubs want a closure returning a float; it returns the loss tensor)
            nonlocal evaluations
            result = again() if evaluations else closure()  # the first: the closure's result if it already ran
            evaluations += 1
            self.before_optimizer_step(optimizer)
            return result

        result = optimizer.step(evaluate)
        self._stepped = True
        for fn_after in self._after_step:
            fn_after()
        return result

    def _end_step(self) -> None:
        """After an optimizer step: count it (the one place ``global_step`` advances, through the run's progress
        record), then let the strategy end it (a lazy device cuts its graph)."""
        self._progress.advance_step()
        for fn in self._step_end:
            fn()

    def clip(self, optimizer: torch.optim.Optimizer, value: float | None, algorithm: str | None) -> None:
        """Clip ``optimizer``'s gradients by norm (default) or value, at their true scale."""
        if value is None or value == 0:
            return
        algorithm = algorithm or "norm"
        if algorithm not in ("norm", "value"):
            raise ValueError(f"gradient_clip_algorithm={algorithm!r} must be 'norm' or 'value'")
        self.precision.unscale_gradients(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if algorithm == "norm":
            torch.nn.utils.clip_grad_norm_(params, value)
        else:
            torch.nn.utils.clip_grad_value_(params, value)


class Closure:
    """Lightning's optimizer closure of one batch, given to an overridden ``optimizer_step`` (and to an optimizer that
    evaluates the loss itself): calling it runs the eager step's parts 1 to 3 (``training_step``, zero-grad,
    backward) once and returns the loss back-propagated; a second call returns the same loss instead of
    back-propagating twice (:meth:`evaluate` runs them again).

    :param step: the epoch's eager step (:meth:`Optimization.eager_step`).
    :param batch: the batch.
    :param batch_idx: its index in the epoch.
    :param accumulate: ``accumulate_grad_batches`` (the loss back-propagated is divided by it).
    """

    #: the step's output (``None``: the batch was skipped, or the closure has not run)
    output: StepOutput

    def __init__(self, step: EagerStep, batch: object, batch_idx: int, accumulate: int) -> None:
        self.step, self.batch, self.batch_idx, self.accumulate = step, batch, batch_idx, accumulate
        #: whether it ran; the step's output (``None``: the batch was skipped)
        self.ran, self.output = False, None
        self.loss: torch.Tensor | None = None

    def __call__(self) -> torch.Tensor | None:
        """The loss, from :meth:`evaluate` the first time."""
        return self.loss if self.ran else self.evaluate()

    def evaluate(self) -> torch.Tensor | None:
        """Run ``training_step``, zero-grad and backward (again): the loss back-propagated."""
        self.ran = True
        self.output = self.step(self.batch, self.batch_idx, False)[0]
        loss = None if self.output is None else self.output["loss"]
        self.loss = loss if loss is None or self.accumulate == 1 else loss / self.accumulate
        return self.loss
