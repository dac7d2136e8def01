"""Unit tests of one optimization step (``accelkit.loops.optimization.Optimization``), driven directly: a real CPU
Trainer and Module, no fit loop around them."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn

import accelkit
from accelkit.loops.hooks import HookCaller
from accelkit.loops.optimization import Optimization
from accelkit.precision import MixedPrecision, Precision
from accelkit.profilers import Profiler
from helpers.models import quiet_trainer

BATCHES = [(torch.randn(8, 4, generator=torch.Generator().manual_seed(i)),
            torch.randn(8, 1, generator=torch.Generator().manual_seed(100 + i))) for i in range(6)]


class Net(accelkit.Module):
    """A linear regression trained with SGD with momentum (so that a missed or doubled step shows)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class HookedNet(Net):
    """:class:`Net` overriding every hook of the step, each doing what the default does, and recording its
    calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def on_before_zero_grad(self, optimizer: Any) -> None:
        self.calls.append("on_before_zero_grad")

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        self.calls.append("optimizer_zero_grad")
        super().optimizer_zero_grad(epoch, batch_idx, optimizer)

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self.calls.append("on_before_backward")

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self.calls.append("backward")
        super().backward(loss, *args, **kwargs)

    def on_after_backward(self) -> None:
        self.calls.append("on_after_backward")

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.calls.append("on_before_optimizer_step")

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                    gradient_clip_algorithm: Any = None) -> None:
        self.calls.append("configure_gradient_clipping")
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self.calls.append("optimizer_step")
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)


class StepRecorder(accelkit.Callback):
    """Records the callback hooks of the step."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_before_zero_grad(self, trainer: Any, module: Any, optimizer: Any) -> None:
        self.calls.append("on_before_zero_grad")

    def on_before_backward(self, trainer: Any, module: Any, loss: torch.Tensor) -> None:
        self.calls.append("on_before_backward")

    def on_after_backward(self, trainer: Any, module: Any) -> None:
        self.calls.append("on_after_backward")

    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        self.calls.append("on_before_optimizer_step")


class ActionRecorder(Profiler):
    """A profiler that keeps the name of every action it was asked to record."""

    def __init__(self) -> None:
        super().__init__()
        self.actions: list[str] = []

    def start(self, action_name: str) -> None:
        self.actions.append(action_name)

    def stop(self, action_name: str) -> None:
        pass

    def summary(self) -> str:
        return "\n".join(self.actions)


class LossScaling(Precision):
    """A gradient scaler's contract without the scaler: the loss is multiplied by 1024 before backward, the gradients
    are divided back once per step (by the clipping or by the step, whichever comes first)."""

    name = "loss-scaling"

    def __init__(self) -> None:
        super().__init__()
        self.scaled = self.stepped = 0
        self.unscaled = False

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        self.scaled += 1
        return loss * 1024

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        if not self.unscaled:
            self.unscaled = True
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is not None:
                        param.grad.div_(1024)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, step: Any = None) -> bool:
        self.unscale_gradients(optimizer)
        (step or optimizer.step)()
        self.unscaled = False
        self.stepped += 1
        return True


def optimization(module: accelkit.Module, tmp_path: Any, callbacks: tuple = (), **trainer_args: Any) -> Optimization:
    """The ``Optimization`` a fit of ``module`` would build, on a real one-process CPU Trainer."""
    trainer = quiet_trainer(tmp_path, callbacks=list(callbacks), **trainer_args)
    module.trainer = trainer
    trainer.run_state.begin(module)
    hooks = HookCaller(trainer, module, trainer.callbacks, trainer.profiler)
    opt = trainer.run_state.optimization = Optimization(trainer, module, hooks, [module.configure_optimizers()])
    return opt


