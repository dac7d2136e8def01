"""The captured training step, ``Trainer(compile_step=True)`` or ``compile_step={...torch.compile options}``.

An automatic-optimization batch is run as two calls compiled with ``torch.compile`` instead of the closure of
:class:`~accelkit.loops.optimization.Optimization`:

1. the *forward call*: ``training_step`` and the loss (divided by ``accumulate_grad_batches``), compiled with its
   backward graph (AOTAutograd), which ``loss.backward()`` then runs;
2. the *optimizer call*, at the end of each accumulation window: ``optimizer.step`` compiled (as one compiles it by
   hand), or with ``gradient_clip_val`` the clipping and ``optimizer.step()`` compiled together (torch's
   optimizers make their step a graph of its own, so ``fullgraph=True`` applies to the forward call only).

Between them the gradients are set to ``None`` at the start of a window (Lightning's ``zero_grad``). ``self.log``
inside ``training_step`` is recorded during the forward call and handed to the run's metric store right after it,
so logged values are those of the eager step. What the two calls cannot run - a hook around the backward pass or
the optimizer step, a strategy or precision that changes them - is refused before the fit starts, each reason a
sentence naming it (:func:`refusals`). The options are passed to ``torch.compile`` as given; the core interprets
none of them except to know whether the mode replays captured graphs (then logged values are copied out of the
graphs' memory, which the next replay overwrites).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from accelkit.callbacks.base import callback_base
from accelkit.errors import ConfigurationError
from accelkit.loops.hooks import STEP_HOOKS, STEP_OVERRIDES, accepts_positional
from accelkit.module.module import Module
from accelkit.precision import MixedPrecision, Precision
from accelkit.strategies.base import Strategy
from accelkit.utilities.model_helpers import is_overridden

if TYPE_CHECKING:  # annotations only: optimization.py imports this module
    import accelkit.loops.optimization
    from accelkit.loops.optimization import StepOutput

#: Module hooks that run between the forward pass, the backward pass and the optimizer step: the captured step
#: cannot call them, so a Module that overrides one is refused (the eager step's list: ``loops.hooks``)
MODULE_HOOKS = STEP_HOOKS + STEP_OVERRIDES
#: Callback hooks refused for the same reason
CALLBACK_HOOKS = STEP_HOOKS
#: ``torch.compile`` modes that replay captured graphs (their outputs live in memory the next replay reuses)
GRAPH_MODES = ("reduce-overhead", "max-autotune")
_ACCEPTS = ("compile_step takes False (the eager step, default), True (torch.compile's defaults) or a dict of "
            "torch.compile keyword arguments such as {'mode': 'reduce-overhead'}")


def compile_options(value: object) -> dict[str, Any] | None:
    """``Trainer(compile_step=...)`` as the keyword arguments of ``torch.compile`` (``None``: not captured).

    :raises TypeError: naming the value, when it is neither a bool nor a dict.
    :raises ValueError: naming the value, when the dict holds a key that ``torch.compile`` does not take (it takes
        ``fullgraph``, ``dynamic``, ``backend``, ``mode``, ``options``, ``disable``), or ``disable=True``.
    """
    if value is None or value is False:
        return None
    if value is True:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"compile_step={value!r} is a {type(value).__name__}; {_ACCEPTS}.")
    known = [name for name in inspect.signature(torch.compile).parameters if name != "model"]
    unknown = sorted(str(key) for key in value if key not in known)
    if unknown:
        raise ValueError(f"compile_step={value!r} has keys that torch.compile does not take ({', '.join(unknown)}); "
                         f"its keyword arguments are {', '.join(known)}.")
    if value.get("disable"):
        raise ValueError(f"compile_step={value!r} asks torch.compile to do nothing (disable=True); pass "
                         "compile_step=False for the eager step.")
    return dict(value)


def replays_graphs(options: dict[str, Any]) -> bool:
    """Whether ``torch.compile`` with ``options`` replays captured graphs (a mode of :data:`GRAPH_MODES`, or the
    ``triton.cudagraphs`` option)."""
    return options.get("mode") in GRAPH_MODES or bool((options.get("options") or {}).get("triton.cudagraphs"))


def _graph_accumulation(options: Mapping[str, object], accumulate: int) -> str:
    """The refusal of ``accumulate_grad_batches`` > 1 in a mode that replays graphs."""
    return (f"accumulate_grad_batches={accumulate} with compile_step={options!r}: a mode that replays graphs keeps "
            "a batch's gradients in the graphs' memory, which the next batch's replay reuses, so they cannot be "
            "summed over batches; use accumulate_grad_batches=1, a mode that does not replay graphs (the "
            "default), or compile_step=False.")


def _precision_refusal(precision: Precision) -> str | None:
    """Why ``precision`` changes the backward pass or the optimizer step (a gradient scaler...), or ``None``."""
    name = getattr(precision, "name", None) or type(precision).__name__
    if isinstance(precision, MixedPrecision) and precision.use_scaler:
        return (f"precision {name!r} scales the loss with a gradient scaler, which skips steps on inf/NaN gradients "
                "from the host; the captured step cannot: use a precision without a scaler (bf16-mixed, 32-true) or "
                "compile_step=False.")
    changed = precision.overridden_step_methods()
    if changed:
        return (f"precision {name!r} ({type(precision).__name__}) overrides {', '.join(changed)}, which the captured "
                "step does not call; use a precision that keeps the defaults, or compile_step=False.")
    return None


def refusals(optimization: accelkit.loops.optimization.Optimization) -> list[str]:
    """Every reason the fit of ``optimization`` cannot run as a captured step, each a sentence naming the hook,
    strategy, precision or setting and what would work (empty when it can)."""
    trainer, module = optimization.trainer, optimization.module
    cls = type(module).__name__
    problems: list[str] = []
    if not optimization.automatic:
        problems.append(f"{cls} uses manual optimization (automatic_optimization=False): its training_step steps "
                        "the optimizers itself, so there is no step to capture; use compile_step=False.")
    for optimizer in optimization.closure_optimizers:
        problems.append(f"{type(optimizer).__name__}.step() evaluates the loss several times through its closure; "
                        "the captured step runs it once; use compile_step=False.")
    if len(optimization.optimizers) != 1:
        problems.append(f"{cls}.configure_optimizers() gave {len(optimization.optimizers)} optimizers; the captured "
                        "step steps exactly one.")
    for hook in MODULE_HOOKS:
        if is_overridden(hook, module, Module):
            problems.append(f"{cls} overrides {hook}, which runs inside the training step and cannot run in the "
                            f"captured step; remove the override or pass compile_step=False.")
    for callback in optimization.hooks.callbacks:
        for hook in CALLBACK_HOOKS:
            if is_overridden(hook, callback, callback_base(callback)):
                problems.append(f"callback {type(callback).__name__} overrides {hook}, which runs inside the "
                                "training step and cannot run in the captured step; remove the callback or pass "
                                "compile_step=False.")
    strategy = optimization.strategy
    changed = [m for m in ("backward", "reduce_gradients", "optimizer_step", "step_end")
               if is_overridden(m, strategy, Strategy)]
    if trainer.model is not module or trainer.world_size > 1 or changed:
        what = f" (it overrides {', '.join(changed)})" if changed else ""
        problems.append(f"strategy {type(strategy).__name__}{what} wraps the model or exchanges gradients; the "
                        "captured step runs on one device with the default single-device strategy only.")
    for precision in {id(p): p for p in (optimization.precision, strategy.precision)}.values():
        problem = _precision_refusal(precision)
        if problem:
            problems.append(problem)
    options = trainer.compile_step or {}
    if replays_graphs(options) and trainer.accumulate_grad_batches > 1:
        problems.append(_graph_accumulation(options, trainer.accumulate_grad_batches))
    if trainer.profiler is not None:
        problems.append(f"profiler={type(trainer.profiler).__name__} times training_step and the optimizer step "
                        "apart, but the captured step runs them as compiled calls; drop the profiler or pass "
                        "compile_step=False.")
    return problems


class LogRecorder:
    """Stands in for the run's metric store while the forward call runs: ``self.log`` calls are kept in
    ``calls`` (values as traced, tensors being outputs of the compiled call) and replayed afterwards."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        #: never a repeat (the run store's ``repeats`` are not consulted under capture): every call is kept in
        #: full, to be replayed through the run's store; ``None`` also tells ``Module.log`` to read no frame (which
        #: ``torch.compile`` cannot trace), so the replayed calls are not remembered as repeats
        self.repeats: None = None

    def log(self, *args: Any) -> None:
        """Keep one :meth:`~accelkit.loops.metrics.MetricStore.log` call's arguments."""
        self.calls.append(args)


