"""One optimization step, automatic (Lightning's closure) or manual, through the strategy and the precision."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from accelkit.loops.captured import captured_step
from accelkit.loops.hooks import STEP_HOOKS, HookCaller, accepts_positional, profiled
from accelkit.module.module import Module
from accelkit.module.optimizers import Optimizer
from accelkit.precision import Precision
from accelkit.strategies.base import Strategy
from accelkit.utilities.model_helpers import is_overridden
from accelkit.utilities.user_code import warn_at

if TYPE_CHECKING:
    from accelkit.trainer.trainer import Trainer

#: ``call(optimizer)`` runs ``optimizer.step()`` / ``optimizer.zero_grad()``, looked up on the instance at each call
#: (a learning-rate scheduler wraps the instance's ``step``)
_STEP = operator.methodcaller("step")
_ZERO_GRAD = operator.methodcaller("zero_grad")


def _defaults(obj: Any, base: type, *names: str) -> bool:
    """Whether ``obj``'s class keeps ``base``'s implementation of every method in ``names``."""
    return not any(is_overridden(name, obj, base) for name in names)


def _needs_closure(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step`` must be given a closure (it evaluates the loss itself, as ``LBFGS``)."""
    import inspect

    closure = inspect.signature(type(optimizer).step).parameters.get("closure")
    return closure is not None and closure.default is inspect.Parameter.empty


def _batch_only(step: Callable[..., Any]) -> Callable[[Any, int], Any]:
    """``step`` called as ``step(batch)``: for a ``training_step`` that takes no ``batch_idx``."""

    def call(batch: Any, batch_idx: int) -> Any:
        return step(batch)

    return call