def train(opt: Optimization, accumulate: int = 1) -> list[Any]:
    """Run every batch of :data:`BATCHES` through ``opt``, stepping every ``accumulate`` batches; the outputs."""
    opt.accumulate = accumulate
    run_batch = opt.batch_runner()  # as the fit loop asks, once per epoch
    return [run_batch(batch, i, boundary=(i + 1) % accumulate == 0)[0] for i, batch in enumerate(BATCHES)]


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("clip", [None, 0.05])
def test_hooks_on_or_off_give_the_same_parameters(tmp_path, accumulate, clip):
    """The step with nothing overridden and the step with every hook overridden (each doing the default) are one
    implementation: the same parameters and the same step count after the same batches."""
    plain, hooked, recorder = Net(), HookedNet(), StepRecorder()
    plain_opt = optimization(plain, tmp_path, gradient_clip_val=clip)
    hooked_opt = optimization(hooked, tmp_path, callbacks=(recorder,), gradient_clip_val=clip)
    train(plain_opt, accumulate)
    train(hooked_opt, accumulate)
    for (name, a), b in zip(plain.named_parameters(), hooked.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"{name} differs")
    steps = len(BATCHES) // accumulate
    assert plain_opt.trainer.global_step == hooked_opt.trainer.global_step == steps
    assert hooked.calls.count("optimizer_step") == hooked.calls.count("configure_gradient_clipping") == steps
    assert hooked.calls.count("backward") == len(BATCHES)
    assert hooked.calls.count("optimizer_zero_grad") == steps  # first batch of each window
    assert recorder.calls.count("on_after_backward") == len(BATCHES)
    # a clipped run differs from an unclipped one (the clipping phase ran on both sides)
    if clip is not None:
        unclipped = Net()
        train(optimization(unclipped, tmp_path), accumulate)
        assert not torch.equal(unclipped.layer.weight, plain.layer.weight)