class CapturedStep:
    """The compiled calls of one fit and how a batch runs through them (see the module's description).

    :param optimization: the fit's :class:`~accelkit.loops.optimization.Optimization` (its module, optimizer,
        precision and accumulation).
    :param options: ``torch.compile``'s keyword arguments.
    """

    def __init__(self, optimization: accelkit.loops.optimization.Optimization, options: dict[str, Any]) -> None:
        self.optimization = optimization
        self.trainer, self.module = optimization.trainer, optimization.module
        self.optimizer = optimization.optimizers[0]
        self.options = options
        self.recorder = LogRecorder()
        self.pass_idx = accepts_positional(self.module.training_step, 2)
        self.graphs = replays_graphs(options)
        precision = optimization.precision
        self.forward_context = precision.forward_context if is_overridden(
            "forward_context", precision, Precision) else None
        self.forward_call = torch.compile(self.forward, **options)
        # torch's optimizers break the graph around their step on purpose (so that it compiles as an in-place
        # update), so fullgraph=True holds for the forward call only. Without clipping the optimizer's own step is
        # compiled, as one would by hand: a function around it would be one more compiled frame, with its guards
        # and its own graph break, on every step.
        step_options = {k: v for k, v in options.items() if k != "fullgraph"}
        self.step_call = torch.compile(self.optimizer.step, **step_options)
        self.clip_step_call = torch.compile(self.clip_and_step, **step_options)

    def as_fresh(self) -> None:
        """After a checkpoint's optimizer state is loaded: the optimizer as a fresh fit's compiled step leaves it.

        ``torch.compile`` decides an optimizer's ``capturable`` at its first step, and only while its state is
        empty: a fresh fit gets the optimizer's own setting, or ``True`` where the accelerator says
        (:attr:`~accelkit.Accelerator.compiled_optimizer_capturable`); a resumed fit would keep what the checkpoint
        says, which the run that wrote it decided, on its device. Each parameter group that has the setting gets the
        fresh fit's, and its step counters are kept where that puts them: on the parameter's device when
        capturable, on the host otherwise (as torch's optimizers keep them)."""
        optimizer = self.optimizer
        fresh = bool(optimizer.defaults.get("capturable")) or self.trainer.accelerator.compiled_optimizer_capturable
        for group in optimizer.param_groups:
            if group.get("capturable", fresh) == fresh:
                continue
            group["capturable"] = fresh
            for param in group["params"]:
                step = optimizer.state.get(param, {}).get("step")
                if isinstance(step, torch.Tensor):
                    optimizer.state[param]["step"] = (step.to(dtype=torch.float32, device=param.device) if fresh
                                                      else torch.tensor(float(step), dtype=step.dtype))

    def forward(self, batch: object, batch_idx: int, accumulate: int) -> tuple[object, object]:
        """``training_step`` and the loss to back-propagate (traced by ``torch.compile``): ``(loss, output)``, as
        ``training_step`` gave them (:meth:`run_batch` checks them)."""
        module = self.module
        output = module.training_step(batch, batch_idx) if self.pass_idx else module.training_step(batch)
        loss = output.get("loss") if isinstance(output, dict) else output
        if accumulate > 1 and loss is not None:
            loss = loss / accumulate
        return loss, output

    def clip_and_step(self, clip_value: float, algorithm: str) -> None:
        """Clip the gradients (by norm or value) and step the optimizer (traced by ``torch.compile``)."""
        params = [p for group in self.optimizer.param_groups for p in group["params"] if p.grad is not None]
        if algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, clip_value)
        else:
            torch.nn.utils.clip_grad_norm_(params, clip_value)
        self.optimizer.step()

    def run_batch(self, batch: object, batch_idx: int, boundary: bool) -> tuple[StepOutput, bool]:
        """Train on one batch: the forward call, ``zero_grad`` at a window's start, the backward pass, and at
        ``boundary`` the optimizer call. Returns ``training_step``'s output as ``{"loss": ...}`` (a dict it
        returned, as it returned it) and whether the optimizer stepped."""
        accumulate = self.optimization.accumulate
        if self.graphs:
            if accumulate > 1:  # set during the fit (a GradientAccumulationScheduler); refused at setup otherwise
                raise RuntimeError(_graph_accumulation(self.options, accumulate))
            torch.compiler.cudagraph_mark_step_begin()
        loss, output = self.record(batch, batch_idx, accumulate)
        if loss is None or not isinstance(loss, torch.Tensor):
            raise self.bad_output(output, batch_idx)
        if accumulate == 1 or batch_idx % accumulate == 0:
            self.optimizer.zero_grad()
        loss.backward()
        if not boundary:
            return (output if isinstance(output, dict) else {"loss": output}), False
        trainer = self.trainer
        if trainer.gradient_clip_val:
            self.clip_step_call(trainer.gradient_clip_val, trainer.gradient_clip_algorithm or "norm")
        else:
            self.step_call()
        return (output if isinstance(output, dict) else {"loss": output}), True

    def record(self, batch: object, batch_idx: int, accumulate: int) -> tuple[object, object]:
        """The forward call with ``self.log`` recorded, then the recorded calls given to the run's metric store
        (copied out of the graphs' memory in a mode that replays graphs)."""
        state = self.trainer.run_state
        store, recorder = state.metrics, self.recorder
        # the recorder stands in for the store while the forward call runs (Module.log only calls its log method)
        state.metrics = recorder  # type: ignore[assignment]
        try:
            if self.forward_context is None:
                loss, output = self.forward_call(batch, batch_idx, accumulate)
            else:
                with self.forward_context():
                    loss, output = self.forward_call(batch, batch_idx, accumulate)
        finally:
            state.metrics = store
        calls, recorder.calls = recorder.calls, []
        for name, value, *rest in calls:
            if self.graphs and isinstance(value, torch.Tensor):
                value = value.detach().clone()
            store.log(name, value, *rest)
        return loss, output

    def bad_output(self, output: object, batch_idx: int) -> Exception:
        """The error for a ``training_step`` output without a loss tensor, naming what it returned."""
        cls = type(self.module).__name__
        if output is None:
            return RuntimeError(f"{cls}.training_step returned None for batch {batch_idx}: the captured step "
                                "(compile_step) cannot skip a batch; return the loss (loss * 0 to skip its effect) "
                                "or pass compile_step=False.")
        if isinstance(output, dict):
            return KeyError(f"training_step returned a dict without a tensor under 'loss' (keys: {sorted(output)}); "
                            "return {'loss': loss, ...} or the loss tensor")
        return TypeError(f"training_step returned {type(output).__name__}; return the loss tensor or a dict with "
                         "'loss'")


def captured_step(optimization: accelkit.loops.optimization.Optimization) -> CapturedStep | None:
    """The captured step of a fit whose Trainer has ``compile_step`` set (``None`` otherwise).

    :raises ConfigurationError: listing every reason the fit cannot be captured (:func:`refusals`).
    """
    options = optimization.trainer.compile_step
    if options is None:
        return None
    problems = refusals(optimization)
    if problems:
        raise ConfigurationError([f"compile_step: {p}" for p in problems])
    return CapturedStep(optimization, options)
