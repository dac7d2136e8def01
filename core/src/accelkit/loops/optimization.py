"""One optimization step, automatic (Lightning's closure) or manual, through the strategy and the precision."""

from __future__ import annotations

from typing import Any, Callable

import torch

from accelkit.loops.captured import captured_step
from accelkit.loops.hooks import accepts_positional
from accelkit.utilities.model_helpers import is_overridden
from accelkit.utilities.user_code import warn_at
from accelkit.module.optimizers import Optimizer
from accelkit.precision import Precision
from accelkit.strategies.base import Strategy
from accelkit.strategies.launchers import watchdog
from accelkit.strategies.launchers.watchdog import mark


def _defaults(obj: Any, base: type, *names: str) -> bool:
    """Whether ``obj``'s class keeps ``base``'s implementation of every method in ``names``."""
    return not any(is_overridden(name, obj, base) for name in names)


class Optimization:
    """Optimizers of a fit and how they step.

    Automatic optimization: for each batch :meth:`run_batch` builds the closure (``training_step``,
    ``optimizer_zero_grad`` at the start of an accumulation window, ``backward``) and, at the end of the window,
    calls the Module's ``optimizer_step`` hook with it, whose default runs ``optimizer.step(closure)``, i.e.
    :meth:`step`. Manual optimization: ``training_step`` calls ``self.optimizers()`` (wrapped in
    :class:`~accelkit.module.optimizers.Optimizer`), ``manual_backward`` and ``opt.step()``, which land here too.
    """

    def __init__(self, trainer: Any, module: Any, hooks: Any, optimizers: list[torch.optim.Optimizer]) -> None:
        self.trainer, self.module, self.hooks = trainer, module, hooks
        self.strategy, self.precision = trainer.strategy, trainer.precision
        self.optimizers = optimizers
        self.wrapped = [Optimizer(o, self) for o in optimizers]
        self.automatic = bool(module.automatic_optimization)
        self._direct = trainer.model is module or not self.automatic
        self._sync_buffers = trainer.model is not module and not self.automatic and any(True for _ in module.buffers())
        self.accumulate = trainer.accumulate_grad_batches
        step = getattr(module, "training_step")
        self._pass_idx = accepts_positional(step, 2)
        self._profiler = trainer.profiler
        self._step_label = f"[LightningModule]{type(module).__qualname__}.training_step"
        # Decided once: which hooks are overridden (a hook nobody overrides costs nothing per step).
        self._optimizer_step = hooks.module_hook("optimizer_step")
        self._zero_grad = hooks.module_hook("optimizer_zero_grad")
        self._backward = hooks.module_hook("backward")
        self._clip_hook = hooks.module_hook("configure_gradient_clipping")
        self._before_backward = hooks.callback_plan("on_before_backward")
        self._before_backward_m = hooks.module_hook("on_before_backward")
        self._after_backward = hooks.callback_plan("on_after_backward")
        self._after_backward_m = hooks.module_hook("on_after_backward")
        self._before_step = hooks.callback_plan("on_before_optimizer_step")
        self._before_step_m = hooks.module_hook("on_before_optimizer_step")
        self._before_zero = hooks.callback_plan("on_before_zero_grad")
        self._before_zero_m = hooks.module_hook("on_before_zero_grad")
        # Decided once: where the strategy and the precision keep the base classes' defaults (nothing to do, or
        # a plain ``loss.backward()`` / ``optimizer.step()``), the step does that directly.
        strategy, precisions = self.strategy, {id(p): p for p in (self.precision, self.strategy.precision)}
        self._plain_forward = _defaults(self.precision, Precision, "forward_context")
        self._plain_backward = _defaults(strategy, Strategy, "backward") and all(
            _defaults(p, Precision, "backward", "scale_loss") for p in precisions.values())
        self._plain_step = _defaults(strategy, Strategy, "reduce_gradients", "optimizer_step") and all(
            _defaults(p, Precision, "unscale_gradients", "optimizer_step") for p in precisions.values())
        self._plain_step_end = _defaults(strategy, Strategy, "step_end")
        if self._profiler is None:  # no profiler to wrap them in: call the work directly
            self.training_step = self._training_step  # type: ignore[method-assign]
            self.step = self._step  # type: ignore[method-assign]
        #: the phases are noted for the watchdog only where one runs (a distributed run)
        self._marks = watchdog.running()
        # Decided once: with nothing to call around the step (no hook overridden, the default strategy and
        # precision, one optimizer, no profiler), an automatic batch is one plain sequence (:meth:`_plain_batch`).
        self._plain = self.automatic and self._direct and self._profiler is None and self._plain_forward and \
            self._plain_backward and self._plain_step and self._plain_step_end and len(optimizers) == 1 and not any(
                (self._optimizer_step, self._zero_grad, self._backward, self._clip_hook, self._before_backward,
                 self._before_backward_m, self._after_backward, self._after_backward_m, self._before_step,
                 self._before_step_m, self._before_zero, self._before_zero_m))
        #: the Module's ``lr_scheduler_step`` (its default steps the scheduler)
        self.scheduler_hook = hooks.module_default("lr_scheduler_step")
        # per-batch state of the automatic closure
        self._batch: Any = None
        self._batch_idx = 0
        self._zero_first = False
        self._ran = False
        self._loss: Any = None
        self.output: Any = None
        self._warned_skip = False
        # compile_step (issue 24): the captured step runs automatic batches instead (refused here if it cannot)
        self.captured = captured_step(self)

    # ----------------------------------------------------------------- automatic
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        """Call ``training_step`` through the strategy's wrapper (DDP sees the forward pass)."""
        if self._profiler is not None:
            with self._profiler.profile(self._step_label):
                return self._training_step(batch, batch_idx)
        return self._training_step(batch, batch_idx)

    def _training_step(self, batch: Any, batch_idx: int) -> Any:
        args = (batch, batch_idx) if self._pass_idx else (batch,)
        if self._sync_buffers:  # what the wrapper's forward would have done (DDP's broadcast_buffers)
            self.strategy.sync_buffers(self.trainer.model)
        # Manual optimization backpropagates inside training_step, so that does not run inside a wrapper's
        # forward (DDP would then wait for a backward after it); the strategy arms the wrapper before each
        # manual backward instead (Strategy.pre_manual_backward).
        if self._plain_forward:  # the default forward context is a null context
            if self._direct:
                return self.module.training_step(*args)
            return self.trainer.model("training_step", *args)
        with self.precision.forward_context():
            if self._direct:
                return self.module.training_step(*args)
            return self.trainer.model("training_step", *args)

    def closure(self) -> Any:
        """Lightning's optimizer closure: ``training_step``, zero_grad (first batch of a window), backward.
        Runs once per batch; a second call returns the same loss instead of back-propagating twice."""
        if self._ran:
            return self._loss
        self._ran = True
        loss, self.output = self._loss_of(self.training_step(self._batch, self._batch_idx))
        if self._zero_first:  # as Lightning's closure: also when the batch is skipped (its step then moves nothing)
            self.zero_grad()
        if loss is None:
            self._skip_batch()
            self._loss = None
            return None
        if self.accumulate > 1:
            loss = loss / self.accumulate
        self.backward(loss)
        self._loss = loss
        return loss

    @staticmethod
    def _loss_of(output: Any) -> tuple[Any, Any]:
        """``(loss, outputs)`` of what ``training_step`` returned: a tensor becomes ``{"loss": tensor}``."""
        if isinstance(output, dict):
            if "loss" not in output:
                raise KeyError(f"training_step returned a dict without the key 'loss' (keys: {sorted(output)}); "
                               "return {'loss': loss, ...} or the loss tensor")
            return output["loss"], output
        if output is None:
            return None, None
        if isinstance(output, torch.Tensor):
            return output, {"loss": output}
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

    def run_batch(self, batch: Any, batch_idx: int, boundary: bool) -> Any:
        """Train on one batch; step the optimizers when ``boundary`` ends the accumulation window. Returns the
        step's output (``{"loss": ...}``, or ``None`` when ``training_step`` skipped the batch) and whether the
        optimizers stepped."""
        if self.captured is not None:  # compile_step: loops/captured.py runs the batch
            output, stepped = self.captured.run_batch(batch, batch_idx, boundary)
            if stepped:
                self.trainer.global_step += 1
            return output, stepped
        if self._plain and boundary and self.accumulate == 1 and self.trainer.gradient_clip_val is None:
            return self._plain_batch(batch, batch_idx)
        self._batch, self._batch_idx = batch, batch_idx
        self._zero_first = self.accumulate == 1 or batch_idx % self.accumulate == 0
        self._ran = False
        self.output = None
        if not boundary:
            with self.strategy.no_backward_sync(self.trainer.model, enabled=True):
                self.closure()
            return self.output, False
        # Automatic optimization has one optimizer (several are refused before the fit starts, as in Lightning).
        self._stepped = False
        if self._optimizer_step is not None:
            self._optimizer_step(self.trainer.current_epoch, batch_idx, self.wrapped[0], self.closure)
        else:
            self.step(self.optimizers[0], self.closure)
        stepped = self._stepped
        if not self._ran:
            raise RuntimeError(f"{type(self.module).__name__}.optimizer_step did not call the closure: call "
                               "optimizer.step(closure=optimizer_closure) (it runs training_step and backward)")
        if stepped:
            self.trainer.run_state.progress.advance_step()
            if not self._plain_step_end:
                self.strategy.step_end()
        return self.output, stepped

    def _plain_batch(self, batch: Any, batch_idx: int) -> tuple[Any, bool]:
        """:meth:`run_batch` with nothing to call around the step: what the closure and :meth:`step` do, in one
        sequence (``training_step``, ``zero_grad``, ``backward``, ``optimizer.step()``)."""
        self._batch_idx = batch_idx
        module = self.module
        loss, output = self._loss_of(module.training_step(batch, batch_idx) if self._pass_idx else
                                     module.training_step(batch))
        self.output = output
        optimizer = self.optimizers[0]
        optimizer.zero_grad()
        if loss is None:
            self._skip_batch()
        elif self._marks:
            mark("backward")
            loss.backward()
            mark("after backward")
        else:
            loss.backward()
        optimizer.step()
        self.trainer.run_state.progress.advance_step()
        return output, True

    def zero_grad(self) -> None:
        """``on_before_zero_grad`` hooks and ``optimizer_zero_grad`` for every optimizer."""
        epoch, batch_idx = self.trainer.current_epoch, self._batch_idx
        for opt in self.optimizers:
            for fn in self._before_zero:
                fn(opt)
            if self._before_zero_m is not None:
                self._before_zero_m(opt)
            if self._zero_grad is not None:
                self._zero_grad(epoch, batch_idx, opt)
            else:
                opt.zero_grad()

    # ----------------------------------------------------------------- shared
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """``on_before_backward``, the backward pass (precision scaling; the Module's ``backward`` if
        overridden), ``on_after_backward``."""
        if self._marks:
            mark("backward")
        for fn in self._before_backward:
            fn(loss)
        if self._before_backward_m is not None:
            self._before_backward_m(loss)
        if not self.automatic:
            self.strategy.pre_manual_backward(self.trainer.model, loss)
        if self._backward is not None:
            self._backward(self.precision.scale_loss(loss), *args, **kwargs)
        elif args or kwargs:
            self.precision.scale_loss(loss).backward(*args, **kwargs)
        elif self._plain_backward:
            loss.backward()
        else:
            self.strategy.backward(loss)
        if self._marks:
            mark("after backward")
        for fn in self._after_backward:
            fn()
        if self._after_backward_m is not None:
            self._after_backward_m()

    def step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None) -> Any:
        """Run ``closure``, then step ``optimizer``: reduce gradients (strategies that do so at step time),
        unscale, ``on_before_optimizer_step``, clip (automatic), precision step; manual steps also count the
        global step and end the step on the strategy."""
        if self._profiler is not None:
            with self._profiler.profile(f"[Strategy]{type(self.strategy).__name__}.optimizer_step"):
                return self._step(optimizer, closure)
        return self._step(optimizer, closure)

    def _step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None) -> Any:
        result = closure() if closure is not None else None
        strategy, precision, plain = self.strategy, self.precision, self._plain_step
        if not plain:
            strategy.reduce_gradients(optimizer)
            precision.unscale_gradients(optimizer)
        for fn in self._before_step:
            fn(optimizer)
        if self._before_step_m is not None:
            self._before_step_m(optimizer)
        if self.automatic:
            trainer = self.trainer
            if self._clip_hook is not None:
                self._clip_hook(optimizer, trainer.gradient_clip_val, trainer.gradient_clip_algorithm)
            elif trainer.gradient_clip_val is not None:
                self.clip(optimizer, trainer.gradient_clip_val, trainer.gradient_clip_algorithm)
        if plain:
            optimizer.step()
        else:
            strategy.optimizer_step(optimizer)  # the strategy steps through the precision (a scaler)
        self._stepped = True
        if not self.automatic:
            self.trainer.run_state.progress.advance_step()
            if not self._plain_step_end:
                strategy.step_end()
        return result

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