@pytest.mark.parametrize("accumulate", [1, 3])
def test_a_precision_that_scales_the_loss_steps_through_the_same_path(tmp_path, accumulate):
    """A precision that scales the loss and unscales the gradients (the strategy's and the precision's backward and
    step, not the plain ones) ends where the default precision does, clipping included."""
    default, scaled, precision = Net(), Net(), LossScaling()
    train(optimization(default, tmp_path, gradient_clip_val=0.05), accumulate)
    train(optimization(scaled, tmp_path, gradient_clip_val=0.05, plugins=[precision]), accumulate)
    for a, b in zip(default.parameters(), scaled.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert precision.scaled == len(BATCHES) and precision.stepped == len(BATCHES) // accumulate


def test_step_hooks_run_in_lightnings_order(tmp_path):
    """One batch: zero_grad, backward and the optimizer step with their hooks, callbacks before the Module."""
    module, recorder = HookedNet(), StepRecorder()
    opt = optimization(module, tmp_path, callbacks=(recorder,))
    combined = module.calls
    recorder.calls = combined  # one list: the callbacks' and the Module's calls interleaved as they happen
    opt.run_batch(BATCHES[0], 0, boundary=True)
    assert combined == ["optimizer_step", "on_before_zero_grad", "on_before_zero_grad", "optimizer_zero_grad",
                        "on_before_backward", "on_before_backward", "backward", "on_after_backward",
                        "on_after_backward", "on_before_optimizer_step", "on_before_optimizer_step",
                        "configure_gradient_clipping"]


def test_profiler_records_the_step_phases(tmp_path):
    """With a profiler, training_step, the optimizer step and the overridden hooks are recorded under their
    Lightning labels, once per batch."""
    profiler = ActionRecorder()
    opt = optimization(HookedNet(), tmp_path, profiler=profiler)
    train(opt)
    for label in ("[LightningModule]HookedNet.training_step", "[Strategy]SingleDeviceStrategy.optimizer_step",
                  "[LightningModule]HookedNet.optimizer_step", "[LightningModule]HookedNet.backward",
                  "[LightningModule]HookedNet.on_before_optimizer_step"):
        assert profiler.actions.count(label) == len(BATCHES), label


def test_no_instance_attribute_shadows_a_method(tmp_path):
    """No instance attribute of an ``Optimization`` shadows one of its methods, with a profiler or without, in
    automatic or manual optimization: what runs is decided at setup, in fields of their own."""
    manual = Net()
    manual.automatic_optimization = False
    cases = [optimization(Net(), tmp_path), optimization(Net(), tmp_path, profiler=ActionRecorder()),
             optimization(manual, tmp_path), optimization(HookedNet(), tmp_path)]
    methods = {name for name in dir(Optimization) if callable(getattr(Optimization, name))}
    for opt in cases:
        assert "training_step" not in vars(opt) and "step" not in vars(opt)
        assert not methods & set(vars(opt)), sorted(methods & set(vars(opt)))


def test_global_step_counts_optimizer_steps_only(tmp_path):
    """A batch inside an accumulation window does not step; a boundary batch steps once."""
    module = Net()
    opt = optimization(module, tmp_path)
    opt.accumulate = 3
    before = module.layer.weight.detach().clone()
    assert opt.run_batch(BATCHES[0], 0, boundary=False)[1] is False
    assert opt.run_batch(BATCHES[1], 1, boundary=False)[1] is False
    assert opt.trainer.global_step == 0 and torch.equal(module.layer.weight, before)
    output, stepped = opt.run_batch(BATCHES[2], 2, boundary=True)
    assert stepped and opt.trainer.global_step == 1 and set(output) == {"loss"}
    assert not torch.equal(module.layer.weight, before)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_skipped_batch_warns_once_and_still_counts_the_step(tmp_path, accumulate):
    """``training_step`` returning None: no backward, a warning once per run, and the (empty) step is counted, with
    or without accumulation."""

    class Skipping(Net):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return None

    module = Skipping()
    opt = optimization(module, tmp_path)
    opt.accumulate = accumulate
    run_batch = opt.batch_runner()
    before = module.layer.weight.detach().clone()
    with pytest.warns(UserWarning, match="returned None for batch 0"):
        run_batch(BATCHES[0], 0, boundary=accumulate == 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        output, stepped = run_batch(BATCHES[1], 1, boundary=True)
    assert output is None and stepped and opt.trainer.global_step == (2 if accumulate == 1 else 1)
    assert torch.equal(module.layer.weight, before)


def test_optimizer_step_override_must_call_the_closure(tmp_path):
    class NoClosure(Net):
        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
            optimizer.step()

    opt = optimization(NoClosure(), tmp_path)
    with pytest.raises(RuntimeError, match="NoClosure.optimizer_step did not call the closure"):
        opt.run_batch(BATCHES[0], 0, boundary=True)


def test_optimizer_step_override_may_skip_the_step(tmp_path):
    """An override that runs the closure without stepping: no step is counted and the weights stay."""

    class EverySecond(Net):
        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
            if batch_idx % 2:
                optimizer.step(closure=optimizer_closure)
            else:
                optimizer_closure()

    opt = optimization(EverySecond(), tmp_path)
    assert [opt.run_batch(b, i, boundary=True)[1] for i, b in enumerate(BATCHES)] == [False, True] * 3
    assert opt.trainer.global_step == 3


def test_manual_step_counts_inside_opt_step(tmp_path):
    """Manual optimization: ``opt.step()`` in ``training_step`` counts the step where it happens."""

    class Manual(Net):
        automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(super().training_step(batch, batch_idx))
            opt.step()
            self.seen.append(self.trainer.global_step)

    module = Manual()
    module.seen = []
    opt = optimization(module, tmp_path)
    for i, batch in enumerate(BATCHES[:3]):
        opt.training_step(batch, i)
    assert module.seen == [1, 2, 3]


@pytest.mark.parametrize("scaler", [False, True])
def test_a_mixed_precision_without_a_gradient_scaler_steps_plainly(tmp_path, scaler):
    """``bf16-mixed`` has no gradient scaler: its step is ``loss.backward()`` and ``optimizer.step()`` with no
    precision method around them (``Precision.passes_through``, decided once per fit); only the autocast context is
    entered per step. With a scaler the precision's methods run."""
    import sys

    import accelkit.precision as precision_module

    opt = optimization(Net(), tmp_path, plugins=[MixedPrecision(torch.bfloat16, scaler=scaler)])
    assert opt.precision.passes_through() is not scaler
    called: set[str] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename == precision_module.__file__:
            called.add(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        train(opt)
    finally:
        sys.setprofile(None)
    per_step = {"forward_context", "scale_loss", "optimizer_step", "unscale_gradients", "backward"} if scaler else \
        {"forward_context"}
    assert per_step <= called and (called - per_step) <= {"_ensure_scaler"}, called
    assert opt.trainer.global_step == len(BATCHES)


def test_the_epochs_batch_runner_trains_as_run_batch_with_clipping_changed_mid_run(tmp_path):
    """What the fit loop runs per batch (:meth:`Optimization.batch_runner`, asked once per epoch) trains as
    :meth:`Optimization.run_batch` does: the same outputs, parameters and step count, ``gradient_clip_val`` read at
    each step (set after the second batch, it clips from the third on, as Lightning reads it) although the runner
    was made before it was set."""
    results = []
    for choose in (Optimization.batch_runner, lambda opt: opt.run_batch):
        module = Net()
        opt = optimization(module, tmp_path)
        run_batch = choose(opt)
        outputs = []
        for i, batch in enumerate(BATCHES):
            if i == 2:
                opt.trainer.gradient_clip_val = 0.01
            output, stepped = run_batch(batch, i, boundary=True)
            assert stepped and set(output) == {"loss"}
            outputs.append(float(output["loss"]))
        results.append((outputs, [p.detach().clone() for p in module.parameters()], opt.trainer.global_step))
    (outputs_a, params_a, steps_a), (outputs_b, params_b, steps_b) = results
    assert outputs_a == outputs_b and steps_a == steps_b == len(BATCHES)
    for a, b in zip(params_a, params_b, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    unclipped = Net()
    train(optimization(unclipped, tmp_path))
    assert not torch.equal(unclipped.layer.weight, params_a[0])  # the clipping set mid-run took effect


def test_every_step_hook_is_called_by_the_eager_step_and_refused_by_the_captured_one(tmp_path):
    """The hooks of the automatic step are listed once (``loops.hooks.STEP_HOOKS``): a callback overriding any of
    them is called by the eager step, once per batch that steps, and the captured step refuses it by the same list
    (a new step hook is added in one place)."""
    from accelkit.loops import captured, hooks

    assert set(captured.CALLBACK_HOOKS) == set(hooks.STEP_HOOKS)
    assert set(captured.MODULE_HOOKS) == set(hooks.STEP_HOOKS) | set(hooks.STEP_OVERRIDES)
    recorder = StepRecorder()  # overrides each of them
    opt = optimization(Net(), tmp_path, callbacks=(recorder,))
    train(opt)
    assert sorted(set(recorder.calls)) == sorted(hooks.STEP_HOOKS)
    assert all(recorder.calls.count(name) == len(BATCHES) for name in hooks.STEP_HOOKS), recorder.calls


def test_an_overridden_optimizer_step_gets_a_closure_that_back_propagates_once(tmp_path):
    """Lightning's closure: an ``optimizer_step`` override that calls it twice before stepping gets the same loss
    back and the batch is back-propagated once (the parameters end as with the default step)."""

    class CallsTwice(HookedNet):
        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
            first = optimizer_closure()
            assert optimizer_closure() is first
            optimizer.step(closure=optimizer_closure)

    default, twice = Net(), CallsTwice()
    train(optimization(default, tmp_path))
    opt = optimization(twice, tmp_path)
    train(opt)
    assert twice.calls.count("backward") == len(BATCHES) and opt.trainer.global_step == len(BATCHES)
    for a, b in zip(default.parameters(), twice.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_an_optimizer_that_evaluates_the_loss_itself_reruns_the_step_per_evaluation(tmp_path):
    """LBFGS with the default ``optimizer_step``: each evaluation runs ``training_step``, zero-grad and backward anew
    (as Lightning's closure), and one step is counted per batch."""

    class Lbfgs(Net):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def on_after_backward(self) -> None:
            self.calls.append("backward")

        def configure_optimizers(self) -> Any:
            return torch.optim.LBFGS(self.parameters(), lr=0.1, max_iter=3)

    module = Lbfgs()
    opt = optimization(module, tmp_path)
    before = module.layer.weight.detach().clone()
    train(opt)
    assert opt.trainer.global_step == len(BATCHES)
    assert module.calls.count("backward") > len(BATCHES)  # several evaluations per step
    assert not torch.equal(module.layer.weight, before)