def _inside(context: Callable[[], Any], step: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
    """``step`` run inside a fresh ``context()`` (the precision's forward context)."""

    def call(batch: Any, batch_idx: int) -> Any:
        with context():
            return step(batch, batch_idx)

    return call


def _after(first: Callable[[], None], step: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
    """``first()``, then ``step``."""

    def call(batch: Any, batch_idx: int) -> Any:
        first()
        return step(batch, batch_idx)

    return call


class Optimization:
    """Optimizers of a fit and how they step.

    Automatic optimization: for each batch :meth:`run_batch` calls the Module's ``optimizer_step`` hook with the
    closure (:meth:`closure`: ``training_step``, ``optimizer_zero_grad`` at the start of an accumulation window,
    ``backward``); its default runs ``optimizer.step(closure)``, i.e. :meth:`step`. Manual optimization:
    ``training_step`` calls ``self.optimizers()`` (wrapped in :class:`~accelkit.module.optimizers.Optimizer`),
    ``manual_backward`` and ``opt.step()``, which land in :meth:`backward` and :meth:`step`.

    There is one implementation of each phase. Everything a phase could call around its work (hooks, the
    strategy's and the precision's steps where they are not the base classes' defaults, the profiler) is
    decided here, once: a phase holds the callables that do something, and a phase left with
    one callable is that callable (with nothing overridden, the backward phase is ``loss.backward``).
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
        self._step_hooks: dict[str, list[Callable[..., Any]]] = {
            name: [*hooks.callback_plan(name), *self._module_hooks(name)] for name in STEP_HOOKS}
        self._plan_training_step()
        self._plan_backward()
        self._plan_step()
        # per-batch state of the automatic closure
        self._batch: Any = None
        self._batch_idx = 0
        self._zero_first = False
        self._ran = False
        self._stepped = False
        self._loss: torch.Tensor | None = None
        self.output: Any = None
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
        call = self._module_training_step if direct else functools.partial(trainer.model, "training_step")
        if not accepts_positional(module.training_step, 2):
            call = _batch_only(call)
        if not _defaults(self.precision, Precision, "forward_context"):
            call = _inside(self.precision.forward_context, call)
        if trainer.model is not module and not self.automatic and any(True for _ in module.buffers()):
            call = _after(self._sync_buffers, call)  # what the wrapper's forward would have done
        if trainer.profiler is not None:
            call = profiled(trainer.profiler, f"[LightningModule]{type(module).__qualname__}.training_step", call)
        self._training_step: Callable[[Any, int], Any] = call

    def _plan_backward(self) -> None:
        """The backward phase: its hooks and the pass itself (the
        Module's ``backward`` if overridden, a plain ``loss.backward()`` where the strategy and the precisions keep
        the defaults, else the strategy's)."""
        hooks, strategy = self.hooks, self.strategy
        # the watchdog of a distributed run sees the backward pass on the training thread's stack: no note here
        self._before_backward: list[Callable[[torch.Tensor], Any]] = [*self._step_hooks["on_before_backward"]]
        if not self.automatic:
            self._before_backward.append(self._arm_manual_backward)
        self._after_backward: list[Callable[[], Any]] = self._step_hooks["on_after_backward"]
        self._backward_hook = hooks.module_hook("backward")
        plain = _defaults(strategy, Strategy, "backward") and all(p.passes_through() for p in self._precisions())
        self._backward_pass: Callable[..., Any] = (
            self._module_backward if self._backward_hook is not None else
            torch.Tensor.backward if plain else strategy.backward)
        self._backward_with_arguments = (
            self._module_backward if self._backward_hook is not None else self._scaled_backward)
        #: the closure's backward phase: :meth:`backward`, or the pass alone when nothing surrounds it
        self._backward_phase: Callable[[torch.Tensor], Any] = (
            self.backward if self._before_backward or self._after_backward else self._backward_pass)

    def _plan_step(self) -> None:
        """The zero-grad and optimizer-step phases and ``optimizer_step`` itself."""
        hooks, strategy = self.hooks, self.strategy
        self._before_zero: list[Callable[[torch.optim.Optimizer], Any]] = self._step_hooks["on_before_zero_grad"]
        self._zero_grad_hook = hooks.module_hook("optimizer_zero_grad")
        self._zero: Callable[[torch.optim.Optimizer], Any] = (
            _ZERO_GRAD if self._zero_grad_hook is None else self._call_zero_grad_hook)
        #: the closure's zero-grad phase: :meth:`zero_grad`, or ``optimizer.zero_grad()`` alone
        self._zero_phase: Callable[[], Any] = self.zero_grad
        if not self._before_zero and self._zero_grad_hook is None and len(self.optimizers) == 1:
            self._zero_phase = functools.partial(_ZERO_GRAD, self.optimizers[0])
        plain = _defaults(strategy, Strategy, "reduce_gradients", "optimizer_step") and all(
            p.passes_through() for p in self._precisions())
        self._before_step: list[Callable[[torch.optim.Optimizer], Any]] = [
            *([] if plain else [strategy.reduce_gradients, self.precision.unscale_gradients]),
            *self._step_hooks["on_before_optimizer_step"]]
        clip_hook = self._clip_hook = hooks.module_hook("configure_gradient_clipping")
        if self.automatic:
            self._before_step.append(self._clip_to_trainer if clip_hook is None else self._call_clip_hook)
        self._step_optimizer: Callable[[torch.optim.Optimizer], Any] = _STEP if plain else strategy.optimizer_step
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
        self._step_end: list[Callable[[], Any]] = [] if _defaults(strategy, Strategy, "step_end") else \
            [strategy.step_end]
        #: manual optimization ends its step inside ``opt.step()``; automatic after ``optimizer_step`` returns
        self._after_step: list[Callable[[], Any]] = [] if self.automatic else [self._end_step]
        self._run_step: Callable[[torch.optim.Optimizer, Callable[[], Any] | None], Any] = self._step
        if self.trainer.profiler is not None:
            self._run_step = profiled(self.trainer.profiler,
                                      f"[Strategy]{type(strategy).__name__}.optimizer_step", self._step)
        self._optimizer_step = hooks.module_hook("optimizer_step") or self._default_optimizer_step
        #: the Module keeps the default ``optimizer_step`` and no profiler times it: a batch calls :meth:`_step`
        #: with the closure itself (what the default does), without the hook's frames
        self._direct_step = self._optimizer_step == self._default_optimizer_step and self._run_step == self._step
        #: nothing around the step but the clipping check: a batch that steps may run :meth:`_plain_batch`
        self._plain = self.automatic and self._direct_step and plain and self._before_step == [self._clip_to_trainer] \
            and not self._after_step and not self._step_end and not self.closure_optimizers

    def _precisions(self) -> list[Precision]:
        """The trainer's precision and the strategy's (the same object unless a strategy brings its own)."""
        return list({id(p): p for p in (self.precision, self.strategy.precision)}.values())

    def _module_hooks(self, name: str) -> list[Callable[..., Any]]:
        hook = self.hooks.module_hook(name)
        return [] if hook is None else [hook]

    # ----------------------------------------------------------------- automatic
    def run_batch(self, batch: Any, batch_idx: int, boundary: bool) -> tuple[Any, bool]:
        """Train on one batch; step the optimizer when ``boundary`` ends the accumulation window. Returns the
        step's output (``{"loss": ...}``, or ``None`` when ``training_step`` skipped the batch) and whether the
        optimizer stepped. The eager batch runs the closure, inside ``optimizer_step`` at the end of an accumulation
        window; with ``compile_step``, ``loops/captured.py`` runs the batch."""
        if self.captured is not None:
            return self._captured_batch(batch, batch_idx, boundary)
        self._batch, self._batch_idx = batch, batch_idx
        self._zero_first = self.accumulate == 1 or batch_idx % self.accumulate == 0
        self._ran = self._stepped = False
        self.output = None
        if not boundary:
            with self.strategy.no_backward_sync(self.trainer.model, enabled=True):
                self.closure()
            return self.output, False
        # Automatic optimization has one optimizer (several are refused before the fit starts, as in Lightning).
        if self._direct_step:
            self._step(self.optimizers[0], self.closure)
        else:
            self._optimizer_step(self.trainer.current_epoch, batch_idx, self.wrapped[0], self.closure)
        if not self._ran:
            raise RuntimeError(f"{type(self.module).__name__}.optimizer_step did not call the closure: call "
                               "optimizer.step(closure=optimizer_closure) (it runs training_step and backward)")
        if self._stepped:
            self._end_step()
        return self.output, self._stepped

    def batch_runner(self) -> Callable[[Any, int, bool], tuple[Any, bool]]:
        """What trains one batch this epoch, called as :meth:`run_batch`: :meth:`plain_batch_runner`'s where every
        batch steps (no accumulation) and nothing surrounds the step (no ``optimizer_step`` override, no hook before
        or after the optimizer's step, the strategy's and precision's default step, no profiler, no
        ``compile_step``), else :meth:`run_batch`. Asked once per epoch (``accumulate`` may change between
        epochs)."""
        return self.plain_batch_runner() if self.steps_plainly() else self.run_batch

    def steps_plainly(self) -> bool:
        """Whether :meth:`batch_runner` gives the plain batch this epoch: every batch steps and nothing surrounds
        the step."""
        return self._plain and self.accumulate == 1 and self.captured is None

    def plain_batch_runner(self) -> Callable[[Any, int, bool], tuple[Any, bool]]:
        """:meth:`run_batch` of a batch that steps when nothing surrounds the step (:meth:`batch_runner`), with
        this epoch's phases bound once: the closure's phases and the step in one frame, in the same order
        (``training_step``, zero-grad, backward, the clipping check, ``optimizer.step()``, the step's count)."""
        training_step, zero_phase, backward_phase = self._training_step, self._zero_phase, self._backward_phase
        optimizer, trainer, advance_step, tensor = self.optimizers[0], self.trainer, self._progress.advance_step, \
            torch.Tensor

        def plain_batch(batch: Any, batch_idx: int, boundary: bool) -> tuple[Any, bool]:
            output = training_step(batch, batch_idx)
            loss: torch.Tensor | None
            if type(output) is tensor:
                loss, output = output, {"loss": output}
            else:
                loss, output = self._loss_of(output)
            zero_phase()
            if loss is None:
                self._batch_idx = batch_idx  # (what the warning names)
                self._skip_batch()
            else:
                backward_phase(loss)
            if trainer.gradient_clip_val is not None:  # read at each step, as Lightning does
                self._clip_to_trainer(optimizer)
            optimizer.step()  # looked up on the instance (a learning-rate scheduler wraps the instance's step)
            advance_step()
            return output, True

        return plain_batch

    def _captured_batch(self, batch: Any, batch_idx: int, boundary: bool) -> tuple[Any, bool]:
        """:meth:`run_batch` with ``compile_step``: ``loops/captured.py`` runs the batch."""
        assert self.captured is not None
        output, stepped = self.captured.run_batch(batch, batch_idx, boundary)
        if stepped:
            self._end_step()
        return output, stepped

    def _default_optimizer_step(self, epoch: int, batch_idx: int, optimizer: Optimizer,
                                closure: Callable[[], Any]) -> None:
        """What the Module's default ``optimizer_step`` does (``optimizer.step(closure=closure)``), without the
        wrapper in between: ``optimizer`` wraps the fit's one optimizer."""
        self._run_step(self.optimizers[0], closure)

    def closure(self) -> torch.Tensor | None:
        """Lightning's optimizer closure: ``training_step``, zero_grad (first batch of a window), backward.
        Runs once per batch; a second call returns the same loss instead of back-propagating twice."""
        if self._ran:
            return self._loss
        self._ran = True
        output = self._training_step(self._batch, self._batch_idx)
        loss: torch.Tensor | None
        if type(output) is torch.Tensor:  # the common return, without a call
            loss, self.output = output, {"loss": output}
        else:
            loss, self.output = self._loss_of(output)
        if self._zero_first:  # as Lightning's closure: also when the batch is skipped (its step then moves nothing)
            self._zero_phase()
        if loss is None:
            self._skip_batch()
            self._loss = None
            return None
        if self.accumulate > 1:
            loss = loss / self.accumulate
        self._backward_phase(loss)
        self._loss = loss
        return loss

    @staticmethod
    def _loss_of(output: Any) -> tuple[torch.Tensor | None, Any]:
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

    def _skip_batch(self) -> None:
        """``training_step`` returned ``None``: an error with several processes (the others would wait in the
        gradient exchange), else a warning, once per run."""
        trainer = self.trainer
        if trainer.world_size > 1:
            raise RuntimeError(
                f"{type(self.module).__name__}.training_step returned None on rank {trainer.global_rank} "
                f"(batch {self._batch_idx}, step {trainer.global_step}) in a run of "
                f"{trainer.world_size} processes: skipping a batch on one rank leaves the others waiting "
                "in the gradient exchange (Lightning does not support it either). Return the loss on every "
                "rank; to skip a batch everywhere, make the decision identical on all ranks and return "
                "loss * 0, or use manual optimization.")
        if not self._warned_skip:  # once per run, as Lightning's warning cache
            self._warned_skip = True
            warn_at(type(self.module).training_step,
                    f"{type(self.module).__name__}.training_step returned None for batch {self._batch_idx} "
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
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        """Call ``training_step`` through the strategy's wrapper (DDP sees the forward pass), in the precision's
        forward context (manual optimization: the fit loop calls this for each batch)."""
        return self._training_step(batch, batch_idx)

    def _module_training_step(self, *args: Any) -> Any:
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

    def step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None) -> Any:
        """Run ``closure``, then step ``optimizer``: reduce gradients (strategies that do so at step time),
        unscale, ``on_before_optimizer_step``, clip (automatic), precision step; manual steps also count the
        global step and end the step on the strategy."""
        return self._run_step(optimizer, closure)

    def _step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None) -> Any:
        if closure is not None and self.closure_optimizers and optimizer in self.closure_optimizers:
            return self._step_evaluating(optimizer, closure)
        result = closure() if closure is not None else None
        for fn in self._before_step:
            fn(optimizer)
        self._step_optimizer(optimizer)  # the strategy steps through the precision (a scaler)
        self._stepped = True
        for fn_after in self._after_step:
            fn_after()
        return result

    def _step_evaluating(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any]) -> Any:
        """Step an optimizer that evaluates the loss itself (LBFGS): ``optimizer.step(evaluate)``, where each
        evaluation runs ``closure`` anew (automatic: ``training_step``, zero-grad, backward) and then what comes
        before a step (``on_before_optimizer_step``, clipping), as Lightning's wrapped closure. One step is counted
        however many evaluations the optimizer makes."""
        evaluations = 0

        def evaluate() -> Any:
            nonlocal evaluations
            if evaluations:
                self._ran = False  # the optimizer asks for the loss again: the automatic closure runs once more
            evaluations += 1
            result = closure()
            for fn in self._before_step:
                fn(optimizer)
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

    def _clip_to_trainer(self, optimizer: torch.optim.Optimizer) -> None:
        """Clip to the Trainer's ``gradient_clip_val`` (read at each step, as Lightning does)."""
        trainer = self.trainer
        if trainer.gradient_clip_val is not None:
            self.clip(optimizer, trainer.gradient_clip_val, trainer.gradient_clip_algorithm)

    def _call_clip_hook(self, optimizer: torch.optim.Optimizer) -> None:
        assert self._clip_hook is not None
        self._clip_hook(optimizer, self.trainer.gradient_clip_val, self.trainer.gradient_clip_algorithm)

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
